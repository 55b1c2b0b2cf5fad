"""DeepSpeed ZeRO under Lightning: on one GPU, DeepSpeed's per-gradient checks fused and the per-parameter work one
process does not need skipped; across several, ZeRO-3 gathering its weights block by block where it is compiled.

Before each step DeepSpeed's ZeRO-1/2 optimizer looks for inf or NaN in every gradient, one gradient at
a time (eight ATen calls each), then computes the clipping norm one gradient at a time in float64. With
SmolLM2's 272 parameters that is ~3,500 calls a step, each launched from Python. At the GPU recipe's
eager batch the host bounds the step (the GPU idles for most of it, under either strategy), and those
calls are a large part of what ZeRO-2 adds (`benchmarks/results/history-train-135m.md`). Here both
become one norm per gradient list, computed by a single fused call, as the plain strategy's clipping
does. And after backward DeepSpeed "reduces" the gradients over the data-parallel group even when it
holds one process: it copies them all into one flat tensor, divides it by one, all-reduces it with
itself and copies each gradient back (272 copies). Over one process that changes nothing, so it is
skipped. After each step DeepSpeed also points every weight at its place in the flat bf16 buffer again
(three ATen calls and two `.data` assignments a weight), though the weights already view that buffer;
only a weight that no longer does is pointed again.

The meaning is kept: a step is skipped when any gradient element is inf or NaN (a gradient's L2 norm
is then inf or NaN; it is also inf when the squares overflow float32, which takes elements of ~1e19,
a step worth skipping), and the clipping norm is the L2 norm over all gradients, an invalid one
reported as -1 as DeepSpeed's own does. Only a single process without offload, model parallelism,
sequence parallelism or experts takes these shortcuts: elsewhere the gradients and norms must be
reduced across processes, which DeepSpeed's own methods do.

ZeRO-3 partitions each weight over the processes and gathers it in hooks around every module's forward
and backward, releasing it after. Over one process a partition is the whole weight, so the plan keeps
every weight whole (`StrategyPlan.whole_weights`: DeepSpeed's persistence threshold above any weight),
and here the per-module hooks, which would only record and check, are removed. Without them
torch.compile traces the network as one graph, as under ZeRO-2 (DeepSpeed's compiler-disabled hooks
would break it at every module, and its partitioned placeholders fail the trace); the gradients still
reach ZeRO-3's partitioned optimizer through its per-parameter hooks. DeepSpeed would also release
every weight before each step and checkpoint and gather it back after (a Python call and an allocation
a weight); instead each weight stays and takes its partition's new values in one fused copy.

ZeRO-3's gradient path over one process is shortened the same way as ZeRO-2's. DeepSpeed copies each
gradient into a bucket, divides the bucket by one, all-reduces it with itself, converts it to fp32 in a
new tensor and copies each partition out of it into the flat fp32 gradient buffer; then, before the
step, it copies that buffer once more into a new flat tensor, and computes the clipping norm one
gradient at a time in float64. Here each gradient goes straight to its place in the flat buffer (one
converting copy, or an add within an accumulation), the optimizer steps on that buffer's span in place,
and the norm is the fused one above. What a step no longer does is several full passes over the fp32
gradients and their allocations: at 1.7B parameters, tens of GB of memory traffic.

Over several processes ZeRO-3's weights are partitioned and gathered around each module. Compiled, the
network is then one graph per repeated block (`StrategyPlan.compile_blocks`), and each block is what
DeepSpeed calls a leaf: its weights gathered at once as it is entered, none of its inner layers hooked,
so the compiled block holds no gather and traces as one graph (shared by every block, or one each where
torch guards each block's weights, as 2.11 does). The clipping norm there is one fused call a process and one
all-reduce, where DeepSpeed takes each partition's norm in its own float64 call while the GPU, done with
backward, waits for the step (`take_partitioned_shortcuts`).

When a fit ends its engine is taken apart (`destroy_engine`), with what DeepSpeed's own teardown leaves behind.
"""

