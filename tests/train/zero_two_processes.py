"""Run by `test_zero_processes.py` in each of two processes (torch.distributed.run, gloo, on the CPU): DeepSpeed's
real ZeRO-3 engine steps a small network with clipping, first with its own clipping norm, then with the fused one
of `aitp.train.zero.take_partitioned_shortcuts`; the two must agree on every norm and every weight partition."""

from __future__ import annotations

import sys

import deepspeed
import torch
import torch.distributed as dist

from aitp.train.zero import take_partitioned_shortcuts

STEPS = 4


def real_part(param: torch.Tensor) -> torch.Tensor:
    """This process's partition of `param` without ZeRO-3's padding (uninitialized memory past the weight's end)."""
    size = param.ds_tensor.numel()
    real = max(0, min(size, param.ds_numel - dist.get_rank() * size))
    return param.ds_tensor.detach()[:real].clone()


def steps(fused: bool) -> tuple[bool, list[list[float]], list[torch.Tensor]]:
    """(whether the fused norm was taken, each step's clipping norms by parameter group, this process's partitions)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(64, 300), torch.nn.ReLU(), torch.nn.Linear(300, 7), torch.nn.LayerNorm(7)
    )
    decay = [p for p in model.parameters() if p.dim() > 1]
    rest = [p for p in model.parameters() if p.dim() <= 1]  # two parameter groups: a norm each
    optimizer = torch.optim.AdamW([{"params": decay}, {"params": rest, "weight_decay": 0.0}], lr=1e-2)
    config = {
        "train_micro_batch_size_per_gpu": 4,
        "gradient_clipping": 0.05,  # below every norm here: each step is clipped by the norm under test
        "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0},
        "zero_allow_untested_optimizer": True,
        "zero_force_ds_cpu_optimizer": False,
    }
    engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
    taken = take_partitioned_shortcuts(engine.optimizer) if fused else False
    torch.manual_seed(100 + dist.get_rank())  # each process its own batches
    norms = []
    for _ in range(STEPS):
        x, y = torch.randn(4, 64), torch.randn(4, 7)
        engine.backward(((engine(x) - y) ** 2).mean())
        norms.append([float(n) for n in engine.optimizer._get_norm_groups()])
        engine.step()
    partitions = [real_part(p) for p in engine.module.parameters()]
    engine.destroy()
    return taken, norms, partitions


def main() -> None:
    deepspeed.init_distributed(dist_backend="gloo")
    own_taken, own, own_weights = steps(fused=False)
    taken, fused, weights = steps(fused=True)
    assert taken and not own_taken, (taken, own_taken)
    for a, b in zip(own, fused):
        assert all(abs(x - y) <= 1e-5 * max(1.0, abs(x)) for x, y in zip(a, b)), (own, fused)
    for a, b in zip(own_weights, weights):
        assert torch.allclose(a, b, atol=1e-6), (a - b).abs().max()
    sys.stdout.write(
        f"process {dist.get_rank()}: norms {fused[0]} agree with DeepSpeed's {own[0]}, after {STEPS} steps\n"
    )


if __name__ == "__main__":
    main()
