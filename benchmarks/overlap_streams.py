"""Whether sampling and training overlap on one GPU: two threads of one process against two processes, one run.

    python benchmarks/overlap_streams.py [--policy smollm2] [--train-steps 30] [--batch 16] [--seq 512] \
        [--prompts 256] [--max-tokens 128] [--memory-share 0.4] [--device cuda]

`rollouts.overlap` samples the next iteration in a Dask worker process while the flow's process trains. On one
card that hides far less than the stage times allow (`results/2026-11-29-gpu-overlap.md`). This asks whether one
CUDA context would do better, with the sampler as a thread of the training process and its kernels on a stream of
its own, before the loop is built around it: the same two workloads (the fast decoder sampling reasoning-gym
prompts; AdamW steps on a copy of the same model, bf16 autocast over fp32 weights, as the trainer does), each
alone, then at once as two threads of one process and as two processes (answer:
`results/2026-11-29-overlap-streams.md`).

Prints each way's wall time and its ratio to the two alone one after the other (1.0: no overlap; the larger
share of the two: perfect overlap). Decoder graphs are captured in a warm-up before any clock starts, since a
capture forbids other threads' allocations while it runs.
"""

from __future__ import annotations

import argparse
import copy
import threading
import time
from collections.abc import Callable
from multiprocessing import get_context

import torch

from aitp.policies.base import SamplingParams
from aitp.policies.loading import load_policy


def workloads(args: argparse.Namespace) -> tuple[Callable[[], None], Callable[[], None]]:
    """The training and the sampling workload, each warmed up once (compiled, captured, allocated)."""
    from aitp.reasoning.items import generate_items
    from aitp.reasoning.prompt import build_messages

    if args.device.startswith("cuda"):  # the engine would size itself to the whole free card, leaving no room to train
        from aitp.policies.fast.engine import limit_memory_share

        limit_memory_share(args.memory_share)
    policy = load_policy(args.policy, device=args.device)
    prompts = [build_messages(i) for i in generate_items("basic_arithmetic", args.prompts, seed=0, split="eval")]
    params = SamplingParams(n=1, temperature=1.0, max_tokens=args.max_tokens)

    def sample() -> None:
        policy.sample(prompts, params, list(range(len(prompts))))
        sync(args.device)

    model = copy.deepcopy(policy.model).float().train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=args.device.startswith("cuda"))
    vocab = model.config.vocab_size
    batch = torch.randint(0, vocab, (args.batch, args.seq), device=args.device)

    def train() -> None:
        for _ in range(args.train_steps):
            with torch.autocast(device_type=args.device.split(":")[0], dtype=torch.bfloat16):
                loss = model(input_ids=batch, labels=batch).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        sync(args.device)

    sample()
    train()
    return train, sample


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def timed(fn: Callable[[], None]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def as_threads(train: Callable[[], None], sample: Callable[[], None], device: str) -> float:
    """Both at once in this process: sampling in a second thread on its own stream, training in this one."""
    side = torch.cuda.Stream() if device.startswith("cuda") else None

    def sampler() -> None:
        if side is None:
            sample()
            return
        with torch.cuda.stream(side):
            sample()

    start = time.perf_counter()
    thread = threading.Thread(target=sampler)
    thread.start()
    train()
    thread.join()
    sync(device)
    return time.perf_counter() - start


def _process(role: str, args: argparse.Namespace, barrier, out) -> None:
    train, sample = workloads(args)
    barrier.wait()
    out.put((role, timed(train if role == "train" else sample)))


def as_processes(args: argparse.Namespace) -> float:
    """Both at once as two processes (two CUDA contexts on the card), timed from when both are warm."""
    ctx = get_context("spawn")
    barrier, out = ctx.Barrier(3), ctx.Queue()
    procs = [ctx.Process(target=_process, args=(role, args, barrier, out)) for role in ("train", "sample")]
    for p in procs:
        p.start()
    barrier.wait()
    start = time.perf_counter()
    results = [out.get() for _ in procs]
    wall = time.perf_counter() - start
    for p in procs:
        p.join()
    print("  each in its own process:", ", ".join(f"{role} {s:.2f} s" for role, s in results))
    return wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", default="smollm2")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--train-steps", type=int, default=30)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--prompts", type=int, default=256)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--memory-share", type=float, default=0.4, help="card share per decoder")
    args = parser.parse_args()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit("error: no CUDA device here: pass --device cpu for a smoke run")
    train, sample = workloads(args)
    t_train, t_sample = timed(train), timed(sample)
    serial = t_train + t_sample
    t_threads = as_threads(train, sample, args.device)
    t_procs = as_processes(args)
    best = max(t_train, t_sample) / serial
    name = torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu"
    print(f"\n{name}: train {t_train:.2f} s alone, sample {t_sample:.2f} s alone (perfect overlap {best:.2f}x)\n")
    print("| both at once | wall s | / one after the other |")
    print("|---|---:|---:|")
    print(f"| one after the other | {serial:.2f} | 1.00 |")
    print(f"| two threads, one process (sampler on its own stream) | {t_threads:.2f} | {t_threads / serial:.2f} |")
    print(f"| two processes | {t_procs:.2f} | {t_procs / serial:.2f} |")


if __name__ == "__main__":
    main()
