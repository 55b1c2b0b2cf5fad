"""Hardware -> training strategy: DeepSpeed ZeRO on CUDA (stage and offload from config), plain on CPU.

Lightning's DeepSpeed strategy refuses CPU, so CPU runs get the single-device strategy. More than
one GPU trains in its own process group started by torchrun (`aitp.train.run` launches it), never
inside a Dask worker or a Prefect task process. DeepSpeed is imported only when a plan needs it.
"""

from __future__ import annotations

import os
import platform
import sys
from dataclasses import dataclass, replace
from typing import Any

import torch

from aitp.errors import AitpError


class StrategyError(AitpError):
    """A training plan the hardware or the installed packages cannot run."""


@dataclass(frozen=True)
class Hardware:
    """What this process can train on."""

    accelerator: str  # "cuda" or "cpu"
    devices: int
    name: str


def detect_hardware() -> Hardware:
    """CUDA devices when there are any, else the CPU."""
    if torch.cuda.is_available():
        return Hardware("cuda", torch.cuda.device_count(), torch.cuda.get_device_name(0))
    return Hardware("cpu", 1, platform.processor() or platform.machine() or "cpu")


def in_launched_process() -> bool:
    """Whether torchrun (or another launcher) started this process as one rank of a group."""
    return "LOCAL_RANK" in os.environ and "WORLD_SIZE" in os.environ


@dataclass(frozen=True)
class StrategyPlan:
    """How to train: accelerator, devices, strategy name, precision, and the ZeRO settings."""

    accelerator: str
    devices: int
    name: str  # "single", "ddp" or "deepspeed"
    precision: str
    zero_stage: int = 0
    offload: str = "none"
    micro_batch_size: int = 1
    nodes: int = 1
    """Machines, one launcher agent each; `devices` is per machine."""
    compile_blocks: bool = False
    """Compiled ZeRO-3 whose weights are partitioned (several processes): one graph per repeated block of the
    network, each block gathering its weights at once on entry (`aitp.train.zero`), rather than one graph
    of network and loss, which cannot hold DeepSpeed's gathers."""

    @property
    def deepspeed(self) -> bool:
        return self.name == "deepspeed"

    @property
    def whole_weights(self) -> bool:
        """ZeRO-3 in one process with the parameters on the GPU: a partition of one is the whole parameter, so every
        parameter stays whole and nothing is gathered around each module (`aitp.train.zero`)."""
        one_process = self.devices == 1 and self.nodes == 1
        return self.deepspeed and self.zero_stage == 3 and self.offload != "all" and one_process

    @property
    def needs_launch(self) -> bool:
        """More than one process and not yet inside a launched process group."""
        return (self.devices > 1 or self.nodes > 1) and not in_launched_process()

    def describe(self) -> str:
        zero = f" ZeRO-{self.zero_stage} offload={self.offload}" if self.deepspeed else ""
        where = f"{self.nodes} nodes x " if self.nodes > 1 else ""
        return f"{self.name}{zero} on {where}{self.devices}x{self.accelerator} ({self.precision})"


def plan_strategy(
    hardware: Hardware,
    zero_stage: int = 2,
    offload: str = "none",
    precision: str = "auto",
    devices: int | str = "auto",
    micro_batch_size: int = 1,
    nodes: int = 1,
    compile: bool | str = False,
) -> StrategyPlan:
    """Pick the strategy for this hardware and config (`devices` per node). A CPU trains in one process per node:
    the plain single-device strategy on one node, DDP over gloo across several."""
    if offload == "all" and zero_stage != 3:
        raise StrategyError(f"offload=all moves parameters to CPU, which needs ZeRO stage 3 (got {zero_stage})")
    plan = _plan(hardware, zero_stage, offload, precision, devices, micro_batch_size, nodes)
    if not (compile and plan.deepspeed and plan.zero_stage == 3) or plan.whole_weights:
        return plan
    if plan.offload == "all":
        raise StrategyError(
            f"compile with ZeRO-3 needs the parameters on the GPU (this plan: {plan.describe()}): "
            f"set compile false, or offload none or optimizer"
        )
    if compile == "reduce-overhead":
        raise StrategyError(
            f"compile reduce-overhead replays fixed weight addresses, which ZeRO-3 across processes does not keep "
            f"(this plan: {plan.describe()}): set compile true"
        )
    return replace(plan, compile_blocks=True)


