"""The reasoning-gym environment of the loop: items are tasks' questions, acting is sampling groups.

Items are regenerated from their identities (task, config, seed, index): iteration 0 takes the
demonstration items, later iterations fresh slices of the train split (or the same ones again),
never a question of the held-out set. Acting samples `group_size` answers per item on Dask, scores
them with the task's verifier and applies the group filter; training selects kept samples (or
demonstrations) from the lake with SQL; evaluation is the fixed held-out set of the loop's tasks.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aitp.environment import ActSummary, LoopSettings, Progress
from aitp.policies.spec import PolicySpec
from aitp.reasoning.items import Item, generate_items

if TYPE_CHECKING:
    import pyarrow as pa

    from aitp.reasoning.config import ReasoningConfig

_SUMMARY_SQL = """
    SELECT count(DISTINCT group_id), count(DISTINCT group_id) FILTER (WHERE group_kept),
           avg(final_score), avg(CASE WHEN raw_score >= 1 THEN 1.0 ELSE 0.0 END), count(*),
           count(DISTINCT group_id) FILTER (WHERE keep_reason LIKE 'uniform%')
    FROM rollouts WHERE experiment = $e AND iteration = $k"""


class ReasoningEnvironment:
    """reasoning-gym tasks as the loop's environment (see `aitp.environment.Environment`)."""

    items_table = "items"
    acted_tables = ("rollouts",)

    def __init__(self, world: ReasoningConfig, settings: LoopSettings) -> None:
        from aitp.reasoning.evaluate import EvalSetEvaluator

        self.world, self.settings = world, settings
        self.chunk_items = settings.fanout.chunk_items
        self.evaluator = EvalSetEvaluator(world.eval_config(settings.seed))
        self.starting_policy = world.policy
        self.max_policy_lag = world.rollouts.max_policy_lag
        # Generating thousands of items while skipping the eval questions takes seconds, and the stages
        # of one iteration ask for them several times: keep them per iteration for this config.
        self._items: dict[int, tuple[Item, ...]] = {}

    def acts(self, iteration: int) -> bool:
        return self.world.rolls_out(iteration)

    def trains_on_nodes(self, iteration: int) -> bool:
        return self.world.train_config(iteration, self.settings.seed).nodes > 1

    def acts_ahead(self, iteration: int) -> bool:
        """rollouts.overlap: an iteration samples during the training of the one before it, if that one sampled too
        (the warm start does not: the first self-training iteration samples with the warm start's model)."""
        return self.world.rollouts.overlap and iteration > 0 and self.acts(iteration) and self.acts(iteration - 1)

    def commits_items(self, iteration: int) -> bool:
        return iteration == 0 or self.acts(iteration)  # a control iteration reuses iteration 0's items

    def items(self, iteration: int) -> Sequence[Item]:
        if iteration not in self._items:
            self._items[iteration] = tuple(self._generate(iteration))
        return self._items[iteration]

    def _generate(self, iteration: int) -> list[Item]:
        config, per_iter = self.world, self.world.rollouts.items_per_task
        items: list[Item] = []
        for task in config.tasks:
            demos = config.demonstrations(task.name)
            if iteration == 0:
                start, n = 0, demos if demos else per_iter
            elif config.rollouts.fresh_items:
                start, n = demos + (iteration - 1) * per_iter, per_iter
            else:
                start, n = 0, per_iter
            made = generate_items(
                task.name,
                start + n,
                self.settings.seed,
                "train",
                eval_size=config.eval.n_per_task,
                task_config=task.config,
            )
            items += made[start : start + n]
        return items

    def item_rows(self, items: Sequence[Item]) -> list[dict[str, Any]]:
        from aitp.reasoning.evaluate import item_row

        return [item_row(it) for it in items]

    def act(
        self,
        items: Sequence[Item],
        policy: PolicySpec,
        iteration: int,
        client: Any,
        on_progress: Progress | None,
    ) -> dict[str, pa.Table]:
        """Sample, score and filter a group per item on Dask; each shard comes back as lake rows ready to commit."""
        import pyarrow as pa

        from aitp.lake.schemas import rows_to_table
        from aitp.reasoning.rollouts.run import fan_out_shards
        from aitp.reasoning.rollouts.worker import lake_shard_task

        cfg, loop = self.world.rollouts, self.settings
        tables = fan_out_shards(
            lake_shard_task,
            (cfg.threshold,),
            items,
            policy,
            cfg.sampling(),
            client,
            experiment=loop.experiment,
            iteration=iteration,
            seed=loop.seed,
            shard_size=loop.fanout.shard_size,
            device=loop.device,
            workers=loop.fanout.workers,
            on_progress=on_progress,
            system_prompt=self.world.system_prompt,
            gpu_memory_share=cfg.gpu_memory_share,
        )
        return {"rollouts": pa.concat_tables(tables) if tables else rows_to_table("rollouts", [])}

    def warm_up(self, client: Any) -> None:
        """Have each GPU worker load the starting policy and compile its decoder (CPU sampling: nothing to do)."""
        from aitp.fanout.cluster import wants_cuda
        from aitp.reasoning.rollouts.run import warm_gpu_workers

        if wants_cuda(self.settings.device):
            w = self.world
            warm_gpu_workers(client, w.policy, w.rollouts.sampling(), self.settings.device, w.system_prompt)

    def prepare(self, iteration: int, policy: PolicySpec, client: Any) -> None:
        """Have the GPU workers build the decoder engine of the iteration's first chunk now (CPU workers: nothing).

        The engine's slots are sized to the GPU memory free when it is built. Sent once the model just
        trained has been judged (its training memory released, its evaluation done), it is built while
        the loop closes the iteration and opens the next (seconds of records, plots and items), with
        the card as the first shard will find it: the same slots that shard would size, so the same
        rollouts, and the shard no longer spends its own time building it. This process's own
        evaluation engine is released first: on a card it shares with the worker, the engine would
        otherwise hold its memory through the rest of the iteration, and the worker's engine would
        get fewer slots (`benchmarks/results/history-rollouts-in-loop.md`). The next evaluation builds
        its engine again.
        """
        from aitp.fanout.cluster import gpu_workers
        from aitp.policies.fast.resident import release_engines
        from aitp.reasoning.rollouts.run import prepare_gpu_workers

        if client is None or not self.acts(iteration) or not gpu_workers(client):
            return
        release_engines()
        cfg = self.world.rollouts
        chunk = self.items(iteration)[: self.chunk_items]
        prepare_gpu_workers(
            client,
            chunk,
            policy,
            cfg.sampling(),
            self.settings.device,
            self.world.system_prompt,
            self.settings.fanout.shard_size,
            cfg.gpu_memory_share,
        )

    def release(self, iteration: int, client: Any) -> str | None:
        """Have the GPU workers drop the decoder engines the iteration acted with, before it trains.

        `prepare` sizes a worker's engine to nearly all the memory free at the time; a training in
        this process on the same card then has only what is left: without the release, a gpu.yaml
        worker's engine grew until the training ran out of memory; with it, the same loop trains within
        the card (`benchmarks/results/history-rollouts-in-loop.md`). Released, the engine is built again by the next
        `prepare`, after this model is judged. Iteration 0 does not act: its worker only warms up, which
        is meant to overlap the first training. Returns the line the loop logs (`describe_release`).
        This process's evaluation engine goes too: with `rollouts.overlap` no `prepare` released it.
        """
        from aitp.fanout.cluster import gpu_workers
        from aitp.policies.fast.resident import release_engines
        from aitp.reasoning.rollouts.run import describe_release, release_gpu_workers

        if client is None or not self.acts(iteration) or not gpu_workers(client):
            return None
        release_engines()
        return describe_release(release_gpu_workers(client))

    def summarize(self, home: Path, experiment: str, iteration: int) -> ActSummary:
        """Groups, kept groups and uniform groups of the iteration's committed rollouts, with score means."""
        from aitp.lake import connect

        con = connect(home)
        try:
            groups, kept, mean_score, pass_rate, samples, uniform = con.execute(
                _SUMMARY_SQL, {"e": experiment, "k": iteration}
            ).fetchone()
        finally:
            con.close()
        details = {
            "groups": groups or 0,
            "kept_groups": kept or 0,
            "uniform_groups": uniform or 0,  # all answers scored alike: no advantage for grpo to learn from
            "mean_score": mean_score,
            "sample_pass_rate": pass_rate,
            "samples": samples or 0,
            "threshold": self.world.rollouts.threshold,
        }
        why = f"no group scored above {self.world.rollouts.threshold:g}: nothing to train on"
        return ActSummary(units=groups or 0, kept=kept or 0, details=details, nothing_kept=why)

    def train(
        self, home: Path, experiment: str, iteration: int, base: PolicySpec, out: Path, client: Any = None
    ) -> Path:
        """Kept samples (or demonstrations) selected with SQL, then supervised or preference training."""
        from aitp.train.data import select_examples
        from aitp.train.run import train_on

        config = self.world.train_config(iteration, self.settings.seed)
        examples = select_examples(home, experiment, iteration, config)
        return train_on(examples, base, config, out, {"experiment": experiment, "iteration": iteration}, client)
