"""Training throughput and model FLOPs utilisation of the project's trainer per strategy, vs plain PyTorch.

    python benchmarks/train.py [--model llama] [--arch 135M|360M|1.7B|13B] [--steps 50] [--warmup 10]
        [--batches 128,192] [--seq 512] [--compile reduce-overhead] [--lm-head fused] [--repeats 1] [--gpus 1]
        [--strategies single,deepspeed,deepspeed-stock,deepspeed3,torch] [--offload none|optimizer|all]
        [--profile] [--trace DIR]

Every run trains the same model from the same seed on the same synthetic token batches. All strategies
but `torch` train through `aitp.train.module.PolicyModule` and the strategy that `aitp.train.strategy`
builds, in bf16 (`bf16-mixed`: the plain run autocasts over fp32 weights; DeepSpeed keeps bf16 weights
with fp32 master copies): `single` is Lightning's plain strategy (DDP over several GPUs), `deepspeed`
ZeRO-2, `deepspeed3` ZeRO-3 (both as `aitp.train.strategy` builds them), and `deepspeed-stock` ZeRO-2 as
DeepSpeed itself steps it, without the shortcuts `aitp.train.zero` takes in one process, so that
their worth is measured in the same run. `torch` is plain PyTorch, no Lightning and no DeepSpeed
(`benchmarks/plain_torch.py`): bf16 autocast over fp32 weights, the same loss, torch.compile in the same
mode, fused AdamW, clipping 1.0, DistributedDataParallel over several GPUs; each row's "vs torch" is
against it, as "vs plain" is against `single`.

`--model llama` is a Llama architecture of `model_sizes.py` (`--arch`: SmolLM2's 135M, 360M or 1.7B, tied
embeddings, vocabulary 49,152; or Llama-2-13B's 13B, whose plain AdamW state does not fit one card; random
weights, so no checkpoint is needed) trained as a Hugging Face policy;
`--model tiny` is the built-in transformer (`--layers`, `--d-model`). `--compile on` sets the module's
`compile` (torch.compile of network and loss) with torch.compile's default mode; `--compile
reduce-overhead` (or `max-autotune-no-cudagraphs`) sets that mode, reduce-overhead replaying each step's
compiled kernels as CUDA graphs. `--lm-head fused` is the module's GPU loss (`aitp.train.logprobs`: output
layer and cross-entropy in chunks, no full logits); `plain` times the unfused head in the same run (full
bf16 logits, fp32 cross-entropy) by switching the fused one off. `--seq` is 512 by default; the figures
for issue 39 (training past 135M) use `--seq 2048`. `--batches` counts sequences per step per GPU.
On the GPU the project's trainer attends through SDPA with no mask built (`aitp.train.attention`), whatever
`--attention` says; plain PyTorch + compile with a Hugging Face model builds a causal mask and computes the
whole square (`results/2026-11-29-train-profile.md`), unless `--attention causal` gives it the same attention.

`--offload` moves the DeepSpeed strategies' optimizer state (or also ZeRO-3's parameters) to CPU memory.

`--profile` runs the Lightning strategies' timed steps under torch's profiler (GPU activity only) and prints,
per run, the step's wall time split into GPU kernel time by kind (`train_profile.py`'s kinds) and the rest (the
GPU waiting, where one stream runs at a time): where one strategy's step loses to another's. Those runs' rates carry the
profiler's cost, so compare rates from runs without it. `--trace DIR` also records the host and writes process
0's timed steps as a Chrome trace per run, which `trace_gaps.py` reads: when the GPU's compute stream stands
still, and what the collectives and the host were doing meanwhile.

`--gpus N` (N > 1) starts the script again under `torch.distributed.run`, one process per GPU; every
process trains its own batches (seeded by rank), tokens/s counts every process's tokens, and process 0
prints the tables (its peak memory, its last loss). A run that fails on one process can leave the others
waiting on a collective until NCCL's timeout.

Tokens/s counts every token of the timed steps (after `--warmup` steps). The same setting's rate moves
from run to run in one process, by about as much as the gap between the strategies. `--repeats N` runs
every setting N times, the strategies in the given order, then reversed, and so on. Each row's ratios are
against the runs of its own repeat, and a last table gives each setting's median rate per strategy.

MFU = model FLOPs per second / peak of all GPUs, two ways: `6N` counts 6 * parameters (embedding included:
it is the tied output layer's matrix) per token, so MFU = 6 * N * tokens/s / (GPUs * peak); `6N+attn` adds
attention's score and value products, 12 * layers * width * sequence per token (the PaLM count, causal
masking not discounted). The peak is the card's dense bf16 datasheet figure (989 TFLOP/s for an H100 or
H200 SXM); the run also measures an 8192^3 bf16 matmul and prints MFU against that measured rate. Prints
markdown tables naming the card.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import os
import statistics
import subprocess
import sys
import time

import plain_torch  # benchmarks/plain_torch.py: the hand-written reference step
import torch
import train_profile  # benchmarks/train_profile.py: GPU kernels by kind
from model_sizes import ARCHITECTURES, llama_config
from rollouts import matmul_tflops  # benchmarks/rollouts.py: the matmul peak
from torch._dynamo.utils import counters as dynamo_counters

from aitp.policies.tiny import TinyConfig, TinyTransformer
from aitp.train import logprobs
from aitp.train.attention import use_causal_sdpa
from aitp.train.module import PolicyModule, pl
from aitp.train.sigterm import ReadSigtermOneStepLate
from aitp.train.strategy import Hardware, build_strategy, deepspeed_config, in_launched_process, plan_strategy
from aitp.train.zero import destroy_engine

STRATEGIES = ("single", "deepspeed", "deepspeed-stock", "deepspeed3", "torch")

# Dense bf16 tensor-core peaks (vendor datasheets, SXM parts); MFU is left blank for other cards.
PEAK_BF16 = {"H100": 989e12, "H200": 989e12, "A100": 312e12}


def peak_flops(name: str) -> float | None:
    return next((v for k, v in PEAK_BF16.items() if k in name), None)


def rank() -> int:
    """This process's rank in the launched group (0 when not launched)."""
    return int(os.environ.get("RANK", "0"))