from __future__ import annotations

import types
from functools import partial
from typing import Any

import torch
from torch import Tensor

from aitp.train.module import pl, repeated_blocks


def gradient_norms(grads: list[Tensor]) -> Tensor:
    """Each gradient's L2 norm in float32, from one fused call (shape (len(grads),); `grads` not empty)."""
    return torch.stack(torch._foreach_norm(grads, 2, dtype=torch.float32))


def _overflow(self) -> Tensor:
    """Whether any averaged gradient holds inf or NaN, as a one-element bool tensor on the device."""
    grads = [g for i in range(len(self.bit16_groups)) for g in self.averaged_gradients.get(i) or () if g is not None]
    if not grads:
        return torch.zeros(1, dtype=torch.bool, device=self.device)
    return (~torch.isfinite(gradient_norms(grads))).any().reshape(1)


def _minus_one_unless_finite(norm: Tensor) -> Tensor:
    """The norm, or -1 where it is inf or NaN: how DeepSpeed's optimizers mark a norm that overflowed."""
    return torch.where(torch.isfinite(norm), norm, torch.full_like(norm, -1.0))


def _grad_norm(self, gradients: list[Tensor], params: list[Tensor], norm_type: float = 2) -> Tensor:
    """The L2 norm over `gradients` (DeepSpeed's padding excluded); -1 where it is inf or NaN."""
    if float(norm_type) != 2.0:
        return type(self).get_grad_norm_direct(self, gradients, params, norm_type)
    grads = [g for g in gradients if not getattr(g, "_zero_padding", False)]
    if not grads:
        return torch.zeros((), dtype=torch.float32, device=self.device)
    total = torch.linalg.vector_norm(gradient_norms(grads))
    return _minus_one_unless_finite(total)


def _grad_norm_across_processes(self, gradients: list[Tensor], params: list[Tensor], norm_type: float = 2) -> Tensor:
    """The L2 norm over every process's partitions of `gradients`: this process's sum of squares from one fused
    call, summed over the partition group in one all-reduce; -1 where it is inf or NaN."""
    experts = getattr(self, "_autoep_expert_parallel_group", None)  # experts' partitions span other groups
    if float(norm_type) != 2.0 or not params or (experts is not None and experts(params) is not None):
        return type(self).get_grad_norm_direct(self, gradients, params, norm_type)
    grads = [g for g in gradients if g is not None]
    if grads:
        squares = gradient_norms(grads).square().sum()
    else:  # this process holds no part of the group: it adds nothing, but joins the all-reduce
        squares = torch.zeros((), dtype=torch.float32, device=self.device)
    torch.distributed.all_reduce(squares, group=self._get_param_partition_group(params[0]))
    total = squares.sqrt()
    return _minus_one_unless_finite(total)


def _no_reduction(self, rank: Any, grads: list[Tensor], communication_data_type: torch.dtype, **_: Any) -> None:
    """The average of each gradient over a group of one process: the gradient itself, left in place."""


def _update_moved_weights(self, group_index: int) -> None:
    """DeepSpeed's `_update_model_bit16_weights` for the weights that no longer view their place in the flat buffer."""
    flat = self.bit16_groups_flat[group_index]
    places = zip(
        self.round_robin_bit16_groups[group_index],
        self.round_robin_bit16_meta[group_index],
        self.round_robin_bit16_offsets[group_index],
    )
    for weight, meta, offset in places:
        if not _views(weight, flat, offset, meta.shape):
            weight.data = flat.narrow(0, offset, meta.numel()).view(meta.shape).data
    reordered, order = self.round_robin_bit16_groups[group_index], self.round_robin_bit16_indices[group_index]
    for index, weight in enumerate(self.bit16_groups[group_index]):
        source = reordered[order[index]]
        if weight is not source:
            weight.data = source.data


