"""`train(...)`: select examples from the lake, fit the policy, write a checkpoint directory.

`train` is the library entry point (it reads the lake). `fit` is the part that needs only torch and
Lightning: it takes examples, trains and saves, and is what each rank of a launched process group runs
(`aitp.train.launcher`):

    python -m torch.distributed.run --standalone --nproc_per_node N -m aitp.train.run --job JOB.json
"""

from __future__ import annotations

import argparse
import atexit
import functools
import gc
import math
import os
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from aitp.atomic import publish_dir, staging_dir
from aitp.checkpoints import ZERO_DIR, read_record, write_record
from aitp.train.checkpoint import CheckpointError, checkpoint_dir, consolidate_zero, save_policy
from aitp.train.config import TrainConfig
from aitp.train.grpo import Surrogate, planned_order, step_tokens
from aitp.train.launcher import check_written, job_file, launch_here, launch_on_nodes, read_job
from aitp.train.module import (
    ExampleDataset,
    PolicyModule,
    SampledDataset,
    Trainable,
    encode_examples,
    load_trainable,
    make_collate,
    pl,
    reference_logprobs,
    sampled_token_logprobs,
)
from aitp.train.sigterm import ReadSigtermOneStepLate
from aitp.train.strategy import StrategyError, StrategyPlan, build_strategy, detect_hardware, plan_strategy


