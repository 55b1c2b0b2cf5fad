"""Training throughput and model FLOPs utilisation: DeepSpeed ZeRO-2 vs the plain single-GPU strategy, one call.

    python benchmarks/train.py [--model smollm2] [--steps 50] [--warmup 10] [--batches 128,192] [--seq 512]
        [--compile reduce-overhead] [--strategies single,deepspeed,deepspeed-stock] [--lm-head fused] [--repeats 1]

Every run trains the same model from the same seed on the same synthetic token batches through
`aitp.train.module.PolicyModule` and the strategy that `aitp.train.strategy` builds, in bf16
(`bf16-mixed`: the plain run autocasts over fp32 weights; DeepSpeed keeps bf16 weights with fp32
master copies). `--model smollm2` is the SmolLM2-135M architecture (Llama: 30 layers, width 576,
9 query and 3 key/value heads, MLP 1536, vocabulary 49,152, tied embeddings; random weights, so no
checkpoint is needed) trained as a Hugging Face policy; `--model tiny` is the built-in transformer
(`--layers`, `--d-model`). `--compile on` sets the module's `compile` (torch.compile of network and
loss) with torch.compile's default mode; `--compile reduce-overhead` (or `max-autotune-no-cudagraphs`) sets
that mode, reduce-overhead replaying each step's compiled kernels as CUDA graphs. `--lm-head fused` is the
module's GPU loss (`aitp.train.logprobs`: output layer and cross-entropy in chunks, no full logits); `plain`
times the unfused head in the same run (full bf16 logits, fp32 cross-entropy) by switching the fused one off.
Tokens/s counts every token of the timed steps (after `--warmup` steps). `deepspeed-stock` is ZeRO-2 as
DeepSpeed itself steps it, without the shortcuts `aitp.train.zero_one_gpu` takes in one process, so that
their worth is measured in the same run.

The same setting's rate moves from run to run in one process (on one H100, plain at 32 x 256 eager: 54k to
63k tokens/s), by about as much as the gap between the strategies. `--repeats N` runs every setting N
times, the strategies in the given order, then reversed, and so on. Each row's "vs plain" is against the
plain run of its own repeat, and a last table gives each setting's median rate per strategy and their ratio.

MFU = model FLOPs per second / peak, two ways: `6N` counts 6 * parameters (embedding included: it
is the tied output layer's matrix) per token; `6N+attn` adds attention's score and value products,
12 * layers * width * sequence per token (the PaLM count, causal masking not discounted). The peak
is the card's dense bf16 datasheet figure (989 TFLOP/s for an H100 SXM); the run also measures an
8192^3 bf16 matmul and prints MFU against that measured rate. Prints markdown tables naming the card.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import time

import torch
from rollouts import SMOLLM2_135M, matmul_tflops  # benchmarks/rollouts.py: the architecture, the matmul peak

from aitp.policies.tiny import TinyConfig, TinyTransformer
from aitp.train import logprobs
from aitp.train.module import PolicyModule, pl
from aitp.train.strategy import Hardware, build_strategy, deepspeed_config, plan_strategy

# Dense bf16 tensor-core peaks (vendor datasheets, SXM parts); MFU is left blank for other cards.
PEAK_BF16 = {"H100": 989e12, "H200": 989e12, "A100": 312e12}


def peak_flops(name: str) -> float | None:
    return next((v for k, v in PEAK_BF16.items() if k in name), None)


class Timer(pl.Callback):
    """Wall time from the start of step `warmup` to the end of training, synchronised with the GPU."""

    def __init__(self, warmup: int) -> None:
        self.warmup, self.start, self.seconds = warmup, None, 0.0

    def on_train_batch_start(self, trainer, module, batch, batch_idx) -> None:
        if trainer.global_step == self.warmup and self.start is None:
            torch.cuda.synchronize()
            self.start = time.perf_counter()

    def on_train_end(self, trainer, module) -> None:
        torch.cuda.synchronize()
        self.seconds = time.perf_counter() - self.start


def batches(n: int, batch: int, seq: int, vocab: int) -> list[dict[str, torch.Tensor]]:
    gen = torch.Generator().manual_seed(0)
    out = []
    for _ in range(n):
        ids = torch.randint(0, vocab, (batch, seq), generator=gen)
        ones = torch.ones_like(ids, dtype=torch.bool)
        out.append({"input_ids": ids, "attention_mask": ones, "target_mask": ones})
    return out


def build_model(args) -> tuple[torch.nn.Module, str, int, int, int]:
    """(model, backend, vocab, layers, width) of `--model`, seeded."""
    torch.manual_seed(0)
    if args.model == "tiny":
        config = TinyConfig(n_layer=args.layers, n_head=args.heads, d_model=args.d_model, max_seq_len=args.seq)
        return TinyTransformer(config), "tiny", 256, args.layers, args.d_model
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(**SMOLLM2_135M, attn_implementation="sdpa")
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
        return {**_run(strategy_name, compiled, head, args), "attention": attention}
    finally:
        logprobs.PLAIN_HEAD_MODELS = fused_models
        torch.backends.cuda.enable_cudnn_sdp(cudnn)


def _run(strategy_name: str, compiled: bool | str, head: str, args) -> dict:
    model, backend, vocab, layers, width = build_model(args)
    params = sum(p.numel() for p in model.parameters())
    hardware = Hardware("cuda", 1, torch.cuda.get_device_name(0))
    zero = 2 if strategy_name.startswith("deepspeed") else 0
    plan = plan_strategy(hardware, zero_stage=zero, precision="bf16-mixed", devices=1, micro_batch_size=args.batch)
    if strategy_name == "deepspeed-stock":  # DeepSpeed's own step, without aitp's one-process shortcuts
        strategy = pl.strategies.DeepSpeedStrategy(config=deepspeed_config(plan))
    else:
        strategy = build_strategy(plan)
    module = PolicyModule(model, backend, "sft", lr=1e-4, compile=compiled)
    # Hugging Face policies predict tokens 1..T from 0..T-1: one extra token keeps `--seq` positions per row.
    data = batches(args.steps, args.batch, args.seq + (backend == "hf"), vocab)
    loader = torch.utils.data.DataLoader(data, batch_size=None)
    timer = Timer(args.warmup)
    torch.cuda.reset_peak_memory_stats()
    trainer = pl.Trainer(
        accelerator="cuda",
        devices=1,
        strategy=strategy,
        precision=plan.precision,
        max_steps=args.steps,
        gradient_clip_val=1.0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[timer],
    )
    module.train()
    trainer.fit(module, train_dataloaders=loader)
    tokens_per_s = (args.steps - args.warmup) * args.batch * args.seq / timer.seconds
    row = {
        "strategy": plan.describe().replace(" on 1xcuda", "") + (", stock" if strategy_name.endswith("stock") else ""),
        "compile": compiled if isinstance(compiled, str) else ("on" if compiled else "off"),
        "head": head,
        "params": params,
        "tokens_per_s": tokens_per_s,
        "flops_6n": 6 * params * tokens_per_s,
        "flops_attn": (6 * params + 12 * layers * width * args.seq) * tokens_per_s,
        "peak_mem_gib": torch.cuda.max_memory_allocated() / 2**30,
        "loss": float(module.losses[-1]),
    }
    del trainer, module, model
    torch._dynamo.reset()
    torch.cuda.empty_cache()
    return row


def table(rows: list[dict], args) -> None:
    """Print the card, the peaks and one markdown row per run (ZeRO-2 as a ratio of plain at the same batch)."""
    card = torch.cuda.get_device_name(0)
    peak, measured = peak_flops(card), matmul_tflops() * 1e12
    print(
        f"\nCard: {card}; torch {torch.__version__}; model {args.model}, {rows[0]['params'] / 1e6:.1f}M parameters; "
        f"{args.seq} tokens per sequence; {args.steps - args.warmup} timed steps after {args.warmup}; "
        f"peak {peak / 1e12 if peak else float('nan'):.0f} TFLOP/s (datasheet), "
        f"8192^3 bf16 matmul measured {measured / 1e12:.0f} TFLOP/s.\n"
    )
    print(
        "| strategy | compile | head | attention | batch x seq | repeat | tokens/s | MFU 6N | MFU 6N+attn "
        "| MFU 6N+attn (measured peak) | vs plain | peak GPU memory | last loss |"
    )
    print("| --- | --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        key = ("batch", "compile", "head", "attention", "repeat")
        same = [p for p in rows if all(p[k] == r[k] for k in key)]
        plain = next((p for p in same if p["strategy"].startswith("single")), None)
        ratio = f"{r['tokens_per_s'] / plain['tokens_per_s']:.2f}x" if plain else "n/a"
        mfu = [f"{100 * r[k] / peak:.1f}%" if peak else "n/a" for k in ("flops_6n", "flops_attn")]
        measured_mfu = f"{100 * r['flops_attn'] / measured:.1f}%"
        print(
            f"| {r['strategy']} | {r['compile']} | {r['head']} | {r['attention']} | {r['batch']} x {args.seq} | "
            f"{r['repeat'] + 1} | {r['tokens_per_s']:,.0f} | {mfu[0]} | {mfu[1]} | {measured_mfu} | {ratio} | "
            f"{r['peak_mem_gib']:.1f} GiB | {r['loss']:.3f} |"
        )


def runs(names: list[str], compiled: bool | str, head: str, attention: str, args) -> list[dict]:
    """One run per strategy, in order; a failed one (say, out of memory) is reported and skipped."""
    out = []
    for name in names:
        try:
            out.append(run(name, compiled, head, attention, args))
        except Exception as exc:
            print(f"FAILED {name} {compiled} {head} {attention} batch={args.batch}: {type(exc).__name__}: {exc}")
            torch._dynamo.reset()
            torch.cuda.empty_cache()
            continue
        print(out[-1], flush=True)
    return out


def alternating(names: list[str]):
    """The strategies' order for each repeat: as given, reversed, as given, ..."""
    while True:
        yield names
        yield names[::-1]