def _views(weight: Tensor, flat: Tensor, offset: int, shape: torch.Size) -> bool:
    """Whether `weight` is the contiguous stretch of `flat` that starts at element `offset`, in `shape`."""
    return (
        weight.device == flat.device
        and weight.dtype == flat.dtype
        and weight.shape == shape
        and weight.is_contiguous()
        and weight.data_ptr() == flat.data_ptr() + offset * flat.element_size()
    )


def take_one_process_shortcuts(optimizer: Any) -> bool:
    """Give a one-process ZeRO optimizer the shortcuts (module docstring); whether it took them.

    Any other optimizer (offload, several processes, model parallelism, experts, another DeepSpeed
    whose optimizer lacks what is replaced) keeps its own.
    """
    if hasattr(optimizer, "parameter_offload"):  # ZeRO-3's optimizer
        return _take_zero3_shortcuts(optimizer)
    read = ("averaged_gradients", "bit16_groups", "bit16_groups_flat")
    round_robin = tuple(f"round_robin_bit16_{part}" for part in ("groups", "meta", "offsets", "indices"))
    if not _alone_with(optimizer, _ZERO12_REPLACED, *read, *round_robin):
        return False
    if getattr(optimizer, "cpu_offload", True) or getattr(optimizer, "has_moe_layers", True):
        return False
    optimizer.has_overflow_partitioned_grads_serial = types.MethodType(_overflow, optimizer)
    optimizer.get_grad_norm_direct = types.MethodType(_grad_norm, optimizer)
    optimizer.buffered_reduce_fallback = types.MethodType(_no_reduction, optimizer)
    optimizer._update_model_bit16_weights = types.MethodType(_update_moved_weights, optimizer)
    return True


_ZERO12_REPLACED = (
    "has_overflow_partitioned_grads_serial",
    "get_grad_norm_direct",
    "buffered_reduce_fallback",
    "_update_model_bit16_weights",
)
"""The ZeRO-1/2 optimizer's methods that one process replaces (the attributes they read are checked beside them)."""
_ZERO3_REPLACED = (
    "reduce_ready_partitions_and_remove_grads",
    "get_grad_norm_direct",
    "_prepare_fp32_grad_for_sub_group",
)
"""The ZeRO-3 optimizer's methods that one process replaces."""


def take_partitioned_shortcuts(optimizer: Any) -> bool:
    """Give a ZeRO-3 optimizer over several processes the fused clipping norm; whether it took it.

    DeepSpeed takes the norm of each gradient partition in its own float64 call (two ATen calls launched from
    Python for every weight) while the GPU, done with backward, waits. Data parallelism alone
    (no model, sequence or expert parallelism, no offload) is taken: there each process holds distinct
    partitions, and the squares' sum over the partition group is the whole norm's square.
    """
    needed = ("get_grad_norm_direct", "_get_param_partition_group", "parameter_offload")
    if not all(hasattr(optimizer, name) for name in needed) or _one_process(optimizer):
        return False
    if not _data_parallel_only(optimizer) or getattr(optimizer, "autoep_folding_tp_group", None):
        return False
    if any(getattr(optimizer, name, True) for name in ("offload_optimizer", "offload_param", "use_muon")):
        return False
    optimizer.get_grad_norm_direct = types.MethodType(_grad_norm_across_processes, optimizer)
    return True


def _alone_with(optimizer: Any, replaced: tuple[str, ...], *read: str) -> bool:
    """Whether `optimizer` has the methods replaced and the attributes read, and trains alone: one process, data
    parallelism only (`_data_parallel_only`)."""
    if not all(hasattr(optimizer, name) for name in (*replaced, *read)):
        return False
    return _one_process(optimizer) and _data_parallel_only(optimizer)


def _data_parallel_only(optimizer: Any) -> bool:
    """No model parallelism and no sequence parallelism (whose reduction divides by its size)."""
    no_model_parallel = getattr(optimizer, "model_parallel_group", None) is None
    return no_model_parallel and getattr(optimizer, "sequence_parallel_size", 1) == 1