@dataclass
class TrainResult:
    """What one training run did; saved as the checkpoint's `training.json`."""

    checkpoint: str
    base: Any
    objective: str
    examples: int
    steps: int
    tokens: int
    seconds: float
    strategy: str
    device: str
    world_size: int = 1
    """Training processes (one per GPU) that the data was split over."""
    nodes: int = 1
    """Machines (launcher agents) those processes ran on."""
    losses: list[float] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    logprob_gap: float | None = None
    """grpo: mean |sampler's recorded - base model's recomputed| log-prob over the trained tokens (fp32 CPU: ~0)."""
    groups: int | None = None
    """grpo: the groups trained on (those whose scores differ, all of them with grpo_keep_uniform)."""
    phases: dict[str, float] = field(default_factory=dict)
    """Where `seconds` went, adding up to it: loading the base and encoding (`load_s`), building the trainer and its
    strategy until the first step (`setup_s`: DeepSpeed's engine), the steps (`steps_s`), Lightning's teardown after
    them (`teardown_s`: it moves the model and optimizer state off the GPU) and writing the checkpoint (`save_s`)."""

    @property
    def first_loss(self) -> float:
        return self.losses[0] if self.losses else float("nan")

    @property
    def last_loss(self) -> float:
        tail = self.losses[-max(1, len(self.losses) // 10) :]
        return sum(tail) / len(tail) if tail else float("nan")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _spec_of(base: Any) -> dict[str, Any]:
    """The base model's spec as JSON (for the training record and a launched process)."""
    from aitp.policies.spec import PolicySpec

    return PolicySpec.parse(base).model_dump(mode="json", exclude_none=True)


def _base_version(base: Any) -> str:
    from aitp.policies.spec import model_id

    return model_id(base)


def train(
    home: str | Path,
    experiment: str,
    iteration: int,
    base_checkpoint: str | Path | dict[str, Any],
    config: TrainConfig,
    out: str | Path | None = None,
) -> Path:
    """Train the base policy on examples selected from the lake; return the checkpoint directory."""
    from aitp.home import resolve_home
    from aitp.train.data import select_examples

    home = resolve_home(home)
    out = Path(out) if out is not None else checkpoint_dir(home, experiment, iteration)
    examples = select_examples(home, experiment, iteration, config)
    return train_on(examples, base_checkpoint, config, out, {"experiment": experiment, "iteration": iteration})


def train_on(
    examples: list[dict[str, Any]], base: Any, config: TrainConfig, out: Path, meta: dict[str, Any], client: Any = None
) -> Path:
    """Train `base` on given examples into `out`: here, in a launched process group for several GPUs, or on
    `config.nodes` workers of the Dask cluster `client` (`aitp.train.launcher`)."""
    meta = {**meta, "base_version": _base_version(base)}
    if config.nodes > 1:
        with job_file(examples, _spec_of(base), config, out, meta) as job:
            launch_on_nodes(client, job, config.nodes, config.devices)
        check_written(out, f"{config.nodes} nodes")
        return out
    plan = plan_for(config)
    if plan.needs_launch:
        with job_file(examples, _spec_of(base), config, out, meta) as job:
            launch_here(job, plan.devices)
        check_written(out, f"{plan.devices} GPUs")
    else:
        fit(examples, base, config, out, meta)
    return out


def plan_for(config: TrainConfig) -> StrategyPlan:
    """The strategy plan of a config on this machine's hardware."""
    return plan_strategy(
        detect_hardware(),
        config.zero_stage,
        config.offload,
        config.precision,
        config.devices,
        config.batch_size,
        config.nodes,
        config.compile,
    )


def fit(
    examples: list[dict[str, Any]],
    base: Any,
    config: TrainConfig,
    out: str | Path,
    meta: dict[str, Any] | None = None,
) -> TrainResult:
    """Train `base` on `examples` (dicts with prompt, completion, and rejected for dpo) and save to `out`."""
    with pinned_numerics(config.threads):
        try:
            return _fit(examples, base, config, Path(out), meta)
        finally:
            _release_gpu_cache()


def _release_gpu_cache() -> None:
    """Hand the blocks a fit cached back to the driver.

    The loop trains in its own process while a rollout worker on the same GPU sizes its decoder's
    slots to the memory it finds free: blocks kept cached here (activations, optimizer states, the
    trainer's reference cycles) would read as used there and cost slots for the rest of the run.
    """
    gc.collect()  # the trainer and its strategy hold each other: collect them before releasing
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


@contextmanager
def pinned_numerics(threads: int | None) -> Iterator[None]:
    """Fix what CPU arithmetic depends on for the duration of a fit, then restore it.

    A Dask cluster started in this process sets OMP_NUM_THREADS=1 for its workers, which changes the
    thread count of threads started later here: training in a resumed process then summed in another
    order and gave other weights. Pinning the count (and denormal flushing) makes a fit a function of
    its inputs alone.
    """
    before = torch.get_num_threads()
    torch.set_num_threads(threads or max(1, len(os.sched_getaffinity(0))))
    torch.set_flush_denormal(True)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _fit(
    examples: list[dict[str, Any]], base: Any, config: TrainConfig, out: Path, meta: dict[str, Any] | None
) -> TrainResult:
    """One rank's fit in its phases: load and encode, build the trainer, take the steps, save."""
    start = time.perf_counter()
    pl.seed_everything(config.seed, workers=True, verbose=False)
    trainable = load_trainable(_spec_of(base), config.lora)
    encoded = encode_examples(trainable, examples, config.objective, config.max_len)
    plan = plan_for(config)
    references, gap = _references(trainable, encoded, config, plan)
    module = _policy_module(trainable, config, plan, encoded)
    loader = _loader(encoded, references, trainable.pad_id, config, plan)
    ckpt_path, done = _resume_point(base, config, plan)
    loaded = time.perf_counter()
    progress = _FitProgress()
    trainer = _trainer(plan, config, done + _steps(config, len(encoded), plan), progress, out)
    module.train()  # loaded policies are in eval mode; Lightning keeps a module's mode as it finds it
    try:
        trainer.fit(module, train_dataloaders=loader, ckpt_path=ckpt_path)
        phases = {"load_s": round(loaded - start, 3), **progress.phases(loaded, time.perf_counter())}
        result = _result(trainer, module, progress, plan, config, base, examples, out, meta, gap, phases)
        _save(trainer, module, trainable, plan, out, result, examples, start)
    finally:
        if plan.deepspeed:
            from aitp.train.zero import destroy_engine  # lazily, as build_strategy imports the ZeRO strategy

            destroy_engine(trainer)
            _destroy_process_group_at_exit()
    return result


def _references(
    trainable: Trainable, encoded: list, config: TrainConfig, plan: StrategyPlan
) -> tuple[Any, float | None]:
    """The base model's log-probs the objective compares against, and (grpo) the sampler/trainer log-prob gap."""
    if config.objective == "dpo":
        return reference_logprobs(trainable, encoded, config.batch_size), None
    if config.objective == "grpo":  # one pass gives the KL reference and the sampler/trainer agreement
        per_token, gap, _ = sampled_token_logprobs(trainable, encoded, config.batch_size, precision=plan.precision)
        return (per_token if config.grpo_kl_beta > 0 else None), gap
    return None, None


def _policy_module(trainable: Trainable, config: TrainConfig, plan: StrategyPlan, encoded: list) -> PolicyModule:
    """The Lightning module that trains the loaded model under the config's objective and optimizer."""
    surrogate = Surrogate(config.grpo_loss, config.grpo_clip_low, config.grpo_clip_high, config.grpo_kl_beta)
    longest = max((sum(row[1]) for row in encoded), default=1) if config.objective == "grpo" else 1
    return PolicyModule(
        trainable.model,
        trainable.backend,
        config.objective,
        config.lr,
        config.weight_decay,
        config.warmup_steps,
        config.dpo_beta,
        config.compile,
        surrogate,
        plan.compile_blocks,
        config.lr_schedule,
        longest,
    )


def _rows_per_step(config: TrainConfig, plan: StrategyPlan) -> int:
    """Samples one optimizer step takes: the micro-batch on every device, accumulated."""
    return config.batch_size * config.grad_accum * plan.devices * plan.nodes


def _steps(config: TrainConfig, samples: int, plan: StrategyPlan) -> int:
    """Optimizer steps of the fit: `steps` (sft, dpo); for grpo what its passes over the samples take, each device
    dealt an equal share (Lightning's sampler pads the last), a step at the end of an incomplete accumulation."""
    if config.objective != "grpo":
        return config.steps
    world = plan.devices * plan.nodes
    per_device = math.ceil(config.grpo_epochs * samples / world)
    steps = math.ceil(math.ceil(per_device / config.batch_size) / config.grad_accum)
    return min(steps, config.grpo_max_steps or steps)


def _loader(
    encoded: list, references: Any, pad_id: int, config: TrainConfig, plan: StrategyPlan
) -> torch.utils.data.DataLoader:
    """Batches of the encoded examples, ordered by the config's seed so a fit is a function of its inputs; on CUDA
    in page-locked memory, whose copy to the GPU does not wait for the previous step's work. grpo's order is
    planned whole (every sample once per epoch) and read in that order; sft and dpo are shuffled by the loader."""
    grpo = config.objective == "grpo"
    if grpo:
        order = planned_order(len(encoded), config.grpo_epochs, config.seed)
        tokens = step_tokens(order, [sum(row[1]) for row in encoded], _rows_per_step(config, plan))
        dataset: torch.utils.data.Dataset = SampledDataset(encoded, references, order, tokens)
    else:
        dataset = ExampleDataset(encoded, references)
    return torch.utils.data.DataLoader(
        dataset,
        batch_size=config.batch_size,
        shuffle=not grpo,
        drop_last=not grpo and len(encoded) >= config.batch_size,
        collate_fn=make_collate(config.objective, pad_id),
        num_workers=config.num_workers,
        generator=torch.Generator().manual_seed(config.seed),
        pin_memory=plan.accelerator == "cuda",
    )


def _trainer(plan: StrategyPlan, config: TrainConfig, max_steps: int, progress: _FitProgress, out: Path) -> pl.Trainer:
    """A quiet Lightning trainer for the plan that stops at optimizer step `max_steps` (resumed ones included)."""
    _quiet_lightning()
    return pl.Trainer(
        accelerator=plan.accelerator,
        devices=plan.devices,
        num_nodes=plan.nodes,
        strategy=build_strategy(plan),
        precision=plan.precision,
        max_steps=max_steps,
        max_epochs=1 if config.objective == "grpo" and not config.resume else None,  # its passes are one planned epoch
        accumulate_grad_batches=config.grad_accum,
        gradient_clip_val=1.0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        callbacks=[progress, ReadSigtermOneStepLate()],
        default_root_dir=str(out.parent),
    )


def _result(
    trainer: pl.Trainer,
    module: PolicyModule,
    progress: _FitProgress,
    plan: StrategyPlan,
    config: TrainConfig,
    base: Any,
    examples: list[dict[str, Any]],
    out: Path,
    meta: dict[str, Any] | None,
    gap: float | None,
    phases: dict[str, float],
) -> TrainResult:
    """The record of a finished fit; its `seconds` and `save_s` are set when the checkpoint is written."""
    return TrainResult(
        checkpoint=str(out),
        base=_spec_of(base),
        objective=config.objective,
        examples=len(examples),
        steps=trainer.global_step,
        tokens=progress.total * trainer.world_size,
        seconds=0.0,
        strategy=plan.describe(),
        device=detect_hardware().name,
        world_size=trainer.world_size,
        nodes=trainer.num_nodes,
        losses=module.loss_history(config.grad_accum),
        config=config.model_dump(mode="json"),
        meta=meta or {},
        phases=phases,
        logprob_gap=gap,
        groups=len({(ex.get("iteration"), ex.get("item_id"), ex.get("group_id")) for ex in examples})
        if config.objective == "grpo"
        else None,
    )


@functools.cache
def _destroy_process_group_at_exit() -> None:
    """Destroy the default process group a DeepSpeed fit set up, once, when this process exits.

    The loop's later fits in the same process reuse the group, so it outlives each fit. If nothing destroys it,
    PyTorch warns at exit that `destroy_process_group()` was not called, which every GPU loop printed.
    """
    atexit.register(_destroy_process_group)


def _destroy_process_group() -> None:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def _quiet_lightning() -> None:
    """Lightning's banner (GPU/TPU availability, tips) and a deprecation it raises itself: not the user's concern."""
    import logging
    import warnings

    for name in ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero"):
        logging.getLogger(name).setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", message=r".*LeafSpec.*is deprecated")
    # PolicyModule overrides the clipping hook for a fused AdamW only; under DeepSpeed it leaves clipping to DeepSpeed.
    warnings.filterwarnings("ignore", message=r".*DeepSpeed handles gradient clipping internally")


def _resume_point(base: Any, config: TrainConfig, plan: StrategyPlan) -> tuple[str | None, int]:
    """The ZeRO state to resume from and the steps it already took (None, 0 without `resume`)."""
    if not config.resume:
        return None, 0
    if not plan.deepspeed:
        raise StrategyError("resume continues a DeepSpeed run: it needs CUDA and zero_stage 1-3, or set resume false")
    from aitp.policies.spec import PolicySpec

    path = PolicySpec.parse(base).local_path() or Path(".nonexistent")
    zero = path / ZERO_DIR
    if not (zero / "latest").is_file():
        raise CheckpointError(f"{path} has no resumable ZeRO state ({ZERO_DIR}/latest): set resume false")
    return str(zero), int(read_record(path).get("steps", 0))


class _FitProgress(pl.Callback):
    """Counts the tokens (padding excluded) this rank trained on and marks when its steps began and ended.

    A fit's time is mostly its steps on a warm process, but not always: DeepSpeed's engine takes seconds to
    set up in a fresh one, and the loop's in-process fits ran slower than the same fit alone. The marks
    split `fit` into setup, steps and teardown, so a training record says which.
    """

    def __init__(self) -> None:
        self.counts: list[torch.Tensor] = []
        self.began: float | None = None
        self.ended: float | None = None

    def on_train_start(self, trainer, module) -> None:
        _synchronize(trainer)
        self.began = time.perf_counter()

    def on_train_batch_start(self, trainer, module, batch, batch_idx) -> None:
        self.counts.append(batch["attention_mask"].sum())  # read once at the end: no host sync per step

    def on_train_end(self, trainer, module) -> None:
        _synchronize(trainer)  # the steps' queued kernels belong to the steps
        self.ended = time.perf_counter()

    @property
    def total(self) -> int:
        return int(torch.stack(self.counts).sum()) if self.counts else 0

    def phases(self, called: float, returned: float) -> dict[str, float]:
        """`setup_s`, `steps_s` and `teardown_s` of a `trainer.fit` called and returned at these times."""
        began = self.began if self.began is not None else returned
        ended = self.ended if self.ended is not None else returned
        return {
            "setup_s": round(began - called, 3),
            "steps_s": round(ended - began, 3),
            "teardown_s": round(returned - ended, 3),
        }


def _synchronize(trainer) -> None:
    if trainer.strategy.root_device.type == "cuda":
        torch.cuda.synchronize(trainer.strategy.root_device)


def _save(trainer, module, trainable, plan: StrategyPlan, out: Path, result: TrainResult, examples, start) -> None:
    """Write the checkpoint: consolidated weights (plus the ZeRO state under DeepSpeed), then the record."""
    # Every rank writes its shard into one directory: rank 0 names it for all.
    zero_tmp = Path(trainer.strategy.broadcast(str(staging_dir(out, "zero")))) if plan.deepspeed else None
    if zero_tmp is not None:
        trainer.save_checkpoint(str(zero_tmp))  # collective: every rank writes its ZeRO shard
    if not trainer.is_global_zero:
        return
    staging = staging_dir(out)
    try:
        if zero_tmp is not None:
            fresh = load_trainable(trainable.spec, trainable.lora)
            consolidate_zero(zero_tmp, PolicyModule(fresh.model, fresh.backend))
            trainable = fresh
        meta = {"training": {k: v for k, v in result.to_dict().items() if k not in ("losses", "config")}}
        save_policy(trainable, staging, meta)
        if zero_tmp is not None:
            zero_tmp.rename(staging / ZERO_DIR)
        result.seconds = round(time.perf_counter() - start, 3)
        result.phases["save_s"] = round(result.seconds - sum(result.phases.values()), 3)
        write_record(staging, result.to_dict(), [_lineage(ex) for ex in examples])
        publish_dir(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    finally:
        if zero_tmp is not None and zero_tmp.exists():
            shutil.rmtree(zero_tmp, ignore_errors=True)


def _lineage(example: dict[str, Any]) -> dict[str, Any]:
    """An example as recorded in the checkpoint: everything but the (long) prompt messages and sampled tokens."""
    return {k: v for k, v in example.items() if k not in ("prompt", "token_ids", "token_logprobs")}


def main(argv: list[str] | None = None) -> None:
    """Entry point of a launched rank: read the job file and run `fit`."""
    parser = argparse.ArgumentParser(description="one rank of a launched training job")
    parser.add_argument("--job", required=True, help="job JSON written by aitp.train.launcher.job_file")
    args = parser.parse_args(argv)
    examples, base, config, out, meta = read_job(args.job)
    fit(examples, base, config, out, meta)


if __name__ == "__main__":
    main()
