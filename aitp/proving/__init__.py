"""Theorem proving: prover environments, theorem sets, proof trees, search, tactic policies, traces, learning."""

from aitp.proving.backends import BACKENDS, backend_available, open_env
from aitp.proving.env import CheckResult, Goal, ProofStep, ProverEnv, TacticResult, Theorem
from aitp.proving.errors import (
    ProverUnavailableError,
    TacticRejectedError,
    UnknownBackendError,
    UnknownTheoremError,
)
from aitp.proving.external_training import TrainCommand, train_after_eval, update_checkpoints
from aitp.proving.generative import GenerativeTacticPolicy
from aitp.proving.learning import decide_promotion, search_theorems, train_slice
from aitp.proving.policies import FixedTacticPolicy, fit_prior
from aitp.proving.premises import PremiseScorer
from aitp.proving.prover_models import PolicySettings, ProverModels, load_prover_models
from aitp.proving.prover_training import train_prover_models
from aitp.proving.ranked_policy import Exploration, RankedTacticPolicy
from aitp.proving.search import SEARCHES, Budget, SearchConfig, SearchResult, TacticSuggestion, make_search
from aitp.proving.tactic_ranker import TacticRanker
from aitp.proving.theorems import TheoremSet, load_theorem_set, split_of
from aitp.proving.traces import trace_rows
from aitp.proving.training_data import TrainingData, select_training_data
from aitp.proving.tree import ProofTree, Status

__all__ = [
    "BACKENDS",
    "SEARCHES",
    "Budget",
    "CheckResult",
    "Exploration",
    "FixedTacticPolicy",
    "GenerativeTacticPolicy",
    "Goal",
    "PolicySettings",
    "PremiseScorer",
    "ProofStep",
    "ProofTree",
    "ProverEnv",
    "ProverModels",
    "ProverUnavailableError",
    "RankedTacticPolicy",
    "SearchConfig",
    "SearchResult",
    "Status",
    "TacticRanker",
    "TacticRejectedError",
    "TacticResult",
    "TacticSuggestion",
    "Theorem",
    "TheoremSet",
    "TrainCommand",
    "TrainingData",
    "UnknownBackendError",
    "UnknownTheoremError",
    "backend_available",
    "decide_promotion",
    "fit_prior",
    "load_prover_models",
    "load_theorem_set",
    "make_search",
    "open_env",
    "search_theorems",
    "select_training_data",
    "split_of",
    "trace_rows",
    "train_after_eval",
    "train_prover_models",
    "train_slice",
    "update_checkpoints",
]