def medians(rows: list[dict]) -> list[dict]:
    """Per setting (batch, compile, head, attention): each strategy's median tokens/s over its repeats and,
    where both ran, ZeRO-2's median over plain's."""
    key = ("batch", "compile", "head", "attention")
    out = []
    for setting in dict.fromkeys(tuple(r[k] for k in key) for r in rows):
        alike = [r for r in rows if tuple(r[k] for k in key) == setting]
        rate = {}
        for name in dict.fromkeys(r["strategy"] for r in alike):
            rate[name] = statistics.median(r["tokens_per_s"] for r in alike if r["strategy"] == name)
        plain = next((v for k, v in rate.items() if k.startswith("single")), None)
        for name, value in rate.items():
            n = sum(r["strategy"] == name for r in alike)
            ratio = value / plain if plain else None
            out.append({**dict(zip(key, setting)), "strategy": name, "runs": n, "median": value, "vs_plain": ratio})
    return out


def summary(rows: list[dict], args) -> None:
    """Print the medians table (only with `--repeats` above 1)."""
    print(f"\nMedians over {args.repeats} repeats (strategies in alternating order):\n")
    print("| strategy | compile | head | attention | batch x seq | runs | median tokens/s | vs plain (medians) |")
    print("| --- | --- | --- | --- | --- | ---: | ---: | ---: |")
    for m in medians(rows):
        ratio = f"{m['vs_plain']:.2f}x" if m["vs_plain"] else "n/a"
        print(
            f"| {m['strategy']} | {m['compile']} | {m['head']} | {m['attention']} | {m['batch']} x {args.seq} | "
            f"{m['runs']} | {m['median']:,.0f} | {ratio} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=["smollm2", "tiny"], default="smollm2")
    parser.add_argument(
        "--compile", default="reduce-overhead", help="comma-separated: off, on (torch.compile), or a compile mode"
    )
    parser.add_argument("--lm-head", default="fused", help="comma-separated: fused (the module's GPU loss), plain")
    parser.add_argument(
        "--attention", default="default", help="comma-separated SDPA choice: default (torch's), flash (no cuDNN)"
    )
    parser.add_argument("--steps", type=int, default=50, help="optimizer steps per run")
    parser.add_argument("--warmup", type=int, default=10, help="steps not timed (allocator, compile, ZeRO buckets)")
    parser.add_argument("--batches", default="128,192", help="sequences per step, one set of runs per value")
    parser.add_argument("--seq", type=int, default=512, help="tokens per sequence")
    parser.add_argument("--layers", type=int, default=10, help="tiny model only")
    parser.add_argument("--d-model", type=int, default=1024, help="tiny model only")
    parser.add_argument("--heads", type=int, default=16, help="tiny model only")
    parser.add_argument(
        "--strategies",
        default="single,deepspeed",
        help="comma-separated: single, deepspeed, deepspeed-stock (ZeRO-2 without aitp's one-process shortcuts)",
    )
    parser.add_argument(
        "--repeats", type=int, default=1, help="runs of every setting, strategies in alternating order (median table)"
    )
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1 (got {args.repeats})")
    unknown = set(args.strategies.split(",")) - {"single", "deepspeed", "deepspeed-stock"}
    if unknown:
        parser.error(f"--strategies: unknown {', '.join(sorted(unknown))}; use single, deepspeed, deepspeed-stock")
    if not torch.cuda.is_available():
        raise SystemExit("benchmarks/train.py needs a CUDA GPU")
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
    table(rows, args)
    if args.repeats > 1:
        summary(rows, args)
    if torch.distributed.is_initialized():  # DeepSpeed's process group
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
