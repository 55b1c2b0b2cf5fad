"""One proving iteration's stages as library calls: pick a train slice, search it, evaluate, decide promotion.

The loop engine composes them (search a slice with exploration → commit traces → select data →
train → evaluate on the valid split at a fixed budget → promote when strictly better); the
calibration script `benchmarks/prove_learning.py` runs exactly this sequence with one prover.
"""

from __future__ import annotations

import hashlib
import random
import re
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

from aitp.paired import PairedGain, gain_on_shared_items
from aitp.proving.data.theorem_set import TheoremSet, split_of
from aitp.proving.data.traces import merge_rows, trace_rows, write_traces
from aitp.proving.env import ProverEnv, Theorem
from aitp.proving.errors import ProverCrashedError
from aitp.proving.search.base import Search, SearchResult, TacticPolicy
from aitp.registry.promotion import decide


@dataclass(frozen=True)
class Attempt:
    """What one proof search of one theorem came to."""

    theorem: str
    proved: bool  # a proof the prover re-checked
    expansions: int
    prover_seconds: float
    wall_seconds: float
    proof_steps: int = 0
    outcome: str = ""  # `SearchResult.outcome`: proved, or why not
    restarts: int = 0  # `SearchResult.restarts`: the prover died or hung and was replaced this often


@dataclass
class SearchOutcome:
    """The attempts of one search pass over a list of theorems, and their trace rows for the lake."""

    attempts: list[Attempt]
    rows: dict[str, list[dict]] = field(default_factory=dict)

    @property
    def proved(self) -> dict[str, bool]:
        """Theorem name -> re-checked proof found."""
        return {a.theorem: a.proved for a in self.attempts}

    def summary(self) -> dict[str, float]:
        """Proof rate, proofs, expansions per proof, prover and wall seconds, mean proof length."""
        n = len(self.attempts)
        won = [a for a in self.attempts if a.proved]
        expansions = sum(a.expansions for a in self.attempts)
        return {
            "theorems": n,
            "proved": len(won),
            "proof_rate": len(won) / n if n else 0.0,
            "expansions": expansions,
            "expansions_per_proof": expansions / len(won) if won else float("nan"),
            "prover_seconds": sum(a.prover_seconds for a in self.attempts),
            "wall_seconds": sum(a.wall_seconds for a in self.attempts),
            "mean_proof_steps": sum(a.proof_steps for a in won) / len(won) if won else float("nan"),
            "prover_restarts": sum(a.restarts for a in self.attempts),
        }


def train_slice(library: TheoremSet, iteration: int, size: int, seed: int = 0) -> list[Theorem]:
    """The `iteration`-th slice of `size` train theorems of a fixed seeded permutation (cycling round)."""
    train = library.split("train")
    if not train or size <= 0:
        return []
    order = list(range(len(train)))
    random.Random(int.from_bytes(hashlib.sha256(f"slice/{seed}".encode()).digest()[:8], "big")).shuffle(order)
    start = (iteration * size) % len(train)
    picked = [order[(start + i) % len(train)] for i in range(min(size, len(train)))]
    return [train[i] for i in picked]


def search_theorems(
    env: ProverEnv,
    theorems: list[Theorem],
    search: Search,
    policy: TacticPolicy,
    experiment: str = "",
    iteration: int = 0,
    model_version: str = "",
) -> SearchOutcome:
    """Search each theorem once with `policy`; every proof is re-checked by the prover (the search does it).

    A prover that dies inside a tactic is an error edge of the search (`ProverEnv.run_tactic`); one that dies
    between tactics is replaced and the theorem searched again, so no theorem of the list is lost.
    """
    attempts, parts = [], []
    for theorem in theorems:
        result = search_one(env, theorem, search, policy)
        attempts.append(
            Attempt(
                theorem.name,
                result.proved and result.check is not None,
                result.expansions,
                result.prover_seconds,
                result.wall_seconds,
                result.proof.size() if result.proof is not None and result.proved else 0,
                result.outcome,
                result.restarts,
            )
        )
        parts.append(
            trace_rows(result, env.name, experiment, iteration, split_of(theorem.name), model_version=model_version)
        )
    return SearchOutcome(attempts, merge_rows(parts))


def search_one(env: ProverEnv, theorem: Theorem, search: Search, policy: TacticPolicy) -> SearchResult:
    """One search of one theorem that survives its prover: a death inside a tactic is an error edge and a fresh
    session (`ProverEnv.run_tactic`); one between tactics (opening the theorem, the re-check) starts the search
    again, once, on a fresh session. Every death is counted in the result and said in one line naming the theorem."""
    try:
        result = search.run(env, theorem, policy)
    except ProverCrashedError:
        env.recover()
        result = search.run(env, theorem, policy)
        result = replace(result, restarts=result.restarts + 1)
    if result.restarts:
        print(
            f"warning: the {env.name} prover died or hung {result.restarts} time(s) while searching "
            f"{theorem.name}; a fresh session took over each time ({result.outcome})",
            file=sys.stderr,
            flush=True,
        )
    return result


def commit_traces(home: str | Path, experiment: str, iteration: int, outcome: SearchOutcome, shard: str) -> str:
    """Write one pass's proof tables to the lake as shard `shard` of the iteration (rerun: replaced)."""
    return write_traces(home, experiment, iteration, outcome.rows, re.sub(r"[^A-Za-z0-9_-]", "_", shard)[:64])


@dataclass(frozen=True)
class Promotion:
    """Whether the challenger replaces the champion, and the paired gain behind the decision."""

    promote: bool
    gain: PairedGain
    reason: str


def paired_proof_gain(
    champion: dict[str, bool], challenger: dict[str, bool], names: tuple[str, str] = ("champion", "challenger")
) -> PairedGain:
    """Proof rate of the challenger minus the champion's on the theorems both attempted, paired bootstrap 95%."""
    gain = gain_on_shared_items(champion, challenger, names[0], names[1])
    if gain is None:
        raise ValueError("the two evaluations share no theorem: evaluate both on the same valid theorems")
    return gain


def decide_promotion(champion: dict[str, bool], challenger: dict[str, bool], min_gain: int = 1) -> Promotion:
    """Promote only a strict gain: the challenger proves at least `min_gain` more of the same theorems.

    The rule is the registry's (`aitp.registry.promotion.decide`) on counts of proved theorems, `min_gain` its
    margin: below 1 it asks for any strict gain, as a margin of 0 does.
    """
    gain = paired_proof_gain(champion, challenger)
    proved_by_champion, proved_by_challenger = round(gain.rate_a * gain.n_items), round(gain.rate_b * gain.n_items)
    more = proved_by_challenger - proved_by_champion
    promote, _ = decide(proved_by_challenger, proved_by_champion, min_gain)
    verdict = "proves" if promote else "does not prove"
    reason = f"challenger {verdict} {min_gain}+ more valid theorems ({more:+d}; gain {gain})"
    return Promotion(promote, gain, reason)
