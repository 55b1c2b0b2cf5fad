"""The whole loop as one typed config: tasks, the starting policy, rollouts, training, eval, promotion.

`aitp run --config FILE --set key=value` loads it (YAML -> `LoopConfig`); its hash, with the code
version, is the version of every iteration's flow run, so two runs that share a hash ran the same
recipe. Iteration 0 is the warm start (training on demonstrations); iterations 1..N self-train on
the champion's own kept samples.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_serializer, model_validator

from aitp.configs import MAX_NAME_LENGTH
from aitp.environment import Environment, LoopSettings
from aitp.fanout.config import FanoutConfig
from aitp.policies.spec import PolicySpec, existing_policy
from aitp.reasoning.config import ReasoningConfig
from aitp.registry.store import PromotionConfig

MAX_ITERATION = 999
"""The last iteration a loop may run: each trains with seed `seed * 1000 + iteration`, distinct per iteration."""
MAX_SEED = (2**32 - 1 - MAX_ITERATION) // 1000
"""The largest loop seed whose derived training seeds stay within numpy's (and Lightning's) 0..2**32-1."""

PROVER_BACKENDS = ("coq", "hol-light")


class GeneratorConfig(BaseModel):
    """The generative tactic model (`proving.tactic_policy: generative`): its base and how it is fine-tuned."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    base: str | None = None
    """A policy spec (a Hugging Face checkpoint path on a GPU, a tiny checkpoint...); None: a fresh built-in model."""
    steps: int = Field(300, ge=1)
    """Fine-tuning optimizer steps per iteration."""
    batch_size: int = Field(16, ge=1)
    """Examples per step."""
    lr: float = Field(1e-3, gt=0.0)
    """Peak learning rate of AdamW."""
    max_goal_chars: int | None = Field(256, ge=16)
    """The goal's last characters in the prompt (None: all of it)."""
    samples_per_tactic: int = Field(2, ge=1)
    """Completions drawn per tactic a search asks for; the best distinct valid ones are tried."""
    with_alternatives: bool = True
    """Also train on the other tactics that worked on a proof's goal."""
    human_steps: bool = False
    """Also fine-tune on the library's human proofs, step by step (the home's `human_steps` table: allowlisted steps
    of train theorems, replayed by `aitp prove-steps`): the supervised warm start, then beside the loop's proofs."""

    @field_validator("base")
    @classmethod
    def _base_exists(cls, value: str | None) -> str | None:
        if value is not None:
            existing_policy(PolicySpec.parse(value))
        return value

    @model_serializer(mode="wrap")
    def _dump(self, handler: Any) -> dict[str, Any]:
        data = handler(self)  # left out when off, so experiments recorded before the key existed keep their hash
        if not data.get("human_steps"):
            data.pop("human_steps", None)
        return data