class Timer(pl.Callback):
    """Wall time from the start of step `warmup` to the end of training, synchronised with the GPU; with
    `profile`, the GPU's kernel time by kind over those steps (torch's profiler); with `trace`, the host's activity
    too, written there as a Chrome trace by process 0."""

    def __init__(self, warmup: int, profile: bool = False, trace: str | None = None) -> None:
        self.warmup, self.start, self.seconds, self.trace = warmup, None, 0.0, trace
        activities = [torch.profiler.ProfilerActivity.CUDA]
        if trace:  # the host's side too: where it waits on the GPU
            activities.append(torch.profiler.ProfilerActivity.CPU)
        self.profiler = torch.profiler.profile(activities=activities) if profile or trace else None
        self.kernel_seconds: dict[str, float] = {}

    def on_train_batch_start(self, trainer, module, batch, batch_idx) -> None:
        if trainer.global_step == self.warmup and self.start is None:
            torch.cuda.synchronize()
            if self.profiler is not None:
                self.profiler.__enter__()
            self.start = time.perf_counter()

    def on_train_end(self, trainer, module) -> None:
        torch.cuda.synchronize()
        self.seconds = time.perf_counter() - self.start
        if self.profiler is not None:
            self.profiler.__exit__(None, None, None)
            self.kernel_seconds = train_profile.by_kind(train_profile.kernels(self.profiler))
            if self.trace and rank() == 0:
                self.profiler.export_chrome_trace(self.trace)


def batches(n: int, batch: int, seq: int, vocab: int, seed: int = 0) -> list[dict[str, torch.Tensor]]:
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        ids = torch.randint(0, vocab, (batch, seq), generator=gen)
        ones = torch.ones_like(ids, dtype=torch.bool)
        out.append({"input_ids": ids, "attention_mask": ones, "target_mask": ones})
    return out


def build_model(args) -> tuple[torch.nn.Module, str, int, int, int]:
    """(model, backend, vocab, layers, width) of `--model` (and `--arch`), seeded, built on this process's GPU
    (drawing 1.7B random weights on the host takes longer than the run's timed steps)."""
    torch.manual_seed(0)
    with torch.device("cuda", torch.cuda.current_device()):
        if args.model == "tiny":
            config = TinyConfig(n_layer=args.layers, n_head=args.heads, d_model=args.d_model, max_seq_len=args.seq)
            return TinyTransformer(config), "tiny", 256, args.layers, args.d_model
        from transformers import LlamaForCausalLM

        config = llama_config(args.arch)
        return LlamaForCausalLM(config), "hf", config.vocab_size, config.num_hidden_layers, config.hidden_size