def _take_zero3_shortcuts(optimizer: Any) -> bool:
    read = ("partition_grads", "averaged_gradients", "fp32_partitioned_groups_flat", "grad_partitions_flat_buffer")
    if not _alone_with(optimizer, _ZERO3_REPLACED, *read, "_coalesce_grad_reduction"):
        return False
    if any(getattr(optimizer, name, True) for name in ("offload_optimizer", "offload_param", "zenflow", "use_muon")):
        return False
    if getattr(optimizer, "gradient_predivide_factor", 1) != 1 or getattr(optimizer, "autoep_folding_tp_group", None):
        return False
    optimizer.reduce_ready_partitions_and_remove_grads = types.MethodType(_gradient_to_its_partition, optimizer)
    optimizer.get_grad_norm_direct = types.MethodType(_grad_norm, optimizer)
    own = optimizer._prepare_fp32_grad_for_sub_group
    optimizer._prepare_fp32_grad_for_sub_group = types.MethodType(partial(_span_as_fp32_gradient, own=own), optimizer)
    return True


def _gradient_to_its_partition(self, param: Tensor) -> None:
    """ZeRO-3's gradient hook over one process: the gradient is its own average and its own partition, so it is
    copied (or, within an accumulation, added) straight into its place in the flat fp32 gradient buffer."""
    if self._coalesce_grad_reduction or not getattr(param, "ds_grad_is_ready", True):
        return
    self.partition_grads([param], [param.grad.view(-1)])


def _span_as_fp32_gradient(self, sub_group_id: int, own: Any) -> None:
    """The sub-group's fp32 gradient as its span of the flat gradient buffer, where DeepSpeed would copy its
    partitions into a new flat tensor; DeepSpeed's copy (`own`) where they do not lie there side by side in fp32."""
    grads = self.averaged_gradients[sub_group_id]
    master = self.fp32_partitioned_groups_flat[sub_group_id]
    span = _span(self.grad_partitions_flat_buffer, grads)
    if span is None or span.dtype != master.dtype or span.numel() != master.numel():
        own(sub_group_id)
        return
    master.grad = span
    self.averaged_gradients[sub_group_id] = None


def _span(flat: Tensor, parts: list[Tensor]) -> Tensor | None:
    """The stretch of `flat` that `parts` fill one after another, or None where they do not."""
    if not parts or any(p.device != flat.device or p.dtype != flat.dtype or not p.is_contiguous() for p in parts):
        return None
    size = flat.element_size()
    start, remainder = divmod(parts[0].data_ptr() - flat.data_ptr(), size)
    if remainder or start < 0:
        return None
    offset = start
    for part in parts:
        if part.data_ptr() != flat.data_ptr() + offset * size:
            return None
        offset += part.numel()
    if offset > flat.numel():
        return None
    return flat.narrow(0, start, offset - start)


def keep_weights_whole(optimizer: Any) -> None:
    """Remove a one-process ZeRO-3 optimizer's per-module gather hooks, once every weight is whole and in place,
    and have each weight take its partition's values in one fused copy where DeepSpeed would gather it.

    Raises `RuntimeError` where that does not hold (a weight left partitioned, several processes, offloaded
    parameters): the plan promised whole weights (a compiled step depends on them), so running on is wrong.
    """
    offload = getattr(optimizer, "parameter_offload", None)
    persistent = getattr(optimizer, "persistent_parameters", None)
    if offload is None or persistent is None or not _one_process(optimizer):
        raise RuntimeError("whole weights need DeepSpeed's ZeRO-3 optimizer in one process")
    weights = list(offload.module.parameters())
    if len(persistent) != len(weights) or getattr(optimizer, "offload_param", False):
        raise RuntimeError(f"{len(weights) - len(persistent)} of {len(weights)} weights are not kept whole")
    offload._remove_module_hooks()
    persistent[0].all_gather(persistent)  # every weight whole before the first forward (no hook gathers it now)
    optimizer._partition_all_parameters = _nothing_to_release
    optimizer.persistent_parameters = []  # DeepSpeed's gather of each weight after a step or checkpoint: below
    parts = [w.ds_tensor.view(w.ds_shape) for w in weights]
    for name in ("_post_step", "checkpoint_event_epilogue"):
        setattr(optimizer, name, _then_copy_partitions(getattr(optimizer, name), weights, parts))


