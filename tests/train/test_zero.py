"""The fused gradient checks that a one-process ZeRO optimizer gets: the meaning of DeepSpeed's own.

DeepSpeed itself needs a GPU here (its ZeRO optimizer is tested in test_deepspeed_gpu.py, -m gpu); these tests
hold the replacements to DeepSpeed's semantics, written out below, on an object with the same attributes.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from aitp.train.zero import gradient_norms, take_one_process_shortcuts


def zero_optimizer(groups: dict[int, list[torch.Tensor]], **overrides) -> SimpleNamespace:
    """The attributes of DeepSpeed's ZeRO-1/2 optimizer that the checks read, and its own two methods."""

    def own_norm(gradients, params, norm_type=2):  # DeepSpeed's: float64 per gradient, -1 when invalid
        total = math.sqrt(sum(float(torch.linalg.vector_norm(g.double())) ** 2 for g in gradients))
        return torch.tensor(total if math.isfinite(total) else -1.0)

    def own_reduction(rank, grads, communication_data_type, elements_per_buffer=500000000, log=None):
        flat = torch.cat([g.reshape(-1) for g in grads]) / 1.0  # all-reduced over one process: itself
        for g, reduced in zip(grads, flat.split([g.numel() for g in grads])):
            g.copy_(reduced.view_as(g))

    flat = torch.arange(12, dtype=torch.bfloat16)
    weights = [flat.narrow(0, 0, 6).view(2, 3), flat.narrow(0, 6, 6).view(6)]

    def own_update(group_index):  # DeepSpeed's: every weight pointed at its place again
        for w, meta, offset in zip(weights, weights, (0, 6)):
            w.data = flat.narrow(0, offset, meta.numel()).view(meta.shape).data

    fields = {
        "bit16_groups": [weights] + [[None] * len(g) for g in list(groups.values())[1:]],  # group 0: the flat buffer's
        "averaged_gradients": dict(groups),
        "device": "cpu",
        "cpu_offload": False,
        "has_moe_layers": False,
        "model_parallel_group": None,
        "dp_process_group": None,
        "has_overflow_partitioned_grads_serial": lambda: None,
        "get_grad_norm_direct": own_norm,
        "buffered_reduce_fallback": own_reduction,
        "sequence_parallel_size": 1,
        "_update_model_bit16_weights": own_update,
        "bit16_groups_flat": [flat],
        "round_robin_bit16_groups": [weights],
        "round_robin_bit16_meta": [[torch.empty(w.shape, device="meta") for w in weights]],
        "round_robin_bit16_offsets": [[0, 6]],
        "round_robin_bit16_indices": [{0: 0, 1: 1}],
        "weights": weights,
    }
    return SimpleNamespace(**(fields | overrides))


class CountedCalls(torch.overrides.TorchFunctionMode):
    """Records every torch function called inside it."""

    def __enter__(self):
        self.seen = []
        return super().__enter__()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.seen.append(func)
        return func(*args, **(kwargs or {}))

    def count(self, func) -> int:
        return self.seen.count(func)


def grads(*values: float, dtype=torch.bfloat16) -> list[torch.Tensor]:
    torch.manual_seed(0)
    out = [torch.randn(37, 11, dtype=dtype), torch.randn(300, dtype=dtype)]
    for i, v in enumerate(values):
        out[i % 2].view(-1)[5 + i] = v
    return out


def test_finite_gradients_are_no_overflow():
    opt = zero_optimizer({0: grads(), 1: grads()[:1]})
    assert take_one_process_shortcuts(opt)
    flag = opt.has_overflow_partitioned_grads_serial()
    assert flag.shape == (1,) and flag.dtype == torch.bool and not flag.item()


@pytest.mark.parametrize("bad", [math.inf, -math.inf, math.nan])
def test_one_inf_or_nan_element_is_an_overflow(bad):
    opt = zero_optimizer({0: grads(), 1: grads(bad)})
    assert take_one_process_shortcuts(opt)
    assert opt.has_overflow_partitioned_grads_serial().item()