def run(strategy_name: str, compiled: bool | str, head: str, attention: str, args) -> dict:
    """Train for `args.steps` steps under one strategy; tokens/s over the steps after warm-up."""
    fused_models = logprobs.PLAIN_HEAD_MODELS
    if head == "plain":  # no architecture qualifies for the fused head: the module computes the full logits
        logprobs.PLAIN_HEAD_MODELS = frozenset()
    # torch prefers cuDNN's attention on Hopper; `flash` takes it out so SDPA picks its FlashAttention-2 kernels.
    cudnn = torch.backends.cuda.cudnn_sdp_enabled()
    torch.backends.cuda.enable_cudnn_sdp(attention != "flash")
    try:
        return {**_run(strategy_name, compiled, head, attention, args), "attention": attention}
    finally:
        logprobs.PLAIN_HEAD_MODELS = fused_models
        torch.backends.cuda.enable_cudnn_sdp(cudnn)


def _run(strategy_name: str, compiled: bool | str, head: str, attention: str, args) -> dict:
    model, backend, vocab, layers, width = build_model(args)
    if attention == "causal" and strategy_name == "torch":  # the trainer's own GPU attention, for the reference
        use_causal_sdpa(model)
    params = sum(p.numel() for p in model.parameters())
    # Hugging Face policies predict tokens 1..T from 0..T-1: one extra token keeps `--seq` positions per row.
    data = batches(args.steps, args.batch, args.seq + (backend == "hf"), vocab, seed=rank())
    torch.cuda.reset_peak_memory_stats()
    dynamo_counters.clear()
    train = train_plain_torch if strategy_name == "torch" else train_lightning
    label, seconds, last_loss, kernel_seconds = train(strategy_name, model, backend, data, compiled, args)
    tokens_per_s = args.gpus * (args.steps - args.warmup) * args.batch * args.seq / seconds
    row = {
        "strategy": label,
        "compile": compiled if isinstance(compiled, str) else ("on" if compiled else "off"),
        "head": head,
        "params": params,
        "tokens_per_s": tokens_per_s,
        "flops_6n": 6 * params * tokens_per_s,
        "flops_attn": (6 * params + 12 * layers * width * args.seq) * tokens_per_s,
        "peak_mem_gib": torch.cuda.max_memory_allocated() / 2**30,
        "loss": last_loss,
        "kernel_ms_a_step": {kind: 1e3 * t / (args.steps - args.warmup) for kind, t in kernel_seconds.items()},
        "step_ms": 1e3 * seconds / (args.steps - args.warmup),
        # What compiled: graphs traced (one per block compiled by block, where guards tell blocks apart) and breaks.
        "graphs": dynamo_counters["stats"]["unique_graphs"],
        "graph_breaks": sum(dynamo_counters["graph_break"].values()),
    }
    del model, data
    release_memory()
    return row


def release_memory() -> None:
    """Drop the last run's compiled graphs and cached blocks (Trainer and module hold each other: collect them)."""
    torch._dynamo.reset()
    gc.collect()
    torch.cuda.empty_cache()


def train_lightning(
    name: str, model, backend: str, data: list, compiled: bool | str, args
) -> tuple[str, float, float, dict[str, float]]:
    """(row label, timed seconds, last loss, GPU seconds by kernel kind if `--profile`) of `PolicyModule` under the
    Lightning strategy `name`."""
    hardware = Hardware("cuda", args.gpus, torch.cuda.get_device_name())
    zero = {"deepspeed": 2, "deepspeed-stock": 2, "deepspeed3": 3}.get(name, 0)
    plan = plan_strategy(
        hardware,
        zero_stage=zero,
        offload=args.offload if zero else "none",
        precision="bf16-mixed",
        devices=args.gpus,
        micro_batch_size=args.batch,
        compile=compiled,
    )
    if name == "deepspeed-stock":  # DeepSpeed's own step, without aitp's one-process shortcuts
        strategy = pl.strategies.DeepSpeedStrategy(config=deepspeed_config(plan))
    else:
        strategy = build_strategy(plan)
    module = PolicyModule(model, backend, "sft", lr=1e-4, compile=compiled, compile_blocks=plan.compile_blocks)
    loader = torch.utils.data.DataLoader(data, batch_size=None, pin_memory=True)  # as the fit's on CUDA
    trace = os.path.join(args.trace, f"{name}-{args.gpus}gpu-batch{args.batch}.json") if args.trace else None
    timer = Timer(args.warmup, args.profile, trace)
    trainer = pl.Trainer(
        accelerator="cuda",
        devices=args.gpus,
        strategy=strategy,
        precision=plan.precision,
        max_steps=args.steps,
        gradient_clip_val=1.0,
        use_distributed_sampler=False,  # every process keeps its own batches, as the torch strategy does
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[timer, ReadSigtermOneStepLate()],  # as the fit's
    )
    module.train()
    try:
        trainer.fit(module, train_dataloaders=loader)
    finally:
        if plan.deepspeed:  # otherwise the engine keeps its model and optimizer state into the next run
            destroy_engine(trainer)
    label = plan.describe().replace(f" on {args.gpus}xcuda", "") + (", stock" if name.endswith("stock") else "")
    return label, timer.seconds, float(module.losses[-1]), timer.kernel_seconds


