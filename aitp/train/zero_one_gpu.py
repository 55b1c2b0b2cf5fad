"""ZeRO on one GPU: DeepSpeed's per-gradient checks fused, and the per-parameter work one process does not need skipped.

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
"""

from __future__ import annotations

import types
from typing import Any

import torch
from torch import Tensor

from aitp.train.module import pl


def gradient_norms(grads: list[Tensor]) -> Tensor:
    """Each gradient's L2 norm in float32, from one fused call (shape (len(grads),); `grads` not empty)."""
    return torch.stack(torch._foreach_norm(grads, 2, dtype=torch.float32))


def _overflow(self) -> Tensor:
    """Whether any averaged gradient holds inf or NaN, as a one-element bool tensor on the device."""
    grads = [g for i in range(len(self.bit16_groups)) for g in self.averaged_gradients.get(i) or () if g is not None]
    if not grads:
        return torch.zeros(1, dtype=torch.bool, device=self.device)
    return (~torch.isfinite(gradient_norms(grads))).any().reshape(1)


def _grad_norm(self, gradients: list[Tensor], params: list[Tensor], norm_type: float = 2) -> Tensor:
    """The L2 norm over `gradients` (DeepSpeed's padding excluded); -1 where it is inf or NaN."""
    if float(norm_type) != 2.0:
        return type(self).get_grad_norm_direct(self, gradients, params, norm_type)
    grads = [g for g in gradients if not getattr(g, "_zero_padding", False)]
    if not grads:
        return torch.zeros((), dtype=torch.float32, device=self.device)
    total = torch.linalg.vector_norm(gradient_norms(grads))
    return torch.where(torch.isfinite(total), total, torch.full_like(total, -1.0))


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
    """Give a one-process ZeRO-1/2 optimizer the shortcuts (module docstring); whether it took them.

    Any other optimizer (offload, several processes, model parallelism, experts, another DeepSpeed
    whose optimizer lacks what is replaced) keeps its own.
    """
    needed = (
        "has_overflow_partitioned_grads_serial",
        "get_grad_norm_direct",
        "buffered_reduce_fallback",
        "_update_model_bit16_weights",
        "averaged_gradients",
        "bit16_groups",
        "bit16_groups_flat",
        "round_robin_bit16_groups",
        "round_robin_bit16_meta",
        "round_robin_bit16_offsets",
        "round_robin_bit16_indices",
    )
    if not all(hasattr(optimizer, name) for name in needed):
        return False
    if getattr(optimizer, "cpu_offload", True) or getattr(optimizer, "has_moe_layers", True):
        return False
    if getattr(optimizer, "model_parallel_group", None) is not None or not _one_process(optimizer):
        return False
    if getattr(optimizer, "sequence_parallel_size", 1) != 1:  # its reduction divides by that size
        return False
    optimizer.has_overflow_partitioned_grads_serial = types.MethodType(_overflow, optimizer)
    optimizer.get_grad_norm_direct = types.MethodType(_grad_norm, optimizer)
    optimizer.buffered_reduce_fallback = types.MethodType(_no_reduction, optimizer)
    optimizer._update_model_bit16_weights = types.MethodType(_update_moved_weights, optimizer)
    return True


def _one_process(optimizer: Any) -> bool:
    import torch.distributed as dist

    group = getattr(optimizer, "dp_process_group", None)
    return not dist.is_initialized() or dist.get_world_size(group=group) == 1


class ZeroStrategy(pl.strategies.DeepSpeedStrategy):
    """Lightning's DeepSpeed strategy; once built, a one-process ZeRO optimizer takes the shortcuts."""

    def setup(self, trainer: Any) -> None:
        super().setup(trainer)
        engine = self.model  # the DeepSpeed engine, once set up
        self.one_process_shortcuts = take_one_process_shortcuts(getattr(engine, "optimizer", None))
