"""How a loop's acting fans out: items per committed chunk, per Dask task, and the cluster it runs on.

The same for every world (a chunk of reasoning items is sampled, a chunk of theorems searched), so it is the
engine's part of the loop config, not a world's.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_serializer, model_validator


class FanoutConfig(BaseModel):
    """Chunks, shards and the Dask cluster of the loop's acting."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    chunk_items: int = Field(150, ge=1)
    """Items per committed chunk: the unit of resume (a Prefect task each), fanned out over Dask shards."""
    shard_size: int | None = Field(None, ge=1)
    """Items per Dask task (None: sized to the cluster)."""
    workers: int | None = Field(None, ge=1)
    """Local Dask worker processes (None: one per core); ignored with a scheduler address."""
    dask_address: str | None = None
    """An existing Dask scheduler (tcp://host:8786); None starts a local cluster for the run."""
    gpus: list[int] | None = Field(None, min_length=1)
    """The cards (numbered from 0 among the visible ones) that get a local GPU worker (None: every card). `[1]` on
    a two-GPU machine leaves card 0 to the training alone: with `rollouts.overlap`, one card samples the next
    iteration while the other trains."""

    @model_validator(mode="after")
    def _workers_need_a_local_cluster(self) -> FanoutConfig:
        for name in ("workers", "gpus"):
            if getattr(self, name) is not None and self.dask_address is not None:
                raise ValueError(
                    f"fanout.{name} shapes a local cluster and has no effect with fanout.dask_address: remove one"
                )
        if self.gpus is not None and (min(self.gpus) < 0 or len(set(self.gpus)) < len(self.gpus)):
            raise ValueError(f"fanout.gpus {self.gpus}: name each card once, by its index from 0")
        return self

    @model_serializer(mode="wrap")
    def _dump(self, handler: Any) -> dict[str, Any]:
        data = handler(self)
        if data.get("gpus") is None:
            data.pop("gpus", None)  # configs recorded before fanout.gpus existed keep their hash
        return data