def train_plain_torch(
    name: str, model, backend: str, data: list, compiled: bool | str, args
) -> tuple[str, float, float, dict[str, float]]:
    """(row label, timed seconds, last loss, no kernel times) of the hand-written step of `plain_torch`."""
    local = torch.cuda.current_device()
    model.to(f"cuda:{local}").train()
    ddp = args.gpus > 1
    step = plain_torch.training_step(model, backend, compile=compiled, autocast=torch.bfloat16, ddp=ddp)
    seconds, losses = plain_torch.timed_steps(step, data, args.warmup, torch.device("cuda", local))
    label = "torch" + (" DDP" if ddp else "") + " (bf16 autocast)"
    return label, seconds, float(losses[-1]), {}  # (not profiled: its steps are timed by plain_torch)


def is_plain(label: str) -> bool:
    """Lightning's plain strategy: one device, or DDP over several."""
    return label.startswith(("single", "ddp "))


def is_torch(label: str) -> bool:
    return label.startswith("torch")


def ratio(rate: float, reference: float | None) -> str:
    return f"{rate / reference:.2f}x" if reference else "n/a"


def model_name(args) -> str:
    return f"{ARCHITECTURES[args.arch][0]} architecture" if args.model == "llama" else "tiny"


def table(rows: list[dict], args) -> None:
    """Print the card, the peaks and one markdown row per run (its rate as a ratio of plain's and torch's)."""
    card = torch.cuda.get_device_name()
    peak, measured = peak_flops(card), matmul_tflops() * 1e12
    print(
        f"\nCard: {args.gpus} x {card}; torch {torch.__version__}; model {model_name(args)}, "
        f"{rows[0]['params'] / 1e6:.1f}M parameters; {args.seq} tokens per sequence, batch per GPU; "
        f"{args.steps - args.warmup} timed steps after {args.warmup}; "
        f"peak {peak / 1e12 if peak else float('nan'):.0f} TFLOP/s per GPU (datasheet), "
        f"8192^3 bf16 matmul measured {measured / 1e12:.0f} TFLOP/s.\n"
    )
    print(
        "| strategy | compile | head | attention | batch x seq | repeat | tokens/s | MFU 6N | MFU 6N+attn "
        "| MFU 6N+attn (measured peak) | vs plain | vs torch | peak GPU memory | last loss |"
    )
    print("| --- | --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        key = ("batch", "compile", "head", "attention", "repeat")
        same = [p for p in rows if all(p[k] == r[k] for k in key)]
        plain = next((p["tokens_per_s"] for p in same if is_plain(p["strategy"])), None)
        reference = next((p["tokens_per_s"] for p in same if is_torch(p["strategy"])), None)
        mfu = [f"{100 * r[k] / (peak * args.gpus):.1f}%" if peak else "n/a" for k in ("flops_6n", "flops_attn")]
        measured_mfu = f"{100 * r['flops_attn'] / (measured * args.gpus):.1f}%"
        print(
            f"| {r['strategy']} | {r['compile']} | {r['head']} | {r['attention']} | {r['batch']} x {args.seq} | "
            f"{r['repeat'] + 1} | {r['tokens_per_s']:,.0f} | {mfu[0]} | {mfu[1]} | {measured_mfu} | "
            f"{ratio(r['tokens_per_s'], plain)} | {ratio(r['tokens_per_s'], reference)} | "
            f"{r['peak_mem_gib']:.1f} GiB | {r['loss']:.3f} |"
        )
    if args.profile:
        profile_table(rows)


def profile_table(rows: list[dict]) -> None:
    """Per profiled run: the step's wall time, the GPU's kernel time by kind, and the step less their sum: the GPU
    waiting where one stream runs at a time, negative where streams overlap (collectives beside the compute), whose
    stalls `trace_gaps.py` separates on a trace."""
    kinds = sorted({kind for r in rows for kind in r["kernel_ms_a_step"]})
    print("\nUnder the profiler (as were those runs' rates above), ms a step:\n")
    print(f"| strategy | batch | step | {' | '.join(kinds)} | step less kernels |")
    print("|---|---:|---:|" + "---:|" * (len(kinds) + 1))
    for r in rows:
        if not r["kernel_ms_a_step"]:
            continue
        busy = [r["kernel_ms_a_step"].get(kind, 0.0) for kind in kinds]
        idle = r["step_ms"] - sum(busy)
        cells = " | ".join(f"{ms:.1f}" for ms in busy)
        print(f"| {r['strategy']} | {r['batch']} | {r['step_ms']:.1f} | {cells} | {idle:.1f} |")


def runs(names: list[str], compiled: bool | str, head: str, attention: str, args) -> list[dict]:
    """One run per strategy, in order; a failed one (say, out of memory) is reported and skipped."""
    out = []
    for name in names:
        try:
            out.append(run(name, compiled, head, attention, args))
        except Exception as exc:
            print(
                f"FAILED (rank {rank()}) {name} {compiled} {head} {attention} batch={args.batch}: "
                f"{type(exc).__name__}: {exc}",
                flush=True,
            )
            release_memory()
            continue
        if rank() == 0:
            print(out[-1], flush=True)
    return out


def alternating(names: list[str]):
    """The strategies' order for each repeat: as given, reversed, as given, ..."""
    while True:
        yield names
        yield names[::-1]


def medians(rows: list[dict]) -> list[dict]:
    """Per setting (batch, compile, head, attention): each strategy's median tokens/s over its repeats and,
    where they ran, its median over plain's and over torch's."""
    key = ("batch", "compile", "head", "attention")
    out = []
    for setting in dict.fromkeys(tuple(r[k] for k in key) for r in rows):
        alike = [r for r in rows if tuple(r[k] for k in key) == setting]
        rate = {}
        for name in dict.fromkeys(r["strategy"] for r in alike):
            rate[name] = statistics.median(r["tokens_per_s"] for r in alike if r["strategy"] == name)
        plain = next((v for k, v in rate.items() if is_plain(k)), None)
        reference = next((v for k, v in rate.items() if is_torch(k)), None)
        for name, value in rate.items():
            n = sum(r["strategy"] == name for r in alike)
            out.append(
                {
                    **dict(zip(key, setting)),
                    "strategy": name,
                    "runs": n,
                    "median": value,
                    "vs_plain": value / plain if plain else None,
                    "vs_torch": value / reference if reference else None,
                }
            )
    return out


def summary(rows: list[dict], args) -> None:
    """Print the medians table (only with `--repeats` above 1)."""
    print(f"\nMedians over {args.repeats} repeats (strategies in alternating order):\n")
    print("| strategy | compile | head | attention | batch x seq | runs | median tokens/s | vs plain | vs torch |")
    print("| --- | --- | --- | --- | --- | ---: | ---: | ---: | ---: |")
    for m in medians(rows):
        plain = f"{m['vs_plain']:.2f}x" if m["vs_plain"] else "n/a"
        reference = f"{m['vs_torch']:.2f}x" if m["vs_torch"] else "n/a"
        print(
            f"| {m['strategy']} | {m['compile']} | {m['head']} | {m['attention']} | {m['batch']} x {args.seq} | "
            f"{m['runs']} | {m['median']:,.0f} | {plain} | {reference} |"
        )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line, checked (no GPU needed)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=["llama", "tiny"], default="llama")
    parser.add_argument(
        "--arch", choices=list(ARCHITECTURES), default="135M", help="SmolLM2's sizes, or Llama-2-13B's (--model llama)"
    )
    parser.add_argument(
        "--offload", choices=["none", "optimizer", "all"], default="none", help="DeepSpeed strategies: to CPU memory"
    )
    parser.add_argument(
        "--compile", default="reduce-overhead", help="comma-separated: off, on (torch.compile), or a compile mode"
    )
    parser.add_argument("--lm-head", default="fused", help="comma-separated: fused (the module's GPU loss), plain")
    parser.add_argument(
        "--attention",
        default="default",
        help="comma-separated SDPA choice: default (torch's), flash (no cuDNN), causal (no mask for the reference)",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="time the Lightning strategies' steps under torch's profiler: GPU time by kernel kind, and the rest",
    )
    parser.add_argument(
        "--trace",
        metavar="DIR",
        help="also write process 0's timed steps (host and GPU) as a Chrome trace per run into DIR (trace_gaps.py "
        "reads it); implies --profile",
    )
    parser.add_argument("--steps", type=int, default=50, help="optimizer steps per run")
    parser.add_argument("--warmup", type=int, default=10, help="steps not timed (allocator, compile, ZeRO buckets)")
    parser.add_argument("--batches", default="128,192", help="sequences per step per GPU, one set of runs per value")
    parser.add_argument("--seq", type=int, default=512, help="tokens per sequence (issue 39's figures: 2048)")
    parser.add_argument("--layers", type=int, default=10, help="tiny model only")
    parser.add_argument("--d-model", type=int, default=1024, help="tiny model only")
    parser.add_argument("--heads", type=int, default=16, help="tiny model only")
    parser.add_argument(
        "--strategies",
        default="single,deepspeed",
        help="comma-separated: single, deepspeed (ZeRO-2), deepspeed-stock (ZeRO-2 without aitp's one-process "
        "shortcuts), deepspeed3 (ZeRO-3), torch (plain PyTorch, no Lightning)",
    )
    parser.add_argument(
        "--repeats", type=int, default=1, help="runs of every setting, strategies in alternating order (median table)"
    )
    parser.add_argument("--gpus", type=int, default=1, help="GPUs, one process each (torch.distributed.run)")
    args = parser.parse_args(argv)
    if args.trace:
        args.profile = True
        os.makedirs(args.trace, exist_ok=True)
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1 (got {args.repeats})")
    if not 0 <= args.warmup < args.steps:
        parser.error(f"--warmup must be at least 0 and below --steps (got {args.warmup} and {args.steps})")
    if args.gpus < 1:
        parser.error(f"--gpus must be at least 1 (got {args.gpus})")
    unknown = set(args.strategies.split(",")) - set(STRATEGIES)
    if unknown:
        parser.error(f"--strategies: unknown {', '.join(sorted(unknown))}; use {', '.join(STRATEGIES)}")
    zero2 = {"deepspeed", "deepspeed-stock"} & set(args.strategies.split(","))
    if args.offload == "all" and zero2:
        parser.error(f"--offload all moves parameters, which only ZeRO-3 partitions: drop {', '.join(sorted(zero2))}")
    return args


