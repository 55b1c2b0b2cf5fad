"""What a training run does, as one typed config (YAML -> `TrainConfig` -> `train(...)`).

Imports pydantic only, so the GPU machine (torch, lightning, deepspeed, transformers) can read it.
"""

from __future__ import annotations

from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, model_serializer, model_validator

from aitp.reasoning.filtering import SEED_THRESHOLD

CompileMode = Literal["default", "reduce-overhead", "max-autotune-no-cudagraphs"]
"""torch.compile modes training takes: reduce-overhead also replays each step's kernels as CUDA graphs (one
recording per batch shape), max-autotune-no-cudagraphs searches matmul and fusion kernels (long compiles)."""
COMPILE_MODES: tuple[str, ...] = get_args(CompileMode)


class LoraConfig(BaseModel):
    """Low-rank adapters (through `peft`) for Hugging Face policies; merged into the weights on save."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    r: int = Field(8, ge=1, description="rank of the adapters")
    alpha: int = Field(16, ge=1, description="scaling numerator (the update is scaled by alpha / r)")
    dropout: float = Field(0.0, ge=0.0, lt=1.0, description="dropout on the adapter input")
    target_modules: list[str] | str = Field("all-linear", description="module names to adapt, or all-linear")


class TrainConfig(BaseModel):
    """One training stage: which examples (selected from the lake), which loss, which hardware plan."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    objective: Literal["sft", "dpo", "grpo"] = "sft"
    """sft: next-token loss on kept completions (expert iteration); dpo: preference pairs from groups; grpo: a
    clipped policy gradient on every sample of the iteration's groups whose scores differ, each weighted by its score
    minus its group's mean, against the log-probs the sampler recorded for its own tokens (`threshold` not used)."""
    demonstrations: bool = False
    """Also train on the items' gold answers as completions: a cold start that imitates the answers, not the policy."""
    demonstrations_only: bool = False
    """Train on demonstrations alone (no rollouts needed): the cold start of iteration 0."""
    threshold: float = Field(SEED_THRESHOLD, lt=1.0)
    """A kept sample must score above this (the seed's rollout_save_score_threshold); scores lie in [0, 1]."""
    data_iterations: Literal["current", "all"] = "current"
    """Select rows of this iteration only, or of every iteration up to it."""
    distinct_completions: bool = False
    """SFT: one example per distinct kept completion of a group, so items the policy already solves (eight
    identical right answers) weigh as much as the ones it has just learned to solve, not eight times more."""
    max_pairs_per_group: int = Field(4, ge=1)
    """DPO: at most this many (chosen, rejected) pairs from one group, largest score gaps first."""
    dpo_beta: float = Field(0.1, gt=0.0)
    """DPO: strength of the implicit KL penalty towards the reference (the base model)."""
    grpo_epochs: int = Field(1, ge=1)
    """GRPO: passes over every sample of the iteration's informative groups (PPO's epochs), each in a fresh seeded
    order; an optimizer step takes a minibatch of batch_size x grad_accum samples per device. More passes reuse
    costly rollouts more, until the policy moves so far from the sampler that the clip stops most tokens."""
    grpo_max_steps: int | None = Field(None, ge=1)
    """GRPO: stop after this many optimizer steps even if the passes are not done (None: every pass runs whole).
    Bounds a fit's time when an iteration yields many informative groups; samples past the cap are not trained."""
    grpo_loss: Literal["grpo", "bnpo", "dr_grpo", "dapo"] = "grpo"
    """GRPO: how token losses are averaged, as TRL names it. grpo: each sequence's mean, then the batch's (short
    answers weigh more per token); bnpo: over the micro-batch's tokens; dr_grpo: summed over a fixed budget of
    micro-batch rows x the longest completion, so no length is favoured; dapo: over the tokens of the whole
    optimizer step (every micro-batch and device), so each token weighs the same wherever it falls. Short answers
    of similar length make them alike; for long reasoning whose length should not be rewarded take dr_grpo or
    dapo, and dapo when steps accumulate micro-batches of very different lengths."""
    grpo_clip_low: float = Field(0.2, gt=0.0, lt=1.0)
    """GRPO: a token's probability ratio to the sampler's is clipped below at 1 - clip_low (PPO's surrogate); lower
    it to keep several passes closer to the sampler."""
    grpo_clip_high: float = Field(0.2, gt=0.0)
    """GRPO: the ratio is clipped above at 1 + clip_high; DAPO raises it (0.28) so rare right tokens can grow faster."""
    grpo_kl_beta: float = Field(0.0, ge=0.0)
    """GRPO: weight of the per-token KL to the base model (its log-probs computed once, before training; 0: none, as
    Dr. GRPO and DAPO recommend); set it when the policy drifts into degenerate answers the scorer still rewards."""
    grpo_scale_std: bool = False
    """GRPO: divide each group's advantages by the group's standard deviation (GRPO); off: Dr. GRPO's mean baseline,
    which does not inflate the nearly solved and nearly hopeless groups' small differences."""
    grpo_keep_uniform: bool = False
    """GRPO: also train on groups whose scores are all equal (their advantage is 0: only the KL term moves them);
    for tests and KL-only runs, as those groups carry no signal."""
    system_prompt: str | None = None
    """System prompt of demonstration examples (None: the environment's); rollouts keep their own prompt."""
    steps: int = Field(100, ge=1)
    """Optimizer steps (sft, dpo; grpo takes as many as its passes over the samples need, so it refuses this)."""
    batch_size: int = Field(8, ge=1)
    """Examples per step per device."""
    grad_accum: int = Field(1, ge=1)
    """Micro-batches accumulated per optimizer step."""
    lr: float = Field(3e-4, gt=0.0)
    """Peak learning rate of AdamW."""
    weight_decay: float = Field(0.0, ge=0.0)
    """AdamW's decoupled weight decay."""
    warmup_steps: int = Field(0, ge=0)
    """Linear warm-up steps, then the rate follows `lr_schedule`."""
    lr_schedule: Literal["constant", "linear", "cosine"] = "constant"
    """After warm-up: keep the peak rate, or decay it to 0 by the fit's last step, linearly or along a cosine; a decay
    lets a long fit (many grpo passes, many sft steps) settle instead of ending on its largest steps."""
    max_len: int = Field(512, ge=8)
    """Longest training sequence in tokens; longer prompts lose their start, completions are kept."""
    precision: Literal["auto", "32-true", "bf16-mixed", "16-mixed", "bf16-true"] = "auto"
    """auto: bf16-mixed on CUDA, 32-true on CPU."""
    zero_stage: Literal[0, 1, 2, 3] = 2
    """DeepSpeed ZeRO stage on CUDA (0: a plain strategy, no DeepSpeed)."""
    offload: Literal["none", "optimizer", "all"] = "none"
    """DeepSpeed offload to CPU: the optimizer state, or also the parameters (stage 3)."""
    devices: int | Literal["auto"] = "auto"
    """GPUs to use (per node); more than one trains in its own launched process (torchrun)."""
    nodes: int = Field(1, ge=1)
    """Machines the training spans: one launcher agent (torchrun, elastic rendezvous) on each of that many workers of
    the loop's Dask cluster, GPU workers first, each training on the GPUs it declares. More than one needs the home
    on storage every node sees (the job and the checkpoint are written there)."""
    resume: bool = False
    """Continue the base checkpoint's DeepSpeed run from its ZeRO state (optimizer included), same GPU count."""
    compile: bool | CompileMode = False
    """Compile network and loss into one graph (torch.compile): pays on long runs on a GPU, where it fuses the
    norms and activations; the first steps (and each new sequence width) pay the compile time. A mode name picks
    torch.compile's mode: reduce-overhead also replays each step as CUDA graphs (one recording per batch shape). With
    zero_stage 3 the parameters stay on the GPU (offload none or optimizer): in one process ZeRO-3 keeps every weight
    whole and the graph is the same; across several GPUs or nodes each decoder block is one graph, its weights
    gathered on entry, and reduce-overhead is refused."""
    lora: LoraConfig | None = None
    """Adapters for Hugging Face policies (None: full fine-tuning)."""
    seed: int = Field(0, ge=0, le=2**32 - 1)
    """Seeds shuffling and initialisation, so a rerun trains the same model (numpy's range: 0..2**32-1)."""
    num_workers: int = Field(0, ge=0)
    """DataLoader worker processes (0: load in the training process)."""
    threads: int | None = Field(None, ge=1)
    """CPU threads of the training process, pinned for the run so the same inputs give the same weights in any
    process, whatever ran in it before (None: every core this process may use)."""

    @model_validator(mode="before")
    @classmethod
    def _renamed(cls, data: Any) -> Any:
        if isinstance(data, dict) and "grpo_clip_eps" in data:
            raise ValueError("grpo_clip_eps is now two keys: set grpo_clip_low and grpo_clip_high (0.2 each as before)")
        return data

    @model_validator(mode="after")
    def _check(self) -> TrainConfig:
        if self.demonstrations_only and not self.demonstrations:
            self.demonstrations = True
        if self.objective != "sft" and self.demonstrations:
            raise ValueError(f"demonstrations train with sft only: set demonstrations false for {self.objective}")
        if self.objective == "grpo" and self.distinct_completions:
            raise ValueError("distinct_completions selects sft examples: remove it for grpo")
        if self.objective == "grpo" and self.data_iterations != "current":
            raise ValueError("grpo trains on the rollouts its base model sampled: set data_iterations current")
        if self.compile and self.zero_stage == 3 and self.offload == "all":
            # Compiled ZeRO-3 traces weights on the GPU: whole in one process, gathered block by block across
            # several (`StrategyPlan.whole_weights`, `StrategyPlan.compile_blocks`); offloaded, they live on the CPU
            raise ValueError(
                "compile with ZeRO-3 needs the parameters on the GPU: set compile: false, or offload: none or optimizer"
            )
        several = self.nodes > 1 or (self.devices != "auto" and self.devices > 1)
        if self.compile == "reduce-overhead" and self.zero_stage == 3 and several:
            raise ValueError(  # a CUDA graph replays the addresses it recorded; ZeRO-3 gathers weights anew each step
                "compile: reduce-overhead replays fixed weight addresses, which ZeRO-3 across several GPUs does not "
                "keep: set compile: true"
            )
        if self.objective == "grpo" and "steps" in self.model_fields_set:
            raise ValueError(
                "grpo's steps follow from grpo_epochs and the samples: remove steps (cap them with grpo_max_steps)"
            )
        unused = [k for k in GRPO_DEFAULTS if k in self.model_fields_set and self.objective != "grpo"]
        if unused:
            raise ValueError(f"{', '.join(unused)} apply to objective grpo only: remove them or set objective: grpo")
        return self

    @model_serializer(mode="wrap")
    def _dump(self, handler: Any) -> dict[str, Any]:
        data = handler(self)  # keys left out at their defaults, so configs recorded before them keep their hash
        for key, default in QUIET_DEFAULTS.items():
            if key in data and data[key] == default:
                data.pop(key)
        if data.get("objective") == "grpo":
            data.pop("steps", None)  # grpo counts its steps from the samples: a dumped 100 would read as set
        return data


GRPO_DEFAULTS: dict[str, Any] = {
    name: field.default for name, field in TrainConfig.model_fields.items() if name.startswith("grpo_")
}
"""The grpo settings and their defaults."""

QUIET_DEFAULTS: dict[str, Any] = {
    **GRPO_DEFAULTS,
    "nodes": TrainConfig.model_fields["nodes"].default,
    "lr_schedule": TrainConfig.model_fields["lr_schedule"].default,
}
"""Settings newer than the first recorded configs, dumped only when set otherwise (old configs keep their hash)."""