def _plan(
    hardware: Hardware,
    zero_stage: int,
    offload: str,
    precision: str,
    devices: int | str,
    micro_batch_size: int,
    nodes: int,
) -> StrategyPlan:
    """The plan of `plan_strategy`, before compile's checks and block-by-block choice."""
    if hardware.accelerator != "cuda":
        if devices not in ("auto", 1):
            raise StrategyError(f"devices={devices} needs CUDA GPUs; this machine has none: set devices to auto")
        cpu_precision = "32-true" if precision == "auto" else precision
        return StrategyPlan("cpu", 1, "ddp" if nodes > 1 else "single", cpu_precision, nodes=nodes)
    n = hardware.devices if devices == "auto" else int(devices)
    if not 1 <= n <= hardware.devices:
        raise StrategyError(f"devices={n} but this machine has {hardware.devices} GPU(s): lower devices")
    if precision == "auto":
        precision = "bf16-mixed" if torch.cuda.is_bf16_supported() else "16-mixed"
    if zero_stage == 0:
        name = "ddp" if n > 1 or nodes > 1 else "single"
        return StrategyPlan("cuda", n, name, precision, 0, "none", micro_batch_size, nodes)
    return StrategyPlan("cuda", n, "deepspeed", precision, zero_stage, offload, micro_batch_size, nodes)


def deepspeed_config(plan: StrategyPlan) -> dict[str, Any]:
    """The DeepSpeed config of a plan; Lightning adds precision, clipping and accumulation.

    One GPU sends no gradient anywhere, so ZeRO-2 there does not copy each gradient into a contiguous
    bucket as backward makes it (SmolLM2: 272 copies a step, each launched from Python): an eager step
    at the GPU recipe's batch waits on that host work (`benchmarks/results/history-train-135m.md` has
    the rates). Offload keeps the copies (DeepSpeed requires them), as does stage 3, whose partitioning
    goes through the buckets. bf16 keeps DeepSpeed's overflow check, which skips a step whose gradients
    hold inf or NaN (one process does it, and the clipping norm, in one fused call each, and skips the
    reduction over itself: `aitp.train.zero`). ZeRO-3 there keeps every parameter whole (persistent,
    in DeepSpeed's words), so its per-module gathers have nothing to do and are removed (`plan.whole_weights`).
    """
    one_gpu = plan.devices == 1 and plan.nodes == 1
    copy_to_buckets = not one_gpu or plan.zero_stage == 3 or plan.offload != "none"
    zero: dict[str, Any] = {
        "stage": plan.zero_stage,
        "contiguous_gradients": copy_to_buckets,
        "overlap_comm": not one_gpu,  # one GPU has no gradient traffic to hide
        "reduce_bucket_size": 200_000_000,
        "allgather_bucket_size": 200_000_000,
    }
    if plan.zero_stage == 3 and not plan.whole_weights:
        # The weights ahead that ZeRO-3 gathers while the current module computes: DeepSpeed's default (5e7) is
        # less than one decoder block at 1.7B (~7e7), so a block's gather could not wholly overlap the one before.
        zero["stage3_prefetch_bucket_size"] = 200_000_000
    if plan.compile_blocks:
        # DeepSpeed keeps the small weights (the norms) whole on every process and gathers each again after every
        # step, then waits for the whole device: the next step cannot start while this step's optimizer runs.
        # Gathered by block, they come with their block's weights in the same gather, so none stays whole.
        zero["stage3_param_persistence_threshold"] = 0
    if plan.offload in ("optimizer", "all"):
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    if plan.offload == "all":
        zero["offload_param"] = {"device": "cpu", "pin_memory": True}
    if plan.whole_weights:
        zero["stage3_param_persistence_threshold"] = sys.maxsize
        zero["stage3_model_persistence_threshold"] = sys.maxsize
        zero["memory_efficient_linear"] = False  # its linear layer re-gathers weights for backward: none to gather
    return {
        "zero_optimization": zero,
        # DeepSpeed's throughput timer (its samples/s log line) synchronizes the device as each forward starts and
        # each step ends when, as under Lightning, DeepSpeed does not own the data loader: the GPU waits out the
        # host's work between steps twice a step. The fit's own record times the steps.
        "timers": {"throughput": {"enabled": False}},
        "train_micro_batch_size_per_gpu": plan.micro_batch_size,
        # A torch optimizer (see PolicyModule) rather than DeepSpeed's JIT-built ones.
        "zero_allow_untested_optimizer": True,
        "zero_force_ds_cpu_optimizer": False,
    }


def build_strategy(plan: StrategyPlan) -> Any:
    """The Lightning strategy object (or name) of a plan."""
    if plan.name == "single":
        return "auto"
    if plan.name == "ddp":
        return "ddp"
    try:
        import deepspeed  # noqa: F401
    except ImportError as exc:
        raise StrategyError(
            "ZeRO training needs DeepSpeed: pip install 'aitp[gpu]', or set zero_stage: 0 for the plain strategy"
        ) from exc
    from aitp.train.zero import ZeroStrategy

    return ZeroStrategy(
        config=deepspeed_config(plan), whole_weights=plan.whole_weights, gather_by_block=plan.compile_blocks
    )