def launch(gpus: int) -> int:
    """Run this script again under torch.distributed.run, one process per GPU; their exit status."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={gpus}"]
    return subprocess.call([*command, os.path.abspath(__file__), *sys.argv[1:]])


def join_group(gpus: int) -> None:
    """Inside a launched process: take this rank's GPU and the process group every strategy shares."""
    world = int(os.environ["WORLD_SIZE"])
    if world != gpus:
        raise SystemExit(f"benchmarks/train.py: launched as {world} processes but --gpus {gpus}: make them agree")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    if world > 1 and not torch.distributed.is_initialized():  # Lightning and DeepSpeed join an existing group
        torch.distributed.init_process_group("nccl")


def main() -> None:
    args = parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("benchmarks/train.py needs a CUDA GPU")
    if args.gpus > torch.cuda.device_count():
        raise SystemExit(f"--gpus {args.gpus} but this machine has {torch.cuda.device_count()} GPU(s): lower --gpus")
    if args.gpus > 1 and not in_launched_process():
        raise SystemExit(launch(args.gpus))
    if in_launched_process():
        join_group(args.gpus)
    rows = []
    for batch in [int(b) for b in args.batches.split(",")]:
        setting = argparse.Namespace(**{**vars(args), "batch": batch})
        for compiled in [{"on": True, "off": False}.get(c, c) for c in args.compile.split(",")]:
            for head, attention in itertools.product(args.lm_head.split(","), args.attention.split(",")):
                for repeat, names in zip(range(args.repeats), alternating(args.strategies.split(","))):
                    rows += [
                        {**row, "batch": batch, "repeat": repeat}
                        for row in runs(names, compiled, head, attention, setting)
                    ]
    if rank() == 0:
        if not rows:
            raise SystemExit("benchmarks/train.py: every run failed (the FAILED lines above say why)")
        table(rows, args)
        if args.repeats > 1:
            summary(rows, args)
    if torch.distributed.is_initialized():  # ours over several GPUs, or DeepSpeed's over one
        if torch.distributed.get_world_size() > 1:  # the others wait while process 0 prints
            torch.distributed.barrier()
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