class ProvingConfig(BaseModel):
    """The prover environment: which theorems, how train slices are searched, and the fixed valid budget."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    type: Literal["proving"] = "proving"
    """The world: theorems of an interactive prover, searched with tactics its kernel checks."""
    backend: Literal["coq", "hol-light"] = "coq"
    """The interactive prover whose theorems are searched and whose kernel checks every proof."""
    theorems: str | None = None
    """A named theorem set (coq-stdlib, hol-core) or a JSONL file; None: the backend's default set."""
    train_slice: int = Field(100, ge=1)
    """Train theorems searched per iteration (successive slices of a fixed seeded order)."""
    search: Literal["bestfs", "bfs", "htps", "fringe", "updown"] = "bestfs"
    """The proof search (`aitp.proving.search`): best-first, breadth-first, HTPS, fringe or up-down."""
    train_expansions: int = Field(8, ge=1)
    """Node expansions per train theorem's search."""
    train_tactics_per_goal: int = Field(10, ge=1)
    """The cut on the train slice: wider than at evaluation, so new kinds of proofs are found."""
    explore: float = Field(1.0, ge=0.0)
    """Gumbel temperature of the candidate order on the train slice (0: greedy)."""
    eval_name: str = Field("valid", pattern=r"^[A-Za-z0-9_-]+$", max_length=MAX_NAME_LENGTH)
    """The evaluation's name in the lake."""
    valid_theorems: int = Field(100, ge=1)
    """The first valid-split theorems (library order): the fixed set every model is evaluated on."""
    eval_expansions: int = Field(8, ge=1)
    """Node expansions per valid theorem's search: the fixed budget every model is evaluated at."""
    eval_tactics_per_goal: int = Field(4, ge=1)
    """Tactics tried per goal at evaluation."""
    tactic_timeout: float = Field(2.0, gt=0.0)
    """Seconds one tactic may run (HOL Light counts its session's CPU seconds: load does not cause timeouts)."""
    prover_seconds: float = Field(60.0, gt=0.0)
    """Most prover seconds per theorem (train and valid)."""
    epochs: int = Field(8, ge=1)
    """Epochs of the tactic ranker per training."""
    learn: bool = True
    """False is the control: every challenger is the untrained models."""
    train_command: list[str] | None = Field(None, min_length=1)
    """The seed's `train_after_eval`: a user's training command (an argv list; placeholders {home} {lake}
    {experiment} {iteration} {out}) run instead of the built-in refit; the checkpoint it writes into {out} is
    validated, registered and gated like ours (`aitp.proving.external_training`). None: the built-in refit."""
    train_command_timeout_s: float = Field(3600.0, gt=0.0)
    """Seconds `train_command` may run before it is stopped and the iteration fails."""
    tactic_policy: Literal["ranked", "generative"] = "ranked"
    """ranked: the tactic ranker over the fixed tactic set; generative: a language model writes the tactics
    (fine-tuned each iteration on the re-checked train proofs, from its base, gated on the valid split alike)."""
    generator: GeneratorConfig | None = None
    """The generative model's settings (tactic_policy: generative only; None there means the defaults)."""
    first_champion: Literal["untrained", "trained"] = "untrained"
    """untrained: iteration 0 registers and evaluates the untrained models (no search, no training), so every
    gain is measured from the untrained start; trained: iteration 0 searches a slice and trains like the rest."""
    critic: Literal["constant", "length", "learned"] | None = None
    """The goal critic of the searches that use one (htps, updown, fringe; bestfs breaks ties with it): learned is
    the champion's trained critic (trained from the traces each iteration; the search's default while the models
    are untrained), constant 0.5 everywhere, length the untrained prior; None: the search's default (length;
    bestfs none)."""
    critic_min_visits: int = Field(1, ge=1)
    """Critic labels: a goal left unproved after this many visits (an expansion counts as one) is a negative."""
    automation_tactics: bool = False
    """Coq only: CoqHammer's tactics (`sauto`, `qauto`, `hauto`, `sauto use: ...`, `hammer`) join the fixed tactic
    set, so the search may choose them and the ranker learns when to (needs libcoq-hammer: scripts/install_provers.sh).
    False keeps the fixed set as it was."""
    concurrent_searches: int = Field(1, ge=1, le=256)
    """Proof searches a worker runs at once, each with its own prover session, sharing one tactic model whose
    requests are batched across them (`aitp.proving.concurrent`): on a GPU host, one decoder serves every
    search while the provers use the host's cores. 1: one search after another."""

    @model_validator(mode="after")
    def _theorems_exist(self) -> ProvingConfig:
        # checked here, not when the first iteration opens the set after the services have started
        from aitp.proving.theorems import THEOREM_SETS

        name = self.theorems
        if name in THEOREM_SETS and THEOREM_SETS[name] != self.backend:
            raise ValueError(
                f"proving.theorems {name} is a {THEOREM_SETS[name]} set: set backend: {THEOREM_SETS[name]}"
            )
        if name is not None and name not in THEOREM_SETS and not Path(name).is_file():
            raise ValueError(f"proving.theorems '{name}' is neither {' nor '.join(THEOREM_SETS)} nor a JSONL file")
        return self

    @model_validator(mode="after")
    def _automation_is_coq(self) -> ProvingConfig:
        if self.automation_tactics and self.backend != "coq":
            raise ValueError("proving.automation_tactics adds CoqHammer's tactics: use backend: coq or remove it")
        return self

    @model_validator(mode="after")
    def _critic_takes_effect(self) -> ProvingConfig:
        if self.critic is not None and self.search == "bfs":
            raise ValueError("proving.critic has no effect with search: bfs: use htps, updown, fringe or bestfs")
        if "critic_min_visits" in self.model_fields_set and self.critic != "learned":
            raise ValueError(
                "proving.critic_min_visits labels a learned critic: set proving.critic: learned or remove it"
            )
        return self

    def build(self, settings: LoopSettings, home: Path) -> Environment:
        """The world's environment for one loop under `home`."""
        from aitp.loop.proving import ProverEnvironment

        return ProverEnvironment(self, settings, home)

    @property
    def theorem_set_name(self) -> str:
        """The theorem set searched: the one named, else the backend's default (one rule for loop and benchmarks)."""
        from aitp.proving.backends import DEFAULT_THEOREM_SETS  # lazy: a config is read without the provers

        return self.theorems or DEFAULT_THEOREM_SETS[self.backend]

    @model_serializer(mode="wrap")
    def _dump(self, handler: Any) -> dict[str, Any]:
        # keys left out at their defaults, so experiments recorded before the keys existed keep their hash
        data = handler(self)
        for key, default in (
            ("critic", None),
            ("critic_min_visits", 1),
            ("concurrent_searches", 1),
            ("automation_tactics", False),
        ):
            if data.get(key) == default:
                data.pop(key)
        return data

    @model_validator(mode="after")
    def _check_generator(self) -> ProvingConfig:
        if self.tactic_policy == "ranked" and self.generator is not None:
            raise ValueError("proving.generator is read only with tactic_policy: generative: remove it or set that")
        if self.tactic_policy == "generative" and self.generator is None:
            self.generator = GeneratorConfig()
        if self.generator is not None and self.generator.human_steps and not self.learn:
            raise ValueError("proving.generator.human_steps trains the generator: remove it or set proving.learn: true")
        return self


