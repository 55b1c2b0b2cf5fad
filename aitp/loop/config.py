"""The whole loop as one typed config: the engine's settings, and the world it learns in as its `environment`.

`aitp run --config FILE --set key=value` loads it (YAML -> `LoopConfig`); its hash, with the code
version, is the version of every iteration's flow run, so two runs that share a hash ran the same
recipe. The engine's keys (experiment, seed, iterations, device, fan-out, promotion) sit at the top; the world
is a union keyed by its `type` (`aitp.reasoning.config.ReasoningConfig`, `aitp.proving.config.ProvingConfig`),
each building its own environment, so the engine sees only the environment's contract.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from aitp.configs import MAX_NAME_LENGTH
from aitp.environment import Environment, LoopSettings
from aitp.fanout.config import FanoutConfig
from aitp.proving.config import ProvingConfig
from aitp.reasoning.config import ReasoningConfig
from aitp.registry.store import PromotionConfig

MAX_ITERATION = 999
"""The last iteration a loop may run: each trains with seed `seed * 1000 + iteration`, distinct per iteration."""
MAX_SEED = (2**32 - 1 - MAX_ITERATION) // 1000
"""The largest loop seed whose derived training seeds stay within numpy's (and Lightning's) 0..2**32-1."""

WORLD_KEYS = ("policy", "system_prompt", "tasks", "demonstrations_per_task", "warm_start", "self_train", "eval")
"""Top-level keys of the layout before worlds had their own section: now keys of `environment`."""
FANOUT_KEYS = ("chunk_items", "shard_size", "workers", "dask_address")
"""`rollouts` keys of that layout that are now the engine's `fanout` section."""


def _merged(base: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """`base` with `changes` laid over it, section by section."""
    out = dict(base)
    for key, value in changes.items():
        both = isinstance(value, dict) and isinstance(out.get(key), dict)
        out[key] = _merged(out[key], value) if both else value
    return out


def from_flat_layout(data: Any) -> Any:
    """A config written before each world had its section (`environment: proving` beside a `proving` section,
    `tasks` and `rollouts` at the top), in today's layout: records of older homes and older files still load,
    with `--set environment.KEY=...` overrides laid over them."""
    if not isinstance(data, dict):
        return data
    env = data.get("environment")
    if isinstance(env, dict) and not any(k in data for k in (*WORLD_KEYS, "proving", "rollouts")):
        return data  # today's layout
    data = dict(data)
    env = data.pop("environment", None)
    overrides = env if isinstance(env, dict) else {}
    kind = env if isinstance(env, str) else overrides.get("type") or ("proving" if "proving" in data else "reasoning")
    world: dict[str, Any] = {"type": kind}
    if kind == "proving":
        world.update(data.pop("proving", None) or {})
    rollouts = dict(data.pop("rollouts", None) or {})
    fanout = {key: rollouts.pop(key) for key in FANOUT_KEYS if key in rollouts}
    world.update({key: data.pop(key) for key in (*WORLD_KEYS, "proving") if key in data})
    if rollouts:
        world["rollouts"] = rollouts
    if fanout:
        data["fanout"] = {**fanout, **(data.get("fanout") or {})}
    data["environment"] = _merged(world, overrides)
    return data


class LoopConfig(BaseModel):
    """An experiment: the world it learns in, how its acting fans out, when a challenger is promoted, when it stops."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    experiment: str = Field("quickstart", pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", max_length=MAX_NAME_LENGTH)
    """The experiment's name: its registry model, lake partitions and checkpoint folder."""
    seed: int = Field(0, ge=0, le=MAX_SEED)
    """Seeds items, the held-out set, initialisation, sampling and training (iteration k trains with
    `seed * 1000 + k`, so the seed is at most MAX_SEED)."""
    iterations: int = Field(4, ge=0, le=MAX_ITERATION)
    """Self-training iterations after the warm start (iteration 0)."""
    target_pass_rate: float | None = Field(None, ge=0.0, le=1.0)
    """Stop early once the champion's held-out pass rate reaches this."""
    device: str | None = None
    """Where training and local sampling run (None: cuda if present, else cpu)."""
    environment: Annotated[ReasoningConfig | ProvingConfig, Field(discriminator="type")]
    """The world the loop learns in, keyed by its `type`: reasoning (reasoning-gym tasks) or proving (theorems)."""
    fanout: FanoutConfig = Field(default_factory=FanoutConfig)
    """How acting fans out over Dask: items per committed chunk and per task, and the cluster."""
    promotion: PromotionConfig = Field(default_factory=PromotionConfig)
    """When a challenger replaces the champion."""
    mode: Literal["self_train", "control"] = "self_train"
    """Informational label shown in reports; the control is defined by the world's settings."""

    @model_validator(mode="before")
    @classmethod
    def _layout(cls, data: Any) -> Any:
        return from_flat_layout(data)

    @model_validator(mode="after")
    def _gpus_need_a_gpu_device(self) -> LoopConfig:
        if self.fanout.gpus is not None and self.device == "cpu":
            raise ValueError("fanout.gpus places GPU workers, but device is cpu: remove fanout.gpus or set device cuda")
        return self

    def settings(self) -> LoopSettings:
        """What a world reads of the engine's settings."""
        return LoopSettings(self.experiment, self.seed, self.device, self.fanout)

    def build_environment(self, home: Path) -> Environment:
        """The environment of the config's world, for one loop under `home`: each world's environment reads its own
        config, which never names the class that reads it (so no import runs from a world's config to its
        environment and back)."""
        if self.environment.type == "proving":
            from aitp.proving.environment import ProverEnvironment

            return ProverEnvironment(self.environment, self.settings(), home)
        from aitp.reasoning.environment import ReasoningEnvironment

        return ReasoningEnvironment(self.environment, self.settings())
