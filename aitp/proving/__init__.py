"""Theorem proving: prover environments, theorem sets, proof trees, search, tactic policies, traces."""

from aitp.proving.backends import BACKENDS, backend_available, open_env
from aitp.proving.env import CheckResult, Goal, ProofStep, ProverEnv, TacticResult, Theorem
from aitp.proving.errors import (
    ProverUnavailableError,
    TacticRejectedError,
    UnknownBackendError,
    UnknownTheoremError,
)
from aitp.proving.generative import GenerativeTacticPolicy
from aitp.proving.policies import FixedTacticPolicy, fit_prior
from aitp.proving.premises import PremiseScorer
from aitp.proving.search import SEARCHES, Budget, SearchConfig, SearchResult, TacticSuggestion, make_search
from aitp.proving.theorems import TheoremSet, load_theorem_set, split_of
from aitp.proving.traces import trace_rows
from aitp.proving.tree import ProofTree, Status

__all__ = [
    "BACKENDS",
    "SEARCHES",
    "Budget",
    "CheckResult",
    "FixedTacticPolicy",
    "GenerativeTacticPolicy",
    "Goal",
    "PremiseScorer",
    "ProofStep",
    "ProofTree",
    "ProverEnv",
    "ProverUnavailableError",
    "SearchConfig",
    "SearchResult",
    "Status",
    "TacticRejectedError",
    "TacticResult",
    "TacticSuggestion",
    "Theorem",
    "TheoremSet",
    "UnknownBackendError",
    "UnknownTheoremError",
    "backend_available",
    "fit_prior",
    "load_theorem_set",
    "make_search",
    "open_env",
    "split_of",
    "trace_rows",
]