WORLD_KEYS = ("policy", "system_prompt", "tasks", "demonstrations_per_task", "warm_start", "self_train", "eval")
"""Top-level keys of the layout before worlds had their own section: now keys of `environment`."""
FANOUT_KEYS = ("chunk_items", "shard_size", "workers", "dask_address")
"""`rollouts` keys of that layout that are now the engine's `fanout` section."""


def from_flat_layout(data: Any) -> Any:
    """A config written before each world had its section (`environment: proving` beside a `proving` section,
    `tasks` and `rollouts` at the top), in today's layout: records of older homes and older files still load."""
    if not isinstance(data, dict) or isinstance(data.get("environment"), dict):
        return data
    data = dict(data)
    world: dict[str, Any] = {"type": data.pop("environment", "reasoning")}
    if world["type"] == "proving":
        world.update(data.pop("proving", None) or {})
    rollouts = dict(data.pop("rollouts", None) or {})
    fanout = {key: rollouts.pop(key) for key in FANOUT_KEYS if key in rollouts}
    world.update({key: data.pop(key) for key in WORLD_KEYS + ("proving",) if key in data})
    if rollouts:
        world["rollouts"] = rollouts
    if fanout:
        data["fanout"] = {**fanout, **(data.get("fanout") or {})}
    data["environment"] = world
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

    def settings(self) -> LoopSettings:
        """What a world reads of the engine's settings."""
        return LoopSettings(self.experiment, self.seed, self.device, self.fanout)

    def build_environment(self, home: Path) -> Environment:
        """The environment of the config's world, for one loop under `home`."""
        return self.environment.build(self.settings(), home)
