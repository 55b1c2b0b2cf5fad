"""The proving world's part of the loop config (`environment: {type: proving, ...}`), and each backend's shipped one.

`ProvingConfig` says which theorems, how train slices are searched, the fixed valid budget and the tactic model;
`aitp.loop.config.LoopConfig` holds it as its `environment`, and it builds the world's `ProverEnvironment`.
Benchmarks that compare at the loop's settings read a backend's shipped loop config through `loop_proving`
instead of keeping a second copy that could drift. Reading a config loads no prover session: its checks ask the
backend records, which the validators import when they first run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from aitp.configs import MAX_NAME_LENGTH, SHIPPED_CONFIGS
from aitp.policies.spec import PolicySpec, existing_policy
from aitp.proving.errors import UnknownBackendError
from aitp.proving.search.base import ClosingTactic
from aitp.user_yaml import read_yaml

ProverBackend = Literal["coq", "hol-light"]
PROVER_BACKENDS: tuple[str, ...] = get_args(ProverBackend)
"""The backends a proving loop runs on: those whose record ships a loop config (`Backend.loop_config`)."""


class GeneratorConfig(BaseModel):
    """The generative tactic model (`environment.tactic_policy: generative`): its base and how it is fine-tuned."""

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


class ProvingConfig(BaseModel):
    """The proving world: which theorems, how train slices are searched, and the fixed valid budget."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    type: Literal["proving"] = "proving"
    """The world: theorems of an interactive prover, searched with tactics its kernel checks."""
    backend: ProverBackend = "coq"
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
    validated, registered and gated like ours (`aitp.proving.models.external_training`). None: the built-in refit."""
    train_command_timeout_s: float = Field(3600.0, gt=0.0)
    """Seconds `train_command` may run before it is stopped and the iteration fails."""
    tactic_policy: Literal["ranked", "generative"] = "ranked"
    """ranked: the tactic ranker over the fixed tactic set; generative: a language model writes the tactics
    (fine-tuned each iteration on the re-checked train proofs, from its base, gated on the valid split alike)."""
    generator: GeneratorConfig | None = None
    """The generative model's settings (tactic_policy: generative only; None there means the defaults)."""
    first_champion: Literal["untrained", "trained", "human_steps"] = "untrained"
    """untrained: iteration 0 registers and evaluates the untrained models (no search, no training), so every
    gain is measured from the untrained start; trained: iteration 0 searches a slice and trains like the rest;
    human_steps: iteration 0 fine-tunes the generator on the library's human proof steps alone (no search, the
    rankers untrained), the supervised warm start as first champion, to set beside the untrained models."""
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
    closing_tactics: list[ClosingTactic] = []
    """Tactics a search tries on every goal it expands before the model's, each `{tactic, timeout, max_depth}`
    (max_depth 0: the theorem's goal only; omitted: every goal), e.g. CoqHammer's `sauto` everywhere and `hammer`
    on the theorem's goal: the model then only has to break a goal into pieces the automation closes. A `hammer`
    listed here also sets how long its external provers run (half its timeout). []: the model's tactics alone."""
    concurrent_searches: int = Field(1, ge=1, le=256)
    """Proof searches a worker runs at once, each with its own prover session, sharing one tactic model whose
    requests are batched across them (`aitp.proving.search.concurrent`): on a GPU host, one decoder serves every
    search while the provers use the host's cores. 1: one search after another."""

    @model_validator(mode="after")
    def _theorems_exist(self) -> ProvingConfig:
        # checked here, not when the first iteration opens the set after the services have started
        from aitp.proving.data.theorems import THEOREM_SETS  # lazy: a config is read without the provers

        name = self.theorems
        if name in THEOREM_SETS and THEOREM_SETS[name] != self.backend:
            raise ValueError(
                f"environment.theorems {name} is a {THEOREM_SETS[name]} set: set backend: {THEOREM_SETS[name]}"
            )
        if name is not None and name not in THEOREM_SETS and not Path(name).is_file():
            raise ValueError(f"environment.theorems '{name}' is neither {' nor '.join(THEOREM_SETS)} nor a JSONL file")
        return self

    @model_validator(mode="after")
    def _automation_is_offered(self) -> ProvingConfig:
        if not self.automation_tactics:
            return self
        from aitp.proving.backends import BACKENDS  # lazy: a config is read without the provers

        if not BACKENDS[self.backend].automation_tactics:
            having = " or ".join(b.name for b in BACKENDS.values() if b.automation_tactics)
            raise ValueError(f"automation_tactics adds CoqHammer's tactics: use backend: {having} or remove it")
        return self

    @model_validator(mode="after")
    def _closing_tactics_run(self) -> ProvingConfig:
        from aitp.proving.backends import BACKENDS  # lazy: a config is read without the provers
        from aitp.proving.errors import TacticRejectedError

        for closing in self.closing_tactics:
            if not closing.timeout > 0 or (closing.max_depth is not None and closing.max_depth < 0):
                raise ValueError(
                    f"environment.closing_tactics '{closing.tactic}': timeout must be > 0 and max_depth >= 0 or absent"
                )
            try:
                BACKENDS[self.backend].validate_tactic(closing.tactic, self.automation_tactics)
            except TacticRejectedError as exc:
                raise ValueError(f"environment.closing_tactics '{closing.tactic}' is refused: {exc}") from None
        return self

    @property
    def hammer_timeout(self) -> float:
        """Seconds `hammer` runs (its provers get half): a closing `hammer`'s timeout, else the tactic timeout."""
        return next((c.timeout for c in self.closing_tactics if c.tactic == "hammer"), self.tactic_timeout)

    @model_validator(mode="after")
    def _critic_takes_effect(self) -> ProvingConfig:
        if self.critic is not None and self.search == "bfs":
            raise ValueError("environment.critic has no effect with search: bfs: use htps, updown, fringe or bestfs")
        if self.critic_min_visits != 1 and self.critic != "learned":  # 1, the default, is what a record holds
            raise ValueError(
                "environment.critic_min_visits labels a learned critic: set environment.critic: learned or remove it"
            )
        return self

    @property
    def theorem_set_name(self) -> str:
        """The theorem set searched: the one named, else the backend's default (one rule for loop and benchmarks)."""
        from aitp.proving.backends import BACKENDS  # lazy: a config is read without the provers

        return self.theorems or BACKENDS[self.backend].default_theorem_set

    @model_validator(mode="after")
    def _check_generator(self) -> ProvingConfig:
        if self.tactic_policy == "ranked" and self.generator is not None:
            raise ValueError("environment.generator is read only with tactic_policy: generative: remove it or set that")
        if self.tactic_policy == "generative" and self.generator is None:
            self.generator = GeneratorConfig()
        if self.generator is not None and self.generator.human_steps and not self.learn:
            raise ValueError("generator.human_steps trains the generator: remove it or set environment.learn: true")
        if self.first_champion == "human_steps" and (self.generator is None or not self.generator.human_steps):
            raise ValueError(
                "first_champion: human_steps fine-tunes the generator on the human proof steps: set "
                "environment.tactic_policy: generative and environment.generator.human_steps: true"
            )
        return self


def loop_proving(backend: str) -> ProvingConfig:
    """The `environment` section of the backend's shipped loop config: its theorem set, tactic timeout and budgets."""
    from aitp.proving.backends import BACKENDS

    record = BACKENDS.get(backend)
    if record is None or record.loop_config is None:
        raise UnknownBackendError(f"no proving loop for backend '{backend}': use one of {', '.join(PROVER_BACKENDS)}")
    loop = read_yaml(SHIPPED_CONFIGS / record.loop_config) or {}
    return ProvingConfig.model_validate(loop.get("environment") or {})
