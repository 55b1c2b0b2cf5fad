"""Tokens per second of the rollout decoder vs Hugging Face `generate`, and the compute roofline, from one run.

    python benchmarks/rollouts.py [--batches 1,64,256,1024] [--rollout 64x16] [--largest 4096]
        [--prompt-tokens 64] [--new-tokens 128] [--gpus 1] [--work 256x16] [--repeats 3] [--json OUT]

One GPU: the SmolLM2-135M architecture (built from its config, random bf16 weights, no download)
samples 64-token random prompts for 128 new tokens at temperature 1 (no top-k, no top-p, no end
of sequence: every row makes exactly 128 tokens), with the decoder (`aitp.policies.fast`) and with
batched `generate`, at each batch size and in the rollout shape (prompts x group size). Each side
gets an untimed warm-up call of the same shape first (graph capture, kernel selection); `generate`
is then timed twice (above one row), since its first full-length call also grows the allocator. A bf16
8192^3 matmul measured in the same run gives the compute roofline: TFLOP/s / (2 x parameters).
`--largest` times the decoder alone at batches too large to wait for `generate` at (rows, or prompts x n).

`--gpus 2`: the rollout work `--work` (prompts x group size) once on one GPU, then split in halves
over two processes, one per GPU, started together after both warmed up; the ratio is of wall times.
Each side times `--repeats` calls (every process starts each one together with the others) and
counts the median wall time. Every process measures the matmul rate before its warm-up, so both sides
start from the same load (the one-GPU process's rate gives the roofline); `--json` keeps each card's
call times.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch
from model_sizes import SMOLLM2_135M  # 30 layers, d=576, 9 query heads sharing 3 KV heads

from aitp.policies.base import SamplingParams
from aitp.policies.fast import FastSampler


def build_model(device: str = "cuda"):
    """The SmolLM2-135M architecture with seeded random bf16 weights."""
    import transformers

    torch.manual_seed(0)
    config = transformers.LlamaConfig(**SMOLLM2_135M)
    return transformers.LlamaForCausalLM(config).to(device=device, dtype=torch.bfloat16).eval()


def make_prompts(count: int, length: int, vocab: int, seed: int = 1) -> list[list[int]]:
    """`count` prompts of `length` random token ids."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(1, vocab, (count, length), generator=gen).tolist()


def matmul_tflops(size: int = 8192, reps: int = 10) -> float:
    """bf16 matrix product throughput on the current GPU (random operands, after warm-ups)."""
    a = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(reps):
        a @ b
    torch.cuda.synchronize()
    return 2 * size**3 * reps / (time.perf_counter() - start) / 1e12


def run_decoder(sampler: FastSampler, prompts, n: int, new_tokens: int) -> tuple[int, float]:
    """Generated tokens and wall seconds of one decoder call (after an untimed one of the same shape)."""
    params = SamplingParams(n=n, temperature=1.0, max_tokens=new_tokens)
    seeds = list(range(len(prompts)))
    for _ in range(2):  # the first call captures and warms up
        torch.cuda.synchronize()
        start = time.perf_counter()
        out = sampler.sample(prompts, params, seeds, eos_ids=set(), decode=lambda ids: "")
        torch.cuda.synchronize()
        seconds = time.perf_counter() - start
    return sum(c.completion_tokens for cs in out for c in cs), seconds


def run_generate(model, prompts, n: int, new_tokens: int, again: bool) -> list[tuple[int, float]]:
    """Tokens and seconds of batched `generate` (same sampling settings): first call, and again if asked.

    The first full-length call at a shape pays the allocator's growth (its cache grows every step);
    the second finds the memory already reserved, as the decoder's timed call does.
    """
    ids = torch.tensor(prompts, device="cuda")
    kwargs = dict(
        attention_mask=torch.ones_like(ids),
        do_sample=True,
        temperature=1.0,
        top_k=0,
        top_p=1.0,
        num_return_sequences=n,
        eos_token_id=None,
        pad_token_id=0,
    )
    timings = []
    with torch.inference_mode():
        model.generate(ids, max_new_tokens=4, **kwargs)  # warm-up
        for _ in range(2 if again else 1):
            torch.cuda.synchronize()
            start = time.perf_counter()
            out = model.generate(ids, max_new_tokens=new_tokens, min_new_tokens=new_tokens, **kwargs)
            torch.cuda.synchronize()
            timings.append(((out.shape[1] - ids.shape[1]) * out.shape[0], time.perf_counter() - start))
    return timings


def one_gpu(args) -> dict:
    """The table of the single-GPU comparison."""
    model = build_model()
    params_count = sum(p.numel() for p in model.parameters())
    tflops = matmul_tflops()
    roofline = tflops * 1e12 / (2 * params_count)
    sampler = FastSampler(model)
    shapes = [(b, 1, True) for b in args.batches]
    shapes.append((args.rollout[0], args.rollout[1], True))
    shapes += [(p, n, False) for p, n in args.largest]
    rows = []
    for prompts_count, n, with_generate in shapes:
        prompts = make_prompts(prompts_count, args.prompt_tokens, model.config.vocab_size)
        with torch.inference_mode():
            tokens, seconds = run_decoder(sampler, prompts, n, args.new_tokens)
        row = dict(prompts=prompts_count, n=n, rows=prompts_count * n, slots=sampler.engine.slots)
        row.update(decoder_tokens=tokens, decoder_s=seconds, decoder_tps=tokens / seconds)
        if with_generate:
            timings = run_generate(model, prompts, n, args.new_tokens, again=prompts_count * n > 1)
            row["generate_tps"] = [tokens / seconds for tokens, seconds in timings]
            row["ratio"] = [row["decoder_tps"] / tps for tps in row["generate_tps"]]
        row["roofline_pct"] = 100 * row["decoder_tps"] / roofline
        rows.append(row)
        print(json.dumps(row), flush=True)
    return dict(
        card=torch.cuda.get_device_name(),
        torch=torch.__version__,
        parameters=params_count,
        matmul_tflops=tflops,
        roofline_tps=roofline,
        rows=rows,
    )


