"""How a prover model is evaluated: the fixed first valid theorems, searched greedily at a fixed budget.

The evaluation's name carries a hash of its theorems and its search protocol, so a changed valid set or
budget is refused on an experiment measured with another. It commits `evals` and `eval_samples` rows (one
per theorem: proved or not), so the engine's gate and paired statistics work unchanged, and the valid
searches' traces beside them; the `proof_search` view's figures ride along to MLflow.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from aitp.evals import EvalResult, load_eval, pinned_eval_name
from aitp.policies.spec import PolicySpec
from aitp.proving.data.theorem_set import TheoremSet
from aitp.proving.data.traces import TRACE_TABLES
from aitp.proving.env import Theorem
from aitp.proving.shards import SearchJob, search_shard

if TYPE_CHECKING:
    from aitp.proving.config import ProvingConfig

_FIGURES_SQL = """
    SELECT n_searched, n_proved, proof_rate, ci95_low, ci95_high, n_new, n_retained, n_proved_to_date,
           mean_proof_length, valid_tactic_rate, expansions_per_proof, prover_seconds_per_proof, prover_restarts
    FROM proof_search WHERE experiment = $e AND iteration = $k AND split = $s"""


class ValidSearches(Protocol):
    """What an evaluation needs of its environment: the proving settings, the theorem set, a search job."""

    proving: ProvingConfig

    @property
    def library(self) -> TheoremSet: ...

    def job(self, checkpoint: str | None, iteration: int, train: bool) -> SearchJob: ...


def search_figures(home: Path, experiment: str, iteration: int, split: str) -> dict[str, float]:
    """The iteration's `proof_search` figures of one split (numbers only: what MLflow takes)."""
    from aitp.lake import connect

    con = connect(home)
    try:
        cur = con.execute(_FIGURES_SQL, {"e": experiment, "k": iteration, "s": split})
        found, names = cur.fetchone(), [d[0] for d in cur.description]
    finally:
        con.close()
    figures = dict(zip(names, found, strict=True)) if found else {}
    return {k: float(v) for k, v in figures.items() if isinstance(v, int | float) and not isinstance(v, bool)}


@dataclass
class ProofEvalResult(EvalResult):
    """An evaluation by proof search: the proof rate, and the search's figures (logged to MLflow beside it)."""

    search: dict[str, float] = field(default_factory=dict)

    def metrics(self) -> dict[str, float]:
        return {**super().metrics(), **{f"search/{k}": v for k, v in self.search.items()}}


class ProofEvaluator:
    """The fixed valid theorems, searched greedily at the eval budget; one `eval_samples` row per theorem."""

    def __init__(self, env: ValidSearches) -> None:
        self.env = env

    @cached_property
    def valid(self) -> list[Theorem]:
        return self.env.library.split("valid")[: self.env.proving.valid_theorems]

    @cached_property
    def eval_name(self) -> str:
        """`<name>@<version>`: the version hashes the theorems and the search protocol."""
        p = self.env.proving
        protocol = {
            "backend": p.backend,
            "search": p.search,
            "expansions": p.eval_expansions,
            "tactics_per_goal": p.eval_tactics_per_goal,
            "tactic_timeout": p.tactic_timeout,
            "prover_seconds": p.prover_seconds,
        }
        if p.critic is not None:  # only when set: evaluations recorded before the key existed keep their name
            protocol["critic"] = p.critic
        if p.closing_tactics:  # likewise
            protocol["closing_tactics"] = [asdict(c) for c in p.closing_tactics]
            protocol["hammer_timeout"] = p.hammer_timeout
        from aitp.proving.backends import BACKENDS

        rule = BACKENDS[p.backend].premise_rule
        if rule is not None:  # what a proof may cite is part of what was measured
            protocol["premise_rule"] = rule
        canonical = json.dumps({"theorems": [t.name for t in self.valid], "protocol": protocol}, sort_keys=True)
        return f"{p.eval_name}@{hashlib.sha256(canonical.encode()).hexdigest()[:12]}"

    def load(self, home: Path, experiment: str, model_version: str) -> EvalResult | None:
        return load_eval(home, experiment, model_version, self.eval_name)

    def shard(self, model_version: str) -> str:
        return f"{self.env.proving.eval_name}-{model_version}"[:64]

    def run(
        self, home: Path, experiment: str, iteration: int, checkpoint: PolicySpec, model_version: str | None
    ) -> EvalResult:
        """Search the valid theorems with the checkpoint's models and commit the proof rate."""
        from aitp.evals import EvalSetChangedError
        from aitp.lake import write_partition

        pinned = pinned_eval_name(home, experiment, self.env.proving.eval_name)
        if pinned is not None and pinned != self.eval_name:
            raise EvalSetChangedError(
                f"valid set of experiment '{experiment}' was measured as {pinned}, the config now gives "
                f"{self.eval_name}: restore the proving eval settings or start a new experiment"
            )
        start = time.perf_counter()
        out = search_shard([t.name for t in self.valid], self.env.job(checkpoint.path, iteration, train=False))
        seconds = time.perf_counter() - start
        version = model_version or out["model_version"]
        proofs = {r["theorem_id"].split(":", 1)[1]: r for r in out["rows"]["proofs"] if r["verified"]}
        task = self.env.library.name  # the set's own name (a JSONL path would not make a metric name)
        samples = [
            {
                "item_id": a["theorem"],
                "task": task,
                "difficulty_level": None,
                "sample_index": 0,
                "completion": proofs[a["theorem"]]["proof_text"] if a["proved"] else None,
                "gold_answer": theorem.proof,
                "score": 1.0 if a["proved"] else 0.0,
                "passed": bool(a["proved"]),
                "format_error": None,
                "completion_tokens": 0,
            }
            for a, theorem in zip(out["attempts"], self.valid)
        ]
        n, n_pass = len(samples), sum(s["passed"] for s in samples)
        row = {
            "task": task,
            "difficulty_level": None,
            "n_items": n,
            "n_samples": n,
            "n_pass": n_pass,
            "pass_rate": n_pass / n if n else 0.0,
            "mean_score": n_pass / n if n else 0.0,
            "format_error_rate": 0.0,
            "mean_completion_tokens": 0.0,  # a search writes no tokens
        }
        result = ProofEvalResult(experiment, iteration, version, self.eval_name, [row], samples, seconds)
        shard = self.shard(version)
        meta = {"eval_name": self.eval_name, "model_version": version}
        # the valid searches' traces (split = valid: training data never selects them) for the `proof_search`
        # view and replay pages, then per-theorem rows: the aggregate `evals` commit marks the evaluation as done
        for table in TRACE_TABLES:
            write_partition(home, table, experiment, iteration, out["rows"].get(table, []), shard=shard)
        write_partition(home, "eval_samples", experiment, iteration, [{**s, **meta} for s in samples], shard=shard)
        write_partition(
            home, "evals", experiment, iteration, [{**row, **meta, "split": "valid", "seconds": seconds}], shard=shard
        )
        result.search = search_figures(home, experiment, iteration, "valid") | out["throughput"]
        return result
