"""Training throughput and model FLOPs utilisation: DeepSpeed ZeRO-2 vs the plain single-GPU strategy, one call.

    python benchmarks/train.py [--steps 50] [--warmup 10] [--batches 16,64] [--seq 512] [--layers 10] [--d-model 1024]

Both runs train the same model (the built-in tiny transformer scaled to ~107M parameters, same
seed) on the same synthetic token batches through `aitp.train.module.PolicyModule` and the
strategy that `aitp.train.strategy` builds, in bf16 (`bf16-mixed`: the plain run autocasts over
fp32 weights; DeepSpeed keeps bf16 weights with fp32 master copies). Tokens/s counts every token
of the timed steps (after `--warmup` steps); MFU = 6 * parameters * tokens/s / the card's dense
bf16 peak (attention FLOPs not counted). Prints a markdown table naming the card. Imports only
torch, Lightning, DeepSpeed and aitp's policy and training modules.
"""

from __future__ import annotations

import argparse
import time

import torch

from aitp.policies.tiny import TinyConfig, TinyTransformer
from aitp.train.module import PolicyModule, pl
from aitp.train.strategy import Hardware, build_strategy, plan_strategy

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
        ids = torch.randint(0, 256, (batch, seq), generator=gen)
        ones = torch.ones_like(ids, dtype=torch.bool)
        out.append({"input_ids": ids, "attention_mask": ones, "target_mask": ones})
    return out


def run(strategy_name: str, config: TinyConfig, args) -> dict:
    """Train for `args.steps` steps under one strategy; tokens/s over the steps after warm-up."""
    torch.manual_seed(0)
    model = TinyTransformer(config)
    params = model.num_params()
    hardware = Hardware("cuda", 1, torch.cuda.get_device_name(0))
    zero = 2 if strategy_name == "deepspeed" else 0
    plan = plan_strategy(hardware, zero_stage=zero, precision="bf16-mixed", devices=1, micro_batch_size=args.batch)
    module = PolicyModule(model, "tiny", "sft", lr=1e-4)
    data = batches(args.steps, args.batch, args.seq, config.vocab_size)
    loader = torch.utils.data.DataLoader(data, batch_size=None)
    timer = Timer(args.warmup)
    torch.cuda.reset_peak_memory_stats()
    trainer = pl.Trainer(
        accelerator="cuda",
        devices=1,
        strategy=build_strategy(plan),
        precision=plan.precision,
        max_steps=args.steps,
        gradient_clip_val=1.0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[timer],
    )
    trainer.fit(module, train_dataloaders=loader)
    tokens = (args.steps - args.warmup) * args.batch * args.seq
    tokens_per_s = tokens / timer.seconds
    peak = peak_flops(hardware.name)
    row = {
        "strategy": plan.describe().replace(" on 1xcuda", ""),
        "params": params,
        "tokens_per_s": tokens_per_s,
        "mfu": 6 * params * tokens_per_s / peak if peak else None,
        "peak_mem_gib": torch.cuda.max_memory_allocated() / 2**30,
        "loss": float(module.losses[-1]),
    }
    del trainer, module, model
    torch.cuda.empty_cache()
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50, help="optimizer steps per run")
    parser.add_argument("--warmup", type=int, default=10, help="steps not timed (allocator, kernels, ZeRO buckets)")
    parser.add_argument("--batches", default="16,64", help="sequences per step, one pair of runs per value")
    parser.add_argument("--seq", type=int, default=512, help="tokens per sequence")
    parser.add_argument("--layers", type=int, default=10)
    parser.add_argument("--d-model", type=int, default=1024)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--strategies", default="single,deepspeed", help="comma-separated: single, deepspeed")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("benchmarks/train.py needs a CUDA GPU")
    config = TinyConfig(n_layer=args.layers, n_head=args.heads, d_model=args.d_model, max_seq_len=args.seq)
    rows = []
    for batch in [int(b) for b in args.batches.split(",")]:
        for name in args.strategies.split(","):
            rows.append({**run(name, config, argparse.Namespace(**{**vars(args), "batch": batch})), "batch": batch})
    card = torch.cuda.get_device_name(0)
    print(
        f"\nCard: {card}; torch {torch.__version__}; {rows[0]['params'] / 1e6:.1f}M parameters; "
        f"{args.seq} tokens per sequence; {args.steps - args.warmup} timed steps after {args.warmup}.\n"
    )
    print("| strategy | card | batch x seq | tokens/s | MFU | peak GPU memory | last loss |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: |")
    for r in rows:
        mfu = f"{100 * r['mfu']:.1f}%" if r["mfu"] is not None else "n/a"
        print(
            f"| {r['strategy']} | {card} | {r['batch']} x {args.seq} | {r['tokens_per_s']:,.0f} | {mfu} | "
            f"{r['peak_mem_gib']:.1f} GiB | {r['loss']:.3f} |"
        )
    if torch.distributed.is_initialized():  # DeepSpeed's process group
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
