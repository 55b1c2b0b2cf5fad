"""Tokens per second of the tiny model's KV-cache sampler vs the prefix-recomputing sampler, from one run.

    .venv/bin/python benchmarks/sampling.py [--prompts 2] [--n 4] [--max-tokens 64] [--big-batch 32]
        [--threads 0] [--device cpu] [--prompts-file PROMPTS.json]

Both samplers get the same seeded workload (reasoning-gym prompts, default `TinyConfig`, random
init), so they generate the same tokens; the ratio is of one run on this machine. A last row times
the KV-cache sampler alone on a larger batch and longer completions, where recomputation is too
slow to wait for. Prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from aitp.policies.base import SamplingParams
from aitp.policies.tiny import TinyConfig, TinyPolicy, TinyTransformer


def _timed(policy: TinyPolicy, prompts, params: SamplingParams) -> tuple[int, float]:
    """Generated tokens and wall seconds of one sampling call."""
    start = time.perf_counter()
    out = policy.sample(prompts, params, seeds=list(range(len(prompts))))
    return sum(c.completion_tokens for cs in out for c in cs), time.perf_counter() - start


def _prompts(count: int, path: str | None) -> list:
    """`count` chat prompts: reasoning-gym basic_arithmetic items, or the first ones of a JSON file."""
    if path:
        return json.loads(Path(path).read_text())[:count]
    from aitp.reasoning.items import generate_items
    from aitp.reasoning.prompt import build_messages

    return [build_messages(item) for item in generate_items("basic_arithmetic", count, seed=0, split="eval")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=2, help="distinct prompts in the compared batch")
    parser.add_argument("--n", type=int, default=4, help="samples per prompt")
    parser.add_argument("--max-tokens", type=int, default=64, help="tokens per completion in the comparison")
    parser.add_argument("--big-batch", type=int, default=32, help="rows of the KV-cache-only run (0 skips it)")
    parser.add_argument("--big-tokens", type=int, default=256, help="tokens per completion in that run")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--config", default="{}", help="TinyConfig overrides as JSON, e.g. '{\"n_kv_head\": 4}'")
    parser.add_argument("--prompts-file", help="JSON list of chat prompts to use instead of reasoning-gym items")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    torch.manual_seed(0)
    model = TinyTransformer(TinyConfig(**json.loads(args.config))).to(args.device).eval()
    prompts = _prompts(max(args.prompts, args.big_batch), args.prompts_file)
    params = SamplingParams(n=args.n, temperature=1.0, max_tokens=args.max_tokens)
    cached, recomputing = TinyPolicy(model), TinyPolicy(model, use_cache=False)
    for policy in (cached, recomputing):  # warm-up: first calls pay one-time allocator and kernel costs
        policy.sample(prompts[:1], SamplingParams(max_tokens=4))

    rows = []
    for label, policy in (("KV cache", cached), ("recompute prefix", recomputing)):
        tokens, seconds = _timed(policy, prompts[: args.prompts], params)
        rows.append((label, args.prompts * args.n, args.max_tokens, tokens, seconds))
    if args.big_batch:
        big = SamplingParams(n=1, temperature=1.0, max_tokens=args.big_tokens)
        tokens, seconds = _timed(cached, prompts[: args.big_batch], big)
        rows.append(("KV cache, larger batch", args.big_batch, args.big_tokens, tokens, seconds))

    prompt_bytes = sum(len(m["content"].encode()) for m in prompts[0])
    print(
        f"tiny model: {model.num_params() / 1e6:.2f}M parameters on {args.device}, {torch.get_num_threads()} threads, "
        f"prompts of ~{prompt_bytes} bytes\n"
    )
    print("| sampler | rows | max tokens | tokens | seconds | tokens/s |")
    print("|---|---:|---:|---:|---:|---:|")
    for label, batch, max_tokens, tokens, seconds in rows:
        print(f"| {label} | {batch} | {max_tokens} | {tokens} | {seconds:.2f} | {tokens / seconds:,.0f} |")
    speedup = (rows[0][3] / rows[0][4]) / (rows[1][3] / rows[1][4])
    print(f"\nKV cache vs recomputation, same workload: {speedup:.1f}x tokens/s")


if __name__ == "__main__":
    main()
