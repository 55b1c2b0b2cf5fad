"""The prover environment of the loop: items are train theorems, acting is proof search with the champion's models.

Each iteration takes the next slice of the train split (`aitp.proving.learning.train_slice`), searches
it with the champion's tactic and premise rankers and exploration, fanned out over Dask (`aitp.proving.shards`:
one prover session per shard of theorems, opened and closed by the worker; a shard whose worker dies is run
again by Dask), and commits the traces (`proof_nodes`, `proof_edges`, `proofs`) chunk by chunk.
Training selects the shortest re-checked proof per train theorem so far with SQL and refits the
models; evaluation (`aitp.proving.evaluation`) searches the fixed first valid theorems greedily at a fixed
budget and commits `evals` and `eval_samples` rows, so the engine's gate and paired statistics work unchanged.

The environment takes its `ProvingConfig`, the home, and the few loop settings it reads (`LoopSettings`), never
the loop's config itself: the engine (`aitp.loop`) sits above the worlds and builds it.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aitp.environment import ActSummary, LoopSettings, Progress
from aitp.policies.spec import PolicySpec
from aitp.proving.data.theorem_set import TheoremSet
from aitp.proving.data.traces import TRACE_TABLES
from aitp.proving.env import Theorem
from aitp.proving.evaluation import ProofEvaluator, search_figures
from aitp.proving.shards import SearchJob, job_library, search_on_dask, workers_on_this_host

if TYPE_CHECKING:
    from aitp.proving.config import ProvingConfig


class ProverEnvironment:
    """Theorem proving as the loop's environment (see `aitp.environment.Environment`)."""

    items_table = "items"
    acted_tables = TRACE_TABLES

    def __init__(self, proving: ProvingConfig, loop: LoopSettings, home: Path) -> None:
        self.proving = proving
        self.home = Path(home)
        self.loop = loop
        self.chunk_items = loop.fanout.chunk_items
        self.starting_policy = PolicySpec(backend="tiny")  # the prover's models start untrained, not from a policy
        self.max_policy_lag = 0  # a search always uses its own iteration's starting models
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
        return job_library(self.job(None, 0, train=True))

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
            explore_seed=self.loop.seed * 1000 + iteration,
            experiment=self.loop.experiment,
            iteration=iteration,
            critic=p.critic,
            searches=p.concurrent_searches,
            automation=p.automation_tactics,
            closing_tactics=tuple(p.closing_tactics),
            hammer_timeout=p.hammer_timeout,
        )

    @property
    def starts_without_search(self) -> bool:
        """Whether iteration 0 registers a first champion without searching: the untrained models, or the generator
        fine-tuned on the human proof steps alone (the first champion every gain is measured from)."""
        return self.proving.first_champion != "trained"

    def acts(self, iteration: int) -> bool:
        return iteration > 0 or not self.starts_without_search

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
        index = iteration - 1 if self.starts_without_search else iteration  # the first searching iteration: slice 0
        return train_slice(self.library, index, self.proving.train_slice, self.loop.seed)

    def item_rows(self, items: Sequence[Theorem]) -> list[dict[str, Any]]:
        return [
            {
                "item_id": t.name,
                "task": self.library.name,
                "seed": self.loop.seed,
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
        size = self.loop.fanout.shard_size
        local = client is None or isinstance(client, str)
        on_gpu = self.decodes_on_gpu
        gpus = self.loop.fanout.gpus if on_gpu else 0
        opened = dask_client(client, self.loop.fanout.workers, gpus=gpus) if local else nullcontext(client)
        with opened as dask:
            if workers_on_this_host(dask):
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
        return self.proving.tactic_policy == "generative" and self.loop.device != "cpu"

    def _gpu_resources(self, dask: Any) -> dict[str, int] | None:
        """The Dask resources a search with a GPU model asks for: a GPU worker's card, so the model decodes there
        (a CPU worker sees no CUDA device); none where no worker has one and the config did not ask for CUDA."""
        from aitp.fanout.cluster import GPU, NoGpuWorkersError, gpu_workers, wants_cuda

        if gpu_workers(dask) > 0:
            return {GPU: 1}
        if wants_cuda(self.loop.device):
            raise NoGpuWorkersError(
                f"device is {self.loop.device} but no Dask worker declares a GPU: start workers with "
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

        An iteration that does not search (iteration 0 of a start without search) saves the untrained models, their
        generator fine-tuned on the human proof steps alone where the first champion is that warm start.
        """
        from aitp.proving.data.training_data import TrainingData, select_training_data
        from aitp.proving.models.prover_models import ProverModels
        from aitp.proving.models.training import train_prover_models

        if not self.acts(iteration):
            first = ProverModels.untrained(self.proving.backend, self.library)
            if self.proving.first_champion == "human_steps":
                first.record = {"untrained": False, "warm_start": "human_steps", "seed": self.loop.seed}
                return self._save(first, TrainingData([], [], [], []), out)  # _save adds the human steps
            first.record = {"untrained": True, "seed": self.loop.seed}
            return self._save(first, None, out)
        if self.proving.train_command:
            return self._train_externally(home, experiment, iteration, out)
        min_visits = self.proving.critic_min_visits if self.proving.critic == "learned" else None
        data = select_training_data(home, experiment, iteration, self.library, critic_min_visits=min_visits)
        models = train_prover_models(
            data, self.library, epochs=self.proving.epochs, seed=self.loop.seed, learn=self.proving.learn
        )
        return self._save(models, data if self.proving.learn else None, out)

    def _save(self, models: Any, data: Any, out: Path) -> Path:
        """Save the models; with a generative policy, its model too (fine-tuned on `data`, else its base)."""
        import shutil

        from aitp.proving.models.tactic_generator import TINY_TACTIC_MODEL, GeneratorSettings, prepare_generator
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
        train = TrainConfig(steps=g.steps, batch_size=g.batch_size, lr=g.lr, max_len=max_len, seed=self.loop.seed)
        staged = prepare_generator(data, self.proving.backend, g.base, train, settings, out)
        models.generator = staged
        try:
            models.save(out)  # copies the generator in
        finally:
            shutil.rmtree(staged, ignore_errors=True)
        return out

    def _human_steps(self) -> list[Any]:
        """The home's replayed human proof steps (the home was checked to have them when the run started)."""
        from aitp.proving.data.training_data import human_step_examples

        self._check_human_steps()
        return human_step_examples(self.home)

    def _train_externally(self, home: Path, experiment: str, iteration: int, out: Path) -> Path:
        """Run the user's training command into `out`; its checkpoint is validated before the engine registers it."""
        import shutil

        from aitp.proving.models.external_training import TrainCommand, train_after_eval, update_checkpoints

        if out.exists():  # this iteration's own directory, left incomplete by a run killed mid-command
            shutil.rmtree(out)
        command = TrainCommand(list(self.proving.train_command or []), timeout_s=self.proving.train_command_timeout_s)
        update_checkpoints(train_after_eval(command, home, experiment, iteration, out), self.library)
        return out