def _nothing_to_release() -> None:
    """A ZeRO-3 optimizer's release of every weight before its step or checkpoint, where each stays whole."""


def _then_copy_partitions(method: Any, weights: list[Tensor], parts: list[Tensor]) -> Any:
    """`method`, run once each weight has taken its partition's values in one fused copy (the step or a loaded
    checkpoint wrote the partitions before DeepSpeed calls it), rather than DeepSpeed's gather of each weight."""

    def run(*args: Any, **kwargs: Any) -> Any:
        torch._foreach_copy_([w.data for w in weights], parts)
        return method(*args, **kwargs)

    return run


def _one_process(optimizer: Any) -> bool:
    import torch.distributed as dist

    group = getattr(optimizer, "dp_process_group", None)
    return not dist.is_initialized() or dist.get_world_size(group=group) == 1


def destroy_engine(trainer: Any) -> None:
    """Take the ZeRO optimizer's gradient hooks off the parameters, which Lightning leaves on them, and take
    the model off the module stack where ZeRO-3 pushed it when it set up, which DeepSpeed leaves there.

    The hooks sit on autograd nodes, which Python's collector cannot see into, so the optimizer they
    close over (the fp32 master weights and Adam's moments) outlived every fit: the loop's process,
    which trains in-process on one GPU, kept more of the card after each iteration
    (`benchmarks/results/history-gpu-recipe.md`), until a long run would leave the rollout worker no room.
    ZeRO-3's stack is a module-level list in DeepSpeed; the model on it holds the engine (through its
    hooks) and with it the weights and the optimizer state, the whole of a ZeRO-3 fit, for good.
    """
    engine = trainer.strategy.model  # the DeepSpeed engine, once the strategy has set it up
    if engine is not None and hasattr(engine, "destroy"):
        engine.destroy()
        _off_zero3_module_stack(engine.module)


def _off_zero3_module_stack(module: torch.nn.Module) -> None:
    from deepspeed.runtime.zero import parameter_offload

    stack = getattr(parameter_offload, "FWD_MODULE_STACK", None)
    if isinstance(stack, list):
        stack[:] = [m for m in stack if m is not module]


class ZeroStrategy(pl.strategies.DeepSpeedStrategy):
    """Lightning's DeepSpeed strategy; once built, a one-process ZeRO optimizer takes the shortcuts, and with
    `whole_weights` (a one-process ZeRO-3 plan) drops the per-module gathers. With `gather_by_block` (compiled
    ZeRO-3 across processes) each repeated block of the network gathers its weights at once on entry, rather than
    each layer inside it, so that a compiled block holds no gather (`StrategyPlan.compile_blocks`)."""

    def __init__(self, *args: Any, whole_weights: bool = False, gather_by_block: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.whole_weights, self.gather_by_block = whole_weights, gather_by_block

    def setup(self, trainer: Any) -> None:
        if self.gather_by_block:  # before DeepSpeed sets its hooks on the modules
            from deepspeed.utils import set_z3_leaf_modules

            set_z3_leaf_modules(trainer.lightning_module, [type(repeated_blocks(trainer.lightning_module)[0])])
        super().setup(trainer)
        optimizer = getattr(self.model, "optimizer", None)  # the DeepSpeed engine's, once set up
        self.one_process_shortcuts = take_one_process_shortcuts(optimizer)
        self.partitioned_shortcuts = not self.one_process_shortcuts and take_partitioned_shortcuts(optimizer)
        if self.whole_weights:
            keep_weights_whole(optimizer)
