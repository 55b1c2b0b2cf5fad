"""What the loop engine needs of an environment: the one seam between the engine and a world.

The engine (`aitp.loop.stages`, `aitp.loop.iteration`) runs the same committed stages for every
environment: items -> act on them with the champion (in committed chunks) -> summarise what was
kept -> select training examples -> train -> register -> evaluate -> promote. An environment says
what an item is and how it is regenerated, how a policy acts on a chunk of items (sample a group of
answers, or search a proof) and scores the result, which lake tables that writes, how training
examples are selected from the lake and trained on, and how a model is evaluated on the fixed held-out set. The
reasoning world implements it in `aitp.reasoning.environment`, the proving world in `aitp.proving.environment`;
each world's config (a member of the loop config's `environment` union) builds its own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from aitp.fanout.config import FanoutConfig
from aitp.policies.spec import PolicySpec

if TYPE_CHECKING:
    import pyarrow as pa

Progress = Callable[[int, int], None]


class Scored(Protocol):
    """An evaluation result: one score per metric, on a named, fixed eval set, of one model."""

    eval_name: str
    model_version: str
    iteration: int
    """The iteration whose partition holds it."""
    item_pass: dict[str, float]
    """Item id -> share of the item's samples that passed (what a paired promotion compares)."""

    def score(self, metric: str = "pass_rate") -> float: ...

    def metrics(self) -> dict[str, float]: ...


class Evaluator(Protocol):
    """Runs (or finds in the lake) a model's evaluation on the environment's fixed held-out set."""

    def load(self, home: Path, experiment: str, model_version: str) -> Scored | None:
        """The model's committed evaluation on this eval set (None if it was never run)."""

    def shard(self, model_version: str) -> str:
        """The shard the model's evaluation commits under, in every table it writes (a repair's gap names it)."""

    def run(
        self, home: Path, experiment: str, iteration: int, checkpoint: PolicySpec, model_version: str | None
    ) -> Scored:
        """Evaluate the checkpoint, commit the result to the lake, return it."""


@dataclass(frozen=True)
class LoopSettings:
    """What a world reads of the engine's part of the loop config when it builds its environment."""

    experiment: str
    seed: int
    """The loop's seed: a world derives its items', sampling's and training's seeds from it."""
    device: str | None
    fanout: FanoutConfig


@dataclass(frozen=True)
class ActSummary:
    """What an iteration's committed acting produced: units (groups, searches), how many were kept."""

    units: int
    kept: int
    details: dict[str, Any]
    nothing_kept: str = "nothing was kept: nothing to train on"
    """Why the iteration does not train when nothing was kept (the environment's words)."""
    text: str = ""
    """One line for a live display (the environment's words; empty: the display composes its own)."""

    @property
    def kept_rate(self) -> float | None:
        return self.kept / self.units if self.units else None


class Environment(Protocol):
    """A world the loop learns in (see the module docstring for the stage sequence)."""

    items_table: str
    """The lake table items are committed to."""
    acted_tables: tuple[str, ...]
    """The lake tables one chunk of acting commits to (each chunk a shard of each)."""
    chunk_items: int
    """Items per committed chunk: the unit of resume."""
    evaluator: Evaluator
    starting_policy: PolicySpec
    """The model iteration 0 starts from while the registry has no champion."""
    max_policy_lag: int
    """The most champions crowned between the model that acted and the model trained on what it did."""

    def trains_on_nodes(self, iteration: int) -> bool:
        """Whether the iteration's training spans several nodes (one launcher agent per Dask worker)."""

    def acts(self, iteration: int) -> bool:
        """Whether the iteration acts (samples or searches) before training; False: it trains on what is there."""

    def acts_ahead(self, iteration: int) -> bool:
        """Whether the iteration acts with the model the iteration before it started from, while that one trains.

        The rule depends on the config alone, so a resumed run acts with the same model as an uninterrupted one.
        """

    def commits_items(self, iteration: int) -> bool:
        """Whether the iteration commits items of its own."""

    def items(self, iteration: int) -> Sequence[Any]:
        """The iteration's items, regenerated from their identities (the same on every call and machine)."""

    def item_rows(self, items: Sequence[Any]) -> list[dict[str, Any]]:
        """The `items_table` rows of items."""

    def act(
        self,
        items: Sequence[Any],
        policy: PolicySpec,
        iteration: int,
        client: Any,
        on_progress: Progress | None,
    ) -> dict[str, list[dict[str, Any]] | pa.Table]:
        """Let the policy act on a chunk of items, score and filter the outcome: rows (or an Arrow table of them)
        per acted table."""

    def warm_up(self, client: Any) -> None:
        """Start the workers' slow first-time work (compiling a decoder) in the background, as the loop opens."""

    def prepare(self, iteration: int, policy: PolicySpec, client: Any) -> None:
        """Get the workers ready, in the background, to act on the iteration's items (a hint: may do nothing)."""

    def release(self, iteration: int, client: Any) -> str | None:
        """Before the iteration trains: have the workers give back what acting held that training may need.

        Returns a line for the loop's log saying what was given back, or None when nothing was asked.
        """

    def summarize(self, home: Path, experiment: str, iteration: int) -> ActSummary:
        """What the iteration's committed acting produced (read back from the lake)."""

    def train(
        self, home: Path, experiment: str, iteration: int, base: PolicySpec, out: Path, client: Any = None
    ) -> Path:
        """Select the iteration's training examples from the lake and train `base` on them into `out` (on the
        workers of the Dask cluster `client` where the training spans several nodes).

        Raises `aitp.train.data.NoTrainingDataError` when the lake holds nothing to train on.
        """
