"""The reasoning world's part of the loop config (`environment: {type: reasoning, ...}`).

What the loop learns from (reasoning-gym tasks and their demonstrations), the starting policy, how it samples
groups of answers, how each stage trains, and the fixed held-out set. Validated once with the loop config and
handed whole to the world's `ReasoningEnvironment`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from aitp.configs import MAX_NAME_LENGTH
from aitp.policies.base import SamplingParams
from aitp.policies.spec import PolicySpec, existing_policy
from aitp.reasoning.evaluate import EvalConfig
from aitp.reasoning.filtering import SEED_THRESHOLD
from aitp.train.config import TrainConfig

LOOP_OWNED_TRAIN_KEYS = {
    "threshold": "set environment.rollouts.threshold instead",
    "seed": "derived from the loop's seed and the iteration",
}


class StageTrainConfig(TrainConfig):
    """A loop stage's training: a TrainConfig whose seed and threshold the loop sets for each iteration.

    A value given for them here would have no effect, so it is refused (None means "the loop's").
    """

    threshold: float | None = None
    """Set by the loop from `environment.rollouts.threshold` (a value here is refused)."""
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
    """Demonstrations of this task for the warm start (None: the world's `demonstrations_per_task`)."""

    @model_validator(mode="after")
    def _known_to_reasoning_gym(self) -> TaskSpec:
        from aitp.errors import AitpError
        from aitp.reasoning.tasks import check_task_config

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

    def sampling(self) -> SamplingParams:
        """How each group is sampled: `group_size` completions per item."""
        return SamplingParams(
            n=self.group_size, temperature=self.temperature, top_p=self.top_p, max_tokens=self.max_tokens
        )


class LoopEvalConfig(BaseModel):
    """The fixed held-out set every model is compared on (its tasks are the world's tasks)."""

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


class ReasoningConfig(BaseModel):
    """The reasoning world: reasoning-gym tasks, the starting policy, sampling, training and the held-out set."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    type: Literal["reasoning"] = "reasoning"
    """The world: reasoning-gym tasks answered by a language model."""
    policy: PolicySpec = Field(default_factory=lambda: PolicySpec(backend="tiny"))
    """The starting policy: tiny, smollm2, a path, or a spec mapping (see aitp.policies.spec)."""
    system_prompt: str | None = None
    """One system prompt for rollouts, demonstrations and eval (None: the world's)."""
    tasks: list[TaskSpec] = Field(default_factory=list)
    """reasoning-gym tasks (at least one)."""
    demonstrations_per_task: int = Field(150, ge=0)
    """Train items whose gold answers the warm start imitates (0: no warm start, iteration 0 self-trains)."""
    rollouts: RolloutConfig = Field(default_factory=RolloutConfig)
    """How the champion samples groups of answers on train items."""
    warm_start: StageTrainConfig = Field(default_factory=lambda: StageTrainConfig(demonstrations_only=True))
    """Iteration 0's training (demonstrations_only)."""
    self_train: StageTrainConfig = Field(default_factory=StageTrainConfig)
    """Iterations 1..N; demonstrations_only here makes the control (no rollouts, demonstrations again)."""
    eval: LoopEvalConfig = Field(default_factory=LoopEvalConfig)
    """The fixed held-out set every model is compared on."""

    @field_validator("policy", mode="before")
    @classmethod
    def _parse_policy(cls, value: Any) -> PolicySpec:
        return existing_policy(PolicySpec.parse(value))

    @model_validator(mode="after")
    def _check(self) -> ReasoningConfig:
        if not self.tasks:
            raise ValueError("tasks: list at least one reasoning-gym task")
        for stage in ("warm_start", "self_train"):
            if self.system_prompt is not None and getattr(self, stage).system_prompt is not None:
                raise ValueError(f"{stage}.system_prompt is replaced by environment.system_prompt: set only one")
        names = [t.name for t in self.tasks]
        if len(set(names)) != len(names):
            raise ValueError("tasks must be distinct: merge the duplicate entries")
        if self.rollouts.overlap and self.self_train.demonstrations_only:
            raise ValueError("rollouts.overlap overlaps sampling with training, but a control never samples: remove it")
        if not any(self.demonstrations(t.name) for t in self.tasks) and self.warm_start.demonstrations_only:
            raise ValueError("no task has demonstrations but warm_start trains on demonstrations only")
        return self

    def demonstrations(self, name: str) -> int:
        """How many demonstrations the warm start takes of a task."""
        task = next(t for t in self.tasks if t.name == name)
        return self.demonstrations_per_task if task.demonstrations is None else task.demonstrations

    def task_config(self, name: str) -> dict[str, Any]:
        return next(t.config for t in self.tasks if t.name == name)

    def eval_config(self, seed: int) -> EvalConfig:
        """The EvalConfig of the held-out set: the world's tasks and their configs, greedy by default."""
        return EvalConfig(
            name=self.eval.name,
            tasks=[t.name for t in self.tasks],
            task_configs={t.name: t.config for t in self.tasks if t.config},
            n_per_task=self.eval.n_per_task,
            seed=seed,
            temperature=self.eval.temperature,
            max_tokens=self.eval.max_tokens,
            batch_size=self.eval.batch_size,
            system_prompt=self.system_prompt,
        )

    def train_config(self, iteration: int, seed: int) -> TrainConfig:
        """The training of an iteration, seeded per iteration (`seed * 1000 + iteration`) so reruns train the same."""
        base = self.warm_start if iteration == 0 else self.self_train
        update: dict[str, Any] = {"seed": seed * 1000 + iteration, "threshold": self.rollouts.threshold}
        if self.system_prompt is not None:
            update["system_prompt"] = self.system_prompt
        if iteration > 0 and base.demonstrations_only:
            update["data_iterations"] = "all"  # the control: the warm start's demonstrations again
        fields = {k: v for k, v in base.model_dump().items() if k not in LOOP_OWNED_TRAIN_KEYS}
        return TrainConfig.model_validate({**fields, **update})

    def rolls_out(self, iteration: int) -> bool:
        """Whether the iteration samples rollouts (not the warm start, not a demonstrations-only control)."""
        stage = self.warm_start if iteration == 0 else self.self_train
        return not stage.demonstrations_only
