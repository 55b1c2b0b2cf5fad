"""Where a training step's GPU time goes, by kernel kind: matrix products, attention, fused elementwise, optimizer.

    python benchmarks/train_profile.py [--arch 1.7B] [--batch 8] [--seq 2048] [--compile on] [--steps 4] [--warmup 6]

Issue 39 asks the project's trainer for 50 % MFU at the 1.7B architecture on one H200, above what it and plain
PyTorch + compile reach (`results/2026-11-29-train-1.7b.md`). Which part of the step holds it there decides what
to build, so this profiles the reference step (`plain_torch.py`: bf16 autocast over fp32 weights, the fused
output layer and loss, torch.compile, fused AdamW; the trainer does the same arithmetic) with torch's profiler and
sums the GPU kernels' time by kind, with each kind's share of the step's wall time. The gap between the kernels'
sum and the wall time is time the GPU waited for the host. The matrix products' rate (6·N·tokens over their time)
says how far they are from the card's peak.

Needs only torch and transformers (a bare GPU image can run it from a checkout, with the repository on PYTHONPATH).
"""

from __future__ import annotations

import argparse
import re
import time
from collections import defaultdict

import torch
from model_sizes import ARCHITECTURES, llama_config
from plain_torch import training_step  # benchmarks/plain_torch.py: the hand-written reference step

PEAK_BF16 = 989e12
"""Dense bf16 tensor-core peak of an H100 or H200 (SXM), the MFU denominator issue 39 names."""

KINDS = (  # first match wins: attention kernels also carry sm90 / cutlass in their names
    ("communication", re.compile(r"nccl", re.I)),  # across GPUs: on its own stream, overlapping the others
    ("attention", re.compile(r"flash|fmha|attn|attention|sdpa|scaled_dot", re.I)),
    ("matmul", re.compile(r"gemm|nvjet|xmma|cutlass|cublas|wgmma|sm90_|sm80_", re.I)),
    ("optimizer", re.compile(r"adam|multi_tensor|foreach|clip|norm_kernel", re.I)),
    ("fused elementwise (compiled)", re.compile(r"^triton_", re.I)),
    ("copies and fills", re.compile(r"memcpy|memset|copy|fill|cat|index", re.I)),
)


def kernel_kind(kernel: str) -> str:
    """The kind of a GPU kernel, from its name."""
    return next((kind for kind, pattern in KINDS if pattern.search(kernel)), "other")


def kernels(profile) -> dict[str, float]:
    """Seconds of GPU time per kernel name over the profiled steps. The GPU-side spans of annotated regions
    (`Optimizer.step#AdamW.step`) are left out: they cover kernels already counted."""
    totals: dict[str, float] = defaultdict(float)
    for event in profile.events():
        if event.device_type == torch.autograd.DeviceType.CUDA and "#" not in event.name:
            totals[event.name] += event.time_range.elapsed_us() / 1e6
    return dict(totals)


def by_kind(per_kernel: dict[str, float]) -> dict[str, float]:
    """Seconds per kernel kind (`kernel_kind`), from seconds per kernel name."""
    times: dict[str, float] = defaultdict(float)
    for kernel, seconds in per_kernel.items():
        times[kernel_kind(kernel)] += seconds
    return dict(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", choices=list(ARCHITECTURES), default="1.7B")
    parser.add_argument("--batch", type=int, default=8, help="sequences per step")
    parser.add_argument("--seq", type=int, default=2048)
    parser.add_argument("--compile", default="on", help="off, on, or a torch.compile mode")
    parser.add_argument("--warmup", type=int, default=6, help="steps before the profile (compile, allocator)")
    parser.add_argument("--steps", type=int, default=4, help="steps profiled (and timed)")
    parser.add_argument("--causal", action="store_true", help="attention without a mask (aitp.train.attention)")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("benchmarks/train_profile.py needs a CUDA GPU")
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    config = llama_config(args.arch)
    model = LlamaForCausalLM(config).cuda()
    if args.causal:
        from aitp.train.attention import use_causal_sdpa

        use_causal_sdpa(model)
    params = sum(p.numel() for p in model.parameters())
    compiled = {"on": True, "off": False}.get(args.compile, args.compile)
    step = training_step(model, "hf", compile=compiled)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, config.vocab_size, (args.batch, args.seq + 1), generator=gen).cuda()
    ones = torch.ones_like(ids, dtype=torch.bool)
    batch = {"input_ids": ids, "attention_mask": ones, "target_mask": ones}
    for _ in range(args.warmup):
        step(batch)
    torch.cuda.synchronize()
    start = time.perf_counter()  # the rate without the profiler's host-side cost
    for _ in range(args.steps):
        step(batch)
    torch.cuda.synchronize()
    wall = time.perf_counter() - start
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as profile:
        start = time.perf_counter()
        for _ in range(args.steps):
            step(batch)
        torch.cuda.synchronize()
        profiled = time.perf_counter() - start
    tokens = args.steps * args.batch * args.seq
    per_kernel = kernels(profile)
    times = by_kind(per_kernel)
    busy = sum(times.values())
    flops = 6 * params * tokens
    name = torch.cuda.get_device_name()
    print(f"\n{name}: SmolLM2-{args.arch} ({params:,} parameters), {args.batch} x {args.seq} tokens a step, compile")
    print(f"{args.compile}; {args.steps} steps timed after {args.warmup}: {tokens / wall:,.0f} tokens/s, ")
    print(f"MFU 6N {100 * flops / wall / PEAK_BF16:.1f} %; the same steps again under the profiler: {profiled:.2f} s\n")
    print("| kernels | ms a step | share of the profiled wall time |")
    print("|---|---:|---:|")
    for kind, seconds in sorted(times.items(), key=lambda kv: -kv[1]):
        print(f"| {kind} | {1e3 * seconds / args.steps:.1f} | {100 * seconds / profiled:.1f} % |")
    idle = profiled - busy
    print(f"| GPU idle (waiting for the host) | {1e3 * idle / args.steps:.1f} | {100 * idle / profiled:.1f} % |")
    matmul = times.get("matmul", 0.0)
    if matmul:
        rate = flops / matmul
        print(f"\nmatrix products at {rate / 1e12:.0f} TFLOP/s ({100 * rate / PEAK_BF16:.0f} % of peak)")
    print("\n| kernel (top 15) | kind | ms a step |\n|---|---|---:|")
    for kernel, seconds in sorted(per_kernel.items(), key=lambda kv: -kv[1])[:15]:
        print(f"| `{kernel[:90]}` | {kernel_kind(kernel)} | {1e3 * seconds / args.steps:.1f} |")


if __name__ == "__main__":
    main()