def test_the_clipping_norm_is_deepspeeds_to_float32_precision():
    group = grads(dtype=torch.bfloat16) + grads(dtype=torch.float32)
    padding = torch.full((64,), 1e3)
    padding._zero_padding = True  # DeepSpeed's alignment padding is not a gradient
    opt = zero_optimizer({0: group})
    own = opt.get_grad_norm_direct(group, [])
    assert take_one_process_shortcuts(opt)
    fused = opt.get_grad_norm_direct(group + [padding], [])
    assert fused.dtype == torch.float32
    assert float(fused) == pytest.approx(float(own), rel=1e-6)


def test_an_invalid_clipping_norm_is_minus_one_as_deepspeeds():
    opt = zero_optimizer({0: grads(math.nan)})
    assert take_one_process_shortcuts(opt)
    assert float(opt.get_grad_norm_direct(grads(math.nan), [])) == -1.0
    assert float(opt.get_grad_norm_direct(grads(math.inf), [])) == -1.0


def test_gradient_norms_are_float32_from_bfloat16():
    norms = gradient_norms(grads(dtype=torch.bfloat16))
    assert norms.dtype == torch.float32 and norms.shape == (2,)


@pytest.mark.parametrize(
    "overrides",
    [
        {"cpu_offload": True},
        {"has_moe_layers": True},
        {"model_parallel_group": object()},
        {"sequence_parallel_size": 2},
    ],
)
def test_optimizers_that_reduce_across_processes_or_offload_keep_their_own_checks(overrides):
    opt = zero_optimizer({0: grads()}, **overrides)
    own = opt.get_grad_norm_direct, opt.buffered_reduce_fallback
    assert not take_one_process_shortcuts(opt)
    assert (opt.get_grad_norm_direct, opt.buffered_reduce_fallback) == own


def test_an_optimizer_without_the_replaced_methods_is_left_alone():
    assert not take_one_process_shortcuts(SimpleNamespace(averaged_gradients={}, bit16_groups=[]))
    assert not take_one_process_shortcuts(None)


def test_the_reduction_over_one_process_leaves_every_gradient_as_deepspeeds_does():
    reduced_by_deepspeed, reduced_here = grads(), grads()
    opt = zero_optimizer({0: reduced_by_deepspeed})
    opt.buffered_reduce_fallback(None, reduced_by_deepspeed, torch.bfloat16, elements_per_buffer=10**6)
    assert take_one_process_shortcuts(opt)
    opt.buffered_reduce_fallback(None, reduced_here, torch.bfloat16, elements_per_buffer=10**6)
    assert all(torch.equal(a, b) for a, b in zip(reduced_by_deepspeed, reduced_here))
    assert all(torch.equal(a, b) for a, b in zip(reduced_here, grads()))


def test_after_a_step_only_weights_that_no_longer_view_the_flat_buffer_are_pointed_at_it_again():
    opt = zero_optimizer({0: grads()})
    first, second = opt.weights
    assert take_one_process_shortcuts(opt)
    in_place = first.data  # already views the flat buffer: left as it is
    second.data = second.data.clone() * 0  # moved off the buffer, as a loaded state could leave it
    with CountedCalls() as calls:
        opt._update_model_bit16_weights(0)
    assert calls.count(torch.Tensor.narrow) == 1  # the moved weight only
    flat = opt.bit16_groups_flat[0]
    assert first.data_ptr() == in_place.data_ptr() == flat.data_ptr()
    assert second.data_ptr() == flat.data_ptr() + 6 * flat.element_size()
    flat.add_(100)  # a step writes the buffer: both weights see it
    assert torch.equal(first.flatten(), flat[:6]) and torch.equal(second, flat[6:])


@pytest.mark.parametrize(
    "moved",
    [
        lambda w: w.data.float(),  # another dtype
        lambda w: w.data.view(3, 2).t(),  # the same place and shape, other strides
    ],
)
def test_a_weight_at_its_place_in_another_layout_or_dtype_is_pointed_again(moved):
    opt = zero_optimizer({0: grads()})
    first, _ = opt.weights
    assert take_one_process_shortcuts(opt)
    first.data = moved(first)
    opt._update_model_bit16_weights(0)
    flat = opt.bit16_groups_flat[0]
    assert first.dtype == flat.dtype and first.is_contiguous() and first.data_ptr() == flat.data_ptr()