def print_table(result: dict) -> None:
    """The markdown table of a single-GPU result."""
    print(
        f"\n{result['card']}, torch {result['torch']}, {result['parameters'] / 1e6:.1f}M parameters, bf16 matmul "
        f"{result['matmul_tflops']:.0f} TFLOP/s -> roofline {result['roofline_tps'] / 1e6:.2f} M tokens/s\n"
    )
    print("| rows (prompts x n) | slots | decoder tokens/s | generate tokens/s (1st, 2nd call) | ratio | roofline |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in result["rows"]:
        gen = ", ".join(f"{t:,.0f}" for t in r["generate_tps"]) if "generate_tps" in r else "not run"
        ratio = ", ".join(f"{x:.1f}x" for x in r["ratio"]) if "ratio" in r else "-"
        print(
            f"| {r['rows']:,} ({r['prompts']} x {r['n']}) | {r['slots']:,} | {r['decoder_tps']:,.0f} | {gen} | "
            f"{ratio} | {r['roofline_pct']:.1f}% |"
        )


def _worker(rank: int, world: int, args, barrier, results) -> None:
    """One GPU's share of the work: warm up on the same shape, wait for the others, run, report."""
    os.environ["CUDA_VISIBLE_DEVICES"] = str(rank)
    prompts_count, n = args.work
    prompts = make_prompts(prompts_count, args.prompt_tokens, SMOLLM2_135M["vocab_size"])
    mine = prompts[rank::world]
    model = build_model()
    # Every process loads its card the same way before its warm-up: the matmul measurement is part of that.
    tflops = matmul_tflops()
    roofline = tflops * 1e12 / (2 * sum(p.numel() for p in model.parameters())) if world == 1 else None
    sampler = FastSampler(model)
    params = SamplingParams(n=n, temperature=1.0, max_tokens=args.new_tokens)
    spans = []
    with torch.inference_mode():
        sampler.sample(mine, params, list(range(len(mine))), eos_ids=set(), decode=lambda ids: "")
        torch.cuda.synchronize()
        for _ in range(args.repeats):
            barrier.wait()
            start = time.time()
            out = sampler.sample(mine, params, list(range(len(mine))), eos_ids=set(), decode=lambda ids: "")
            torch.cuda.synchronize()
            spans.append((start, time.time()))
    tokens = sum(c.completion_tokens for cs in out for c in cs)
    card = torch.cuda.get_device_name()
    results.put(dict(rank=rank, spans=spans, tokens=tokens, card=card, roofline_tps=roofline))


def spread(world: int, args) -> dict:
    """Wall time and tokens/s of the work split over `world` GPU processes started together."""
    ctx = torch.multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(world), ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(r, world, args, barrier, results)) for r in range(world)]
    for p in procs:
        p.start()
    parts = [results.get() for _ in procs]
    for p in procs:
        p.join()
    walls = [max(p["spans"][i][1] for p in parts) - min(p["spans"][i][0] for p in parts) for i in range(args.repeats)]
    wall = statistics.median(walls)
    tokens = sum(p["tokens"] for p in parts)
    cards = sorted({p["card"] for p in parts})
    out = dict(gpus=world, cards=cards, tokens=tokens, seconds=wall, walls=walls, tps=tokens / wall)
    # each card's own call seconds, to tell one slow card from a pair whose calls are all slow
    out["calls"] = {p["rank"]: [round(end - start, 3) for start, end in p["spans"]] for p in parts}
    if parts[0]["roofline_tps"]:
        out["roofline_pct"] = 100 * out["tps"] / parts[0]["roofline_tps"]
    return out


def _pair(text: str) -> tuple[int, int]:
    a, b = text.lower().split("x")
    return int(a), int(b)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", default="1,64,256,1024", help="batch sizes compared with generate")
    parser.add_argument("--rollout", type=_pair, default=(64, 16), help="rollout shape compared: PROMPTSxN")
    parser.add_argument(
        "--largest", default="4096", help="batches (ROWS or PROMPTSxN) timed for the decoder alone ('' for none)"
    )
    parser.add_argument("--prompt-tokens", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--gpus", type=int, default=1, help="2: compare the work on one GPU and split over two")
    parser.add_argument("--work", type=_pair, default=(256, 16), help="rollout work of the GPU comparison")
    parser.add_argument("--repeats", type=int, default=3, help="timed calls per side of the GPU comparison (median)")
    parser.add_argument("--json", help="also write the result here")
    args = parser.parse_args()
    args.batches = [int(b) for b in args.batches.split(",") if b]
    args.largest = [_pair(b) if "x" in b.lower() else (int(b), 1) for b in args.largest.split(",") if b]
    if args.gpus > 1:
        result = dict(runs=[spread(1, args), spread(args.gpus, args)])
        result["ratio"] = result["runs"][1]["tps"] / result["runs"][0]["tps"]
        for run in result["runs"]:
            roof = f" ({run['roofline_pct']:.1f}% of the roofline)" if "roofline_pct" in run else ""
            print(
                f"{run['gpus']} GPU(s) {', '.join(run['cards'])}: {run['tokens']:,} tokens in "
                f"{run['seconds']:.2f} s = {run['tps']:,.0f} tokens/s{roof} "
                f"(median of {', '.join(f'{w:.2f}' for w in run['walls'])} s)"
            )
        print(f"{args.gpus} GPUs vs 1: {result['ratio']:.2f}x")
    else:
        result = one_gpu(args)
        print_table(result)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
