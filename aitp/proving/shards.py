"""Proof search fanned out over Dask: the job a worker is handed, the shard of theorems it searches, the fan-out.

A `SearchJob` holds plain values only (it travels to Dask workers). A worker loads the job's theorem set and
prover models, opens one prover session of the job's backend (forked from this host's loaded prover where the
backend serves one), searches its shard one theorem after another or several at once sharing one batched
tactic model (`aitp.proving.search.concurrent`), and returns the trace rows; a shard whose worker dies is
searched again. The prover environment (`aitp.proving.environment`) searches train slices and the valid set
this way.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from aitp.environment import Progress
from aitp.proving.data.theorem_set import TheoremSet
from aitp.proving.env import ProverEnv
from aitp.proving.search.base import ClosingTactic

if TYPE_CHECKING:
    from aitp.proving.models.prover_models import ProverModels
    from aitp.proving.search import Critic

SHARD_RETRIES = 2  # a shard whose worker died (a crashed prover, a killed process) is searched again


@dataclass(frozen=True)
class SearchJob:
    """Everything a worker needs to search a shard of theorems (plain values: it travels to Dask workers)."""

    backend: str
    theorems: str  # a theorem set name or JSONL path
    home: str  # where a named set is cached
    checkpoint: str | None  # prover models; None: untrained
    search: str
    expansions: int
    tactics_per_goal: int
    tactic_timeout: float
    prover_seconds: float
    explore: float  # 0: greedy
    explore_seed: int
    experiment: str
    iteration: int
    prover_address: str | None = None  # a loaded prover serving this host's workers (`serving_address`)
    critic: str | None = None  # constant | length | learned; None: the search's default
    searches: int = 1  # searches at once in this worker, sharing one batched tactic model
    automation: bool = False  # CoqHammer's tactics in the candidates, and sessions that load CoqHammer
    closing_tactics: tuple[ClosingTactic, ...] = ()  # tried on every goal before the model's
    hammer_timeout: float | None = None  # seconds `hammer` runs (its provers get half); None: tactic_timeout


def job_library(job: SearchJob) -> TheoremSet:
    """The job's theorem set (a named set is cached under the job's home)."""
    from aitp.proving.data.theorems import load_theorem_set

    return load_theorem_set(job.theorems, job.home)


def search_shard(names: list[str], job: SearchJob) -> dict[str, Any]:
    """Search a shard of theorems in a prover session of this worker: trace rows per table and the attempts."""
    from aitp.proving.learning import search_theorems
    from aitp.proving.models.prover_models import ProverModels, load_prover_models
    from aitp.proving.models.ranked_policy import Exploration
    from aitp.proving.search import Budget, SearchConfig, make_search
    from aitp.proving.search.concurrent import SharedTacticPolicy, search_concurrently

    library = job_library(job)
    if job.checkpoint:
        models = load_prover_models(job.checkpoint, library)
    else:
        models = ProverModels.untrained(job.backend, library)
    explore = Exploration(job.explore, seed=job.explore_seed) if job.explore > 0 else None
    budget = Budget(job.expansions, job.prover_seconds, 2 * job.prover_seconds)
    config = SearchConfig(
        budget=budget,
        tactics_per_goal=job.tactics_per_goal,
        tactic_timeout=job.tactic_timeout,
        closing_tactics=job.closing_tactics,
    )
    critic = search_critic(job.critic, models)
    theorems = [library.get(n) for n in names]
    policy = models.policy(library, explore, automation=job.automation)
    throughput: dict[str, float] = {}
    if job.searches > 1:
        with SharedTacticPolicy(policy) as shared:
            outcome, figures = search_concurrently(
                lambda: _session(job, library),
                theorems,
                lambda: make_search(job.search, config, critic),
                shared,
                job.searches,
                job.experiment,
                job.iteration,
                models.version,
            )
        throughput = figures.as_metrics()
    else:
        with _session(job, library) as env:
            search = make_search(job.search, config, critic)
            outcome = search_theorems(env, theorems, search, policy, job.experiment, job.iteration, models.version)
    _release_decoders()
    return {
        "rows": outcome.rows,
        "attempts": [asdict(a) for a in outcome.attempts],
        "model_version": models.version,
        "throughput": throughput,
    }


def _release_decoders() -> None:
    """Hand a GPU decoder's engine back once a shard is searched: the iteration trains on the same card next."""
    import sys

    resident = sys.modules.get("aitp.policies.fast.resident")  # loaded only where a model decoded on CUDA
    if resident is not None:
        resident.release_engines()


def _session(job: SearchJob, library: TheoremSet) -> ProverEnv:
    """A prover session of the job's backend with the library's premises set (a context manager)."""
    from aitp.proving.backends import open_env

    # only the Coq backend takes these
    automation = {"automation": True, "hammer_timeout": job.hammer_timeout} if job.automation else {}
    env = open_env(job.backend, tactic_timeout=job.tactic_timeout, address=job.prover_address, **automation)
    try:
        env.set_premises(library.premise_map())
    except BaseException:
        env.close()
        raise
    return env


def search_critic(choice: str | None, models: ProverModels) -> Critic | None:
    """The critic a search is given: the models' trained one for `learned` (none while untrained), or a fixed one."""
    from aitp.proving.search import constant_critic, length_critic

    if choice == "learned":
        return models.critic
    return {"constant": constant_critic, "length": length_critic}.get(choice or "")


def search_on_dask(
    names: list[str],
    job: SearchJob,
    client: Any,
    shard_size: int,
    on_progress: Progress | None = None,
    resources: dict[str, int] | None = None,
) -> list[dict[str, Any]]:
    """Search theorems over Dask, one task per shard (retried when its worker dies); shard results in order.

    `resources` (a GPU) places every shard on a worker that has them: where its tactic model decodes."""
    from aitp.fanout.shards import shard_tasks

    shards = [names[i : i + shard_size] for i in range(0, len(names), shard_size)]
    results: list[dict[str, Any]] = [{}] * len(shards)
    done = 0
    with shard_tasks(
        client, search_shard, shards, job, name="prove", retries=SHARD_RETRIES, resources=resources
    ) as finished:
        for i, future in finished:
            results[i] = future.result()
            done += len(shards[i])
            if on_progress is not None:
                on_progress(done, len(names))
    return results


def workers_on_this_host(client: Any) -> bool:
    """Whether every worker of the cluster runs on this machine (a local cluster): they can fork our prover."""
    hosts = {urlparse(address).hostname for address in client.scheduler_info().get("workers", {})}
    return bool(hosts) and hosts <= {"127.0.0.1", "localhost", "::1"}