def zero3_optimizer(grad_parts: list[torch.Tensor], flat: torch.Tensor, **overrides) -> SimpleNamespace:
    """The attributes of DeepSpeed's ZeRO-3 optimizer that the one-process shortcuts read, and its own methods."""
    own_copies = []

    def own_prepare(sub_group_id):  # DeepSpeed's: the partitions copied into a new flat tensor of the master's dtype
        own_copies.append(sub_group_id)
        fields["fp32_partitioned_groups_flat"][sub_group_id].grad = torch.cat(
            [g.reshape(-1) for g in grad_parts]
        ).float()

    fields = {
        "parameter_offload": object(),
        "reduce_ready_partitions_and_remove_grads": lambda param: None,
        "partition_grads": lambda params, partitions: None,
        "get_grad_norm_direct": lambda gradients, params, norm_type=2: None,
        "_prepare_fp32_grad_for_sub_group": own_prepare,
        "averaged_gradients": {0: grad_parts},
        "fp32_partitioned_groups_flat": [torch.zeros(sum(g.numel() for g in grad_parts))],
        "grad_partitions_flat_buffer": flat,
        "_coalesce_grad_reduction": False,
        "offload_optimizer": False,
        "offload_param": False,
        "zenflow": False,
        "use_muon": False,
        "model_parallel_group": None,
        "dp_process_group": None,
        "own_copies": own_copies,
    }
    return SimpleNamespace(**(fields | overrides))


def test_one_process_zero3_steps_on_its_gradient_buffer_in_place_where_the_partitions_lie_side_by_side():
    flat = torch.arange(10, dtype=torch.float32)
    optimizer = zero3_optimizer([flat.narrow(0, 2, 3), flat.narrow(0, 5, 4)], flat)
    assert take_one_process_shortcuts(optimizer)
    optimizer._prepare_fp32_grad_for_sub_group(0)
    grad = optimizer.fp32_partitioned_groups_flat[0].grad
    assert grad.data_ptr() == flat[2:].data_ptr() and torch.equal(grad, torch.arange(2.0, 9.0))  # a view, no copy
    assert optimizer.averaged_gradients[0] is None and optimizer.own_copies == []


@pytest.mark.parametrize("layout", ["gap", "order", "dtype"])
def test_one_process_zero3_copies_as_deepspeed_does_where_the_partitions_do_not_lie_side_by_side(layout):
    flat = torch.arange(10, dtype=torch.bfloat16 if layout == "dtype" else torch.float32)  # the master is fp32
    parts = {
        "gap": [flat.narrow(0, 0, 3), flat.narrow(0, 4, 4)],
        "order": [flat.narrow(0, 5, 4), flat.narrow(0, 2, 3)],
        "dtype": [flat.narrow(0, 0, 3), flat.narrow(0, 3, 4)],
    }[layout]
    optimizer = zero3_optimizer(parts, flat)
    assert take_one_process_shortcuts(optimizer)
    optimizer._prepare_fp32_grad_for_sub_group(0)
    assert optimizer.own_copies == [0]
    assert torch.equal(optimizer.fp32_partitioned_groups_flat[0].grad, torch.cat([p.float() for p in parts]))


@pytest.mark.parametrize(
    "overrides",
    [{"offload_optimizer": True}, {"offload_param": True}, {"use_muon": True}, {"model_parallel_group": object()}],
)
def test_zero3_optimizers_that_offload_or_split_the_model_keep_their_own_gradient_path(overrides):
    flat = torch.arange(4, dtype=torch.float32)
    optimizer = zero3_optimizer([flat], flat, **overrides)
    own = optimizer._prepare_fp32_grad_for_sub_group
    assert not take_one_process_shortcuts(optimizer)
    assert optimizer._prepare_fp32_grad_for_sub_group is own
