"""The whole loop as one typed config: tasks, the starting policy, rollouts, training, eval, promotion.

`aitp run --config FILE --set key=value` loads it (YAML -> `LoopConfig`); its hash, with the code
version, is the version of every iteration's flow run, so two runs that share a hash ran the same
recipe. Iteration 0 is the warm start (training on demonstrations); iterations 1..N self-train on
the champion's own kept samples.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_serializer, model_validator

from aitp.configs import MAX_NAME_LENGTH
from aitp.evaluate import EvalConfig
from aitp.filtering import SEED_THRESHOLD
from aitp.policies.base import SamplingParams
from aitp.policies.spec import PolicySpec, existing_policy
from aitp.proving.config import PROVER_BACKENDS, GeneratorConfig, ProvingConfig  # noqa: F401 - re-exported
from aitp.registry.store import PromotionConfig
from aitp.train.config import TrainConfig

MAX_ITERATION = 999
"""The last iteration a loop may run: each trains with seed `seed * 1000 + iteration`, distinct per iteration."""
MAX_SEED = (2**32 - 1 - MAX_ITERATION) // 1000
"""The largest loop seed whose derived training seeds stay within numpy's (and Lightning's) 0..2**32-1."""

LOOP_OWNED_TRAIN_KEYS = {
    "threshold": "set rollouts.threshold instead",
    "seed": "derived from the loop's seed and the iteration",
}


class StageTrainConfig(TrainConfig):
    """A loop stage's training: a TrainConfig whose seed and threshold the loop sets for each iteration.

    A value given for them here would have no effect, so it is refused (None means "the loop's").
    """

    threshold: float | None = None
    """Set by the loop from `rollouts.threshold` (a value here is refused)."""
    seed: int | None = None
    """Set by the loop: `seed * 1000 + iteration` (a value here is refused)."""

    @field_validator("threshold", "seed", mode="before")
    @classmethod
    def _owned_by_the_loop(cls, value: Any, info: Any) -> None:
        if value is not None:
            raise ValueError(f"is set by the loop ({LOOP_OWNED_TRAIN_KEYS[info.field_name]}): remove it")
        return None


class TaskSpec(BaseModel):
    """One reasoning-gym task and the overrides of its dataset config."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    name: str
    """A reasoning-gym task name (basic_arithmetic, spell_backward, ...)."""
    config: dict[str, Any] = Field(default_factory=dict)
    """Overrides of the task's reasoning-gym dataset config (min_word_len, max_terms, ...)."""
    demonstrations: int | None = Field(None, ge=0)
    """Demonstrations of this task for the warm start (None: the loop's `demonstrations_per_task`)."""

    @model_validator(mode="after")
    def _known_to_reasoning_gym(self) -> TaskSpec:
        from aitp.envs.tasks import check_task_config
        from aitp.errors import AitpError

        try:
            check_task_config(self.name, self.config)
        except AitpError as exc:  # pydantic reports ValueErrors with the key they belong to
            raise ValueError(str(exc)) from None
        return self


class RolloutConfig(BaseModel):
    """How the champion samples groups of answers on train items."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    items_per_task: int = Field(150, ge=1)
    """Train items per task rolled out in each self-training iteration."""
    fresh_items: bool = True
    """Each iteration rolls out on items not used before (else on the demonstration items again)."""
    group_size: int = Field(8, ge=1)
    """Samples per item: a group, which the filter keeps or drops whole and grpo takes its baseline over."""
    temperature: float = Field(1.0, ge=0.0)
    """Sampling temperature of the rollouts."""
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    """Nucleus sampling's probability mass (1: off)."""
    max_tokens: int = Field(64, ge=1)
    """Most tokens per completion."""
    threshold: float = Field(SEED_THRESHOLD, lt=1.0)
    """A group is kept when a sample scores above this (the seed's rollout_save_score_threshold); training
    then takes the kept samples above it (the loop's one threshold: train configs may not set their own).
    Scores lie in [0, 1], so 1 or more would keep nothing; a negative one keeps every sample."""
    chunk_items: int = Field(150, ge=1)
    """Items per committed chunk: the unit of resume (a Prefect task each), fanned out over Dask shards."""
    shard_size: int | None = Field(None, ge=1)
    """Items per Dask task (None: sized to the cluster)."""
    workers: int | None = Field(None, ge=1)
    """Local Dask worker processes (None: one per core); ignored with a scheduler address."""
    dask_address: str | None = None
    """An existing Dask scheduler (tcp://host:8786); None starts a local cluster for the run."""
    overlap: bool = False
    """Sample iteration k+1's groups while iteration k trains, with the model iteration k started from (its
    champion), so sampling and training run at once. Off: each iteration samples with its own starting model."""
    max_policy_lag: Literal[1] = 1
    """With overlap: at most this many champions crowned between the model that sampled a rollout and the model
    trained on it (the lake's `rollout_lineage` view shows each rollout's). Acting one iteration ahead is what is
    built, so the lag is 0 or 1; a deeper pipeline (and so a larger bound) is not."""
    gpu_memory_share: float | None = Field(None, gt=0.0, le=1.0)
    """The share of each GPU's memory a rollout worker's decoder may hold (None: nearly all that is free). With
    overlap on a card the training shares, leave the training room, e.g. 0.4."""

    @model_serializer(mode="wrap")
    def _dump(self, handler: Any) -> dict[str, Any]:
        data = handler(self)  # left out at their defaults, so experiments recorded before the keys keep their hash
        for key, default in (("overlap", False), ("max_policy_lag", 1), ("gpu_memory_share", None)):
            if data.get(key) == default:
                data.pop(key, None)
        return data

    @model_validator(mode="after")
    def _workers_need_a_local_cluster(self) -> RolloutConfig:
        if self.workers is not None and self.dask_address is not None:
            raise ValueError(
                "rollouts.workers sizes a local cluster and has no effect with rollouts.dask_address: remove one"
            )
        return self

    def sampling(self) -> SamplingParams:
        """How each group is sampled: `group_size` completions per item."""
        return SamplingParams(
            n=self.group_size, temperature=self.temperature, top_p=self.top_p, max_tokens=self.max_tokens
        )


