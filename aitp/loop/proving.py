"""The prover environment of the loop: items are train theorems, acting is proof search with the champion's models.

Each iteration takes the next slice of the train split (`aitp.proving.learning.train_slice`), searches
it with the champion's tactic and premise rankers and exploration, fanned out over Dask (one prover
session per shard of theorems, opened and closed by the worker; a shard whose worker dies is run
again by Dask), and commits the traces (`proof_nodes`, `proof_edges`, `proofs`) chunk by chunk.
Training selects the shortest re-checked proof per train theorem so far with SQL and refits the
models; evaluation searches the fixed first valid theorems greedily at a fixed budget and commits
`evals` and `eval_samples` rows, so the engine's gate and paired statistics work unchanged.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from aitp.environment import ActSummary, LoopSettings, Progress
from aitp.evals import EvalResult, load_eval, pinned_eval_name
from aitp.policies.spec import PolicySpec
from aitp.proving.env import ProverEnv, Theorem
from aitp.proving.theorem_set import TheoremSet
from aitp.proving.traces import TRACE_TABLES

if TYPE_CHECKING:
    from aitp.loop.config import ProvingConfig
    from aitp.proving.prover_models import ProverModels
    from aitp.proving.search import Critic

SHARD_RETRIES = 2  # a shard whose worker died (a crashed prover, a killed process) is searched again

_FIGURES_SQL = """
    SELECT n_searched, n_proved, proof_rate, ci95_low, ci95_high, n_new, n_retained, n_proved_to_date,
           mean_proof_length, valid_tactic_rate, expansions_per_proof, prover_seconds_per_proof
    FROM proof_search WHERE experiment = $e AND iteration = $k AND split = $s"""


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


def _library(job: SearchJob) -> TheoremSet:
    from aitp.proving.theorems import load_theorem_set

    return load_theorem_set(job.theorems, job.home)


def search_shard(names: list[str], job: SearchJob) -> dict[str, Any]:
    """Search a shard of theorems in a prover session of this worker: trace rows per table and the attempts."""
    from aitp.proving.concurrent import SharedTacticPolicy, search_concurrently
    from aitp.proving.learning import search_theorems
    from aitp.proving.prover_models import ProverModels, load_prover_models
    from aitp.proving.ranked_policy import Exploration
    from aitp.proving.search import Budget, SearchConfig, make_search

    library = _library(job)
    if job.checkpoint:
        models = load_prover_models(job.checkpoint, library)
    else:
        models = ProverModels.untrained(job.backend, library)
    explore = Exploration(job.explore, seed=job.explore_seed) if job.explore > 0 else None
    budget = Budget(job.expansions, job.prover_seconds, 2 * job.prover_seconds)
    config = SearchConfig(budget=budget, tactics_per_goal=job.tactics_per_goal, tactic_timeout=job.tactic_timeout)
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

    automation = {"automation": True} if job.automation else {}  # only the Coq backend takes it
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


def _workers_on_this_host(client: Any) -> bool:
    """Whether every worker of the cluster runs on this machine (a local cluster): they can fork our prover."""
    hosts = {urlparse(address).hostname for address in client.scheduler_info().get("workers", {})}
    return bool(hosts) and hosts <= {"127.0.0.1", "localhost", "::1"}


class ProverEnvironment:
    """Theorem proving as the loop's environment (see `aitp.environment.Environment`)."""

    items_table = "items"
    acted_tables = TRACE_TABLES

    def __init__(self, proving: ProvingConfig, settings: LoopSettings, home: Path) -> None:
        self.config = settings
        self.proving = proving
        self.home = Path(home)
        self.chunk_items = settings.fanout.chunk_items
        self.starting_policy = PolicySpec(backend="tiny")  # the prover's models start untrained, not from a policy
        self.max_policy_lag = 0  # a search always uses the iteration's own starting models
        self.evaluator = ProofEvaluator(self)
        self._check_human_steps()

    def _check_human_steps(self) -> None:
        """Refuse, before anything runs, a generator that is to learn from human steps this home has not replayed."""
        from aitp.lake import commits
        from aitp.proving.errors import MissingHumanStepsError

        g = self.proving.generator
        if g is not None and g.human_steps and self.proving.learn and not commits(self.home, "human_steps"):
            raise MissingHumanStepsError(
                f"proving.generator.human_steps is on but {self.home} has no human proof steps: replay them with "
                f"`aitp prove-steps --home {self.home}`, or set proving.generator.human_steps: false"
            )

    @cached_property
    def library(self) -> TheoremSet:
        return _library(self.job(None, 0, train=True))

    def job(self, checkpoint: str | None, iteration: int, train: bool) -> SearchJob:
        """A search of the train slice (wide cut, exploration) or of the valid theorems (fixed budget, greedy)."""
        p = self.proving
        return SearchJob(
            backend=p.backend,
            theorems=p.theorem_set_name,
            home=str(self.home),
            checkpoint=checkpoint,
            search=p.search,
            expansions=p.train_expansions if train else p.eval_expansions,
            tactics_per_goal=p.train_tactics_per_goal if train else p.eval_tactics_per_goal,
            tactic_timeout=p.tactic_timeout,
            prover_seconds=p.prover_seconds,
            explore=p.explore if train else 0.0,
            explore_seed=self.config.seed * 1000 + iteration,
            experiment=self.config.experiment,
            iteration=iteration,
            critic=p.critic,
            searches=p.concurrent_searches,
            automation=p.automation_tactics,
        )

    @property
    def starts_untrained(self) -> bool:
        """Whether iteration 0 only registers the untrained models (the first champion every gain is measured from)."""
        return self.proving.first_champion == "untrained"

    def acts(self, iteration: int) -> bool:
        return iteration > 0 or not self.starts_untrained

    def trains_on_nodes(self, iteration: int) -> bool:
        """The prover's models train in the flow's process (or the user's train_command): never across nodes."""
        return False

    def warm_up(self, client: Any) -> None:
        """Nothing: a search's tactic model loads with its first shard."""

    def acts_ahead(self, iteration: int) -> bool:
        return False  # searches and training each want the prover host's cores and the card: one after the other

    def commits_items(self, iteration: int) -> bool:
        return self.acts(iteration)

    def items(self, iteration: int) -> Sequence[Theorem]:
        from aitp.proving.learning import train_slice

        if not self.acts(iteration):
            return []
        index = iteration - 1 if self.starts_untrained else iteration  # the first searching iteration: slice 0
        return train_slice(self.library, index, self.proving.train_slice, self.config.seed)

    def item_rows(self, items: Sequence[Theorem]) -> list[dict[str, Any]]:
        return [
            {
                "item_id": t.name,
                "task": self.library.name,
                "seed": self.config.seed,
                "item_index": i,
                "split": "train",
                "question": t.statement,
                "gold_answer": t.proof,
            }
            for i, t in enumerate(items)
        ]

    def act(
        self,
        items: Sequence[Theorem],
        policy: PolicySpec,
        iteration: int,
        client: Any,
        on_progress: Progress | None,
    ) -> dict[str, list[dict[str, Any]]]:
        """Search the chunk's theorems with the policy's prover models and exploration, on Dask."""
        from aitp.fanout.cluster import dask_client, gpu_workers
        from aitp.proving.backends import serving_address

        names = [t.name for t in items]
        job = self.job(policy.path, iteration, train=True)
        size = self.config.fanout.shard_size
        local = client is None or isinstance(client, str)
        on_gpu = self.decodes_on_gpu
        gpus = None if on_gpu else 0
        opened = dask_client(client, self.config.fanout.workers, gpus=gpus) if local else nullcontext(client)
        with opened as dask:
            if _workers_on_this_host(dask):
                job = replace(job, prover_address=serving_address(self.proving.backend))
            resources = self._gpu_resources(dask) if on_gpu else None
            if size is None:
                workers = gpu_workers(dask) if resources else len(dask.scheduler_info().get("workers", {}))
                size = max(1, -(-len(names) // max(1, workers)))
            results = search_on_dask(names, job, dask, size, on_progress, resources)
        return {table: [row for r in results for row in r["rows"].get(table, [])] for table in TRACE_TABLES}

    @property
    def decodes_on_gpu(self) -> bool:
        """Whether searches sample tactics from a language model that is to run on CUDA (a generative policy)."""
        return self.proving.tactic_policy == "generative" and self.config.device != "cpu"

    def _gpu_resources(self, dask: Any) -> dict[str, int] | None:
        """The Dask resources a search with a GPU model asks for: a GPU worker's card, so the model decodes there
        (a CPU worker sees no CUDA device); none where no worker has one and the config did not ask for CUDA."""
        from aitp.fanout.cluster import GPU, gpu_workers, wants_cuda
        from aitp.reasoning.rollouts.run import NoGpuWorkersError

        if gpu_workers(dask) > 0:
            return {GPU: 1}
        if wants_cuda(self.config.device):
            raise NoGpuWorkersError(
                f"device is {self.config.device} but no Dask worker declares a GPU: start workers with "
                "`--resources GPU=1`, or pass --set device=cpu"
            )
        return None

    def prepare(self, iteration: int, policy: PolicySpec, client: Any) -> None:
        """Nothing to ready ahead: a prover search starts its processes per job."""

    def release(self, iteration: int, client: Any) -> str | None:
        """Nothing to give back: a prover search's processes end with its job."""
        return None

    def summarize(self, home: Path, experiment: str, iteration: int) -> ActSummary:
        """The iteration's train-slice figures from the `proof_search` view: searched, proved (re-checked), new vs
        retained, proved to date, proof length, valid-tactic rate, expansions and prover seconds per proof."""

        figures = search_figures(home, experiment, iteration, "train")
        searched, proved = int(figures.get("n_searched", 0)), int(figures.get("n_proved", 0))
        details = {"theorems_searched": searched, "theorems_proved": proved, **figures}
        why = "no train theorem of the slice was proved: widen proving.train_tactics_per_goal or train_expansions"
        text = f"proved {proved}/{searched} train theorems (re-checked)"
        return ActSummary(units=searched, kept=proved, details=details, nothing_kept=why, text=text)

    def train(
        self, home: Path, experiment: str, iteration: int, base: PolicySpec, out: Path, client: Any = None
    ) -> Path:
        """The shortest re-checked proof per train theorem so far (SQL), then the rankers refitted on them.

        An iteration that does not search (iteration 0 of an untrained start) saves the untrained models.
        """
        from aitp.proving.prover_models import ProverModels
        from aitp.proving.prover_training import train_prover_models
        from aitp.proving.training_data import select_training_data

        if not self.acts(iteration):
            untrained = ProverModels.untrained(self.proving.backend, self.library)
            untrained.record = {"untrained": True, "seed": self.config.seed}
            return self._save(untrained, None, out)
        if self.proving.train_command:
            return self._train_externally(home, experiment, iteration, out)
        min_visits = self.proving.critic_min_visits if self.proving.critic == "learned" else None
        data = select_training_data(home, experiment, iteration, self.library, critic_min_visits=min_visits)
        models = train_prover_models(
            data, self.library, epochs=self.proving.epochs, seed=self.config.seed, learn=self.proving.learn
        )
        return self._save(models, data if self.proving.learn else None, out)

    def _save(self, models: Any, data: Any, out: Path) -> Path:
        """Save the models; with a generative policy, its model too (fine-tuned on `data`, else its base)."""
        import shutil

        from aitp.proving.tactic_generator import TINY_TACTIC_MODEL, GeneratorSettings, prepare_generator
        from aitp.train.config import TrainConfig

        g = self.proving.generator
        if self.proving.tactic_policy != "generative" or g is None:
            models.save(out)
            return out
        if data is not None and g.human_steps:
            data = replace(data, tactics=[*data.tactics, *self._human_steps()])
        settings = GeneratorSettings(
            max_goal_chars=g.max_goal_chars,
            samples_per_tactic=g.samples_per_tactic,
            with_alternatives=g.with_alternatives,
        )
        max_len = TINY_TACTIC_MODEL["max_seq_len"] if g.base is None else 1024
        train = TrainConfig(steps=g.steps, batch_size=g.batch_size, lr=g.lr, max_len=max_len, seed=self.config.seed)
        staged = prepare_generator(data, self.proving.backend, g.base, train, settings, out)
        models.generator = staged
        try:
            models.save(out)  # copies the generator in
        finally:
            shutil.rmtree(staged, ignore_errors=True)
        return out

    def _human_steps(self) -> list[Any]:
        """The home's replayed human proof steps (the home was checked to have them when the run started)."""
        from aitp.proving.training_data import human_step_examples

        self._check_human_steps()
        return human_step_examples(self.home)

    def _train_externally(self, home: Path, experiment: str, iteration: int, out: Path) -> Path:
        """Run the user's training command into `out`; its checkpoint is validated before the engine registers it."""
        import shutil

        from aitp.proving.external_training import TrainCommand, train_after_eval, update_checkpoints

        if out.exists():  # this iteration's own directory, left incomplete by a run killed mid-command
            shutil.rmtree(out)
        command = TrainCommand(list(self.proving.train_command or []), timeout_s=self.proving.train_command_timeout_s)
        update_checkpoints(train_after_eval(command, home, experiment, iteration, out), self.library)
        return out


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

    def __init__(self, env: ProverEnvironment) -> None:
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
        canonical = json.dumps({"theorems": [t.name for t in self.valid], "protocol": protocol}, sort_keys=True)
        return f"{p.eval_name}@{hashlib.sha256(canonical.encode()).hexdigest()[:12]}"

    def load(self, home: Path, experiment: str, model_version: str) -> EvalResult | None:
        return load_eval(home, experiment, model_version, self.eval_name)

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
        shard = f"{self.env.proving.eval_name}-{version}"[:64]
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