class LoopEvalConfig(BaseModel):
    """The fixed held-out set every model is compared on (its tasks are the loop's tasks)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    name: str = Field("heldout", pattern=r"^[A-Za-z0-9_-]+$", max_length=MAX_NAME_LENGTH)
    """The held-out set's name in the lake (`evals.eval_name`)."""
    n_per_task: int = Field(100, ge=1)
    """Held-out questions per task (never among the training items)."""
    temperature: float = Field(0.0, ge=0.0)
    """0: greedy answers."""
    max_tokens: int = Field(64, ge=1)
    """Most tokens per answer."""
    batch_size: int = Field(64, ge=1)
    """Questions per sampling call."""


REASONING_ONLY = ("tasks", "demonstrations_per_task", "warm_start", "self_train", "eval", "system_prompt", "policy")
"""Top-level keys that only the reasoning environment reads."""
REASONING_ONLY_ROLLOUTS = (
    "items_per_task",
    "fresh_items",
    "group_size",
    "temperature",
    "top_p",
    "max_tokens",
    "threshold",
    "overlap",
    "max_policy_lag",
    "gpu_memory_share",
)
"""`rollouts` keys of sampling; chunk_items, shard_size, workers and dask_address fan out any environment."""


class LoopConfig(BaseModel):
    """An experiment: what it learns from, how each stage runs, and when it stops."""

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
    policy: PolicySpec = Field(default_factory=lambda: PolicySpec(backend="tiny"))
    """The starting policy: tiny, smollm2, a path, or a spec mapping (see aitp.policies.spec)."""
    device: str | None = None
    """Where training and local sampling run (None: cuda if present, else cpu)."""
    system_prompt: str | None = None
    """One system prompt for rollouts, demonstrations and eval (None: the environment's)."""
    environment: Literal["reasoning", "proving"] = "reasoning"
    """The world the loop learns in: reasoning-gym tasks, or proving theorems (the `proving` section)."""
    proving: ProvingConfig | None = None
    """The prover environment's settings (environment: proving only; None there means the defaults)."""
    tasks: list[TaskSpec] = Field(default_factory=list)
    """reasoning-gym tasks (environment: reasoning only, at least one)."""
    demonstrations_per_task: int = Field(150, ge=0)
    """Train items whose gold answers the warm start imitates (0: no warm start, iteration 0 self-trains)."""
    rollouts: RolloutConfig = Field(default_factory=RolloutConfig)
    """How the champion acts on train items (sampling groups) and how acting fans out over Dask."""
    warm_start: StageTrainConfig = Field(default_factory=lambda: StageTrainConfig(demonstrations_only=True))
    """Iteration 0's training (demonstrations_only)."""
    self_train: StageTrainConfig = Field(default_factory=StageTrainConfig)
    """Iterations 1..N; demonstrations_only here makes the control (no rollouts, demonstrations again)."""
    eval: LoopEvalConfig = Field(default_factory=LoopEvalConfig)
    """The fixed held-out set every model is compared on."""
    promotion: PromotionConfig = Field(default_factory=PromotionConfig)
    """When a challenger replaces the champion."""
    mode: Literal["self_train", "control"] = "self_train"
    """Informational label shown in reports; the control is defined by self_train.demonstrations_only."""

    @field_validator("policy", mode="before")
    @classmethod
    def _parse_policy(cls, value: Any) -> PolicySpec:
        return existing_policy(PolicySpec.parse(value))

    @model_validator(mode="after")
    def _check(self) -> LoopConfig:
        if self.environment == "proving":
            return self._check_proving()
        if self.proving is not None:
            raise ValueError("proving is read only with environment: proving: remove it or set environment: proving")
        if not self.tasks:
            raise ValueError("tasks: list at least one reasoning-gym task")
        for stage in ("warm_start", "self_train"):
            if self.system_prompt is not None and getattr(self, stage).system_prompt is not None:
                raise ValueError(f"{stage}.system_prompt is replaced by the loop's system_prompt: set only one")
        names = [t.name for t in self.tasks]
        if len(set(names)) != len(names):
            raise ValueError("tasks must be distinct: merge the duplicate entries")
        if self.rollouts.overlap and self.self_train.demonstrations_only:
            raise ValueError("rollouts.overlap overlaps sampling with training, but a control never samples: remove it")
        if not any(self.demonstrations(t.name) for t in self.tasks) and self.warm_start.demonstrations_only:
            raise ValueError("no task has demonstrations but warm_start trains on demonstrations only")
        return self

    def _check_proving(self) -> LoopConfig:
        """Refuse reasoning settings that would have no effect on a proving loop; fill the proving defaults."""
        unused = [
            k
            for k in REASONING_ONLY
            if getattr(self, k) != type(self).model_fields[k].get_default(call_default_factory=True)
        ]
        defaults = RolloutConfig()
        unused += [
            f"rollouts.{k}" for k in REASONING_ONLY_ROLLOUTS if getattr(self.rollouts, k) != getattr(defaults, k)
        ]
        if unused:
            raise ValueError(
                f"{', '.join(unused)} only apply to environment: reasoning: remove them (see the proving section)"
            )
        if self.proving is None:
            self.proving = ProvingConfig()
        return self

    @model_serializer(mode="wrap")
    def _dump(self, handler: Any) -> dict[str, Any]:
        # A reasoning config dumps (and so hashes) as before the proving environment existed; a proving
        # config leaves out the reasoning keys it refuses, so its record reloads.
        data = handler(self)
        if self.environment == "reasoning":
            data.pop("environment", None)
            data.pop("proving", None)
        else:
            for key in REASONING_ONLY:
                data.pop(key, None)
            for key in REASONING_ONLY_ROLLOUTS:
                data.get("rollouts", {}).pop(key, None)
            if isinstance(data.get("proving"), dict) and data["proving"].get("tactic_policy") == "ranked":
                # a ranked loop dumps (and hashes) as before the generative policy existed, so it resumes
                data["proving"].pop("tactic_policy", None)
                data["proving"].pop("generator", None)
        return data

    def demonstrations(self, name: str) -> int:
        """How many demonstrations the warm start takes of a task."""
        task = next(t for t in self.tasks if t.name == name)
        return self.demonstrations_per_task if task.demonstrations is None else task.demonstrations

    def task_config(self, name: str) -> dict[str, Any]:
        return next(t.config for t in self.tasks if t.name == name)

    def eval_config(self) -> EvalConfig:
        """The EvalConfig of the held-out set: the loop's tasks and their configs, greedy by default."""
        return EvalConfig(
            name=self.eval.name,
            tasks=[t.name for t in self.tasks],
            task_configs={t.name: t.config for t in self.tasks if t.config},
            n_per_task=self.eval.n_per_task,
            seed=self.seed,
            temperature=self.eval.temperature,
            max_tokens=self.eval.max_tokens,
            batch_size=self.eval.batch_size,
            system_prompt=self.system_prompt,
        )

    def train_config(self, iteration: int) -> TrainConfig:
        """The training of an iteration, seeded per iteration so reruns train the same model."""
        base = self.warm_start if iteration == 0 else self.self_train
        update: dict[str, Any] = {"seed": self.seed * 1000 + iteration, "threshold": self.rollouts.threshold}
        if self.system_prompt is not None:
            update["system_prompt"] = self.system_prompt
        if iteration > 0 and base.demonstrations_only:
            update["data_iterations"] = "all"  # the control: the warm start's demonstrations again
        fields = {k: v for k, v in base.model_dump().items() if k not in LOOP_OWNED_TRAIN_KEYS}
        return TrainConfig.model_validate({**fields, **update})

    def rolls_out(self, iteration: int) -> bool:
        """Whether the iteration samples rollouts (not the warm start, not a demonstrations-only control)."""
        return not self.train_config(iteration).demonstrations_only
