"""Base pass rates of a policy per reasoning-gym task and curriculum level: where self-training can start.

    python benchmarks/base_pass_rates.py [--policy smollm2] [--device cuda] [--tasks basic_arithmetic,leg_counting]
        [--levels 0,1,2] [--items 64] [--group 16] [--max-tokens 256] [--temperature 0.8]
        [--system-prompt TEXT] [--json OUT]

Self-training learns only from groups with at least one right answer, so a task is worth training on
where the base model is above zero but far from solved. For each task and level this samples `--group`
completions of `--items` held-out items (the eval split, so a recipe's eval items are the ones
measured) with the policy's own sampler (the fast decoder on CUDA) and strict scoring, as the loop's
evaluation does (`aitp.reasoning.evaluate.run_eval`). Per cell it prints the pass rate of single samples
(pass@1), the share of items with at least one pass in the group (what the exact-answer filter
keeps), the format-error rate, mean completion tokens, and the decoding rate. `--levels none` uses
each task's default config. Prints a markdown table naming the device.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from aitp.policies.loading import load_policy
from aitp.reasoning.evaluate import EvalConfig, build_eval_set, run_eval


def cell(policy, task: str, level: str, args) -> dict:
    """Sample and score one (task, level) cell; the per-item pass counts give pass@group."""
    config = EvalConfig(
        name="base",
        tasks=[task],
        n_per_task=args.items,
        difficulty=level,
        temperature=args.temperature,
        max_tokens=args.max_tokens,
        samples_per_item=args.group,
        batch_size=args.items,
        system_prompt=args.system_prompt,
    )
    eval_set = build_eval_set(config)
    start = time.perf_counter()
    rows, samples = run_eval(policy, eval_set, config)
    seconds = time.perf_counter() - start
    passes: dict[str, int] = {}
    for s in samples:
        passes[s["item_id"]] = passes.get(s["item_id"], 0) + int(s["passed"])
    row = rows[0]
    return {
        "task": task,
        "level": level,
        "items": row["n_items"],
        "group": args.group,
        "pass_at_1": row["pass_rate"],
        "pass_at_group": sum(n > 0 for n in passes.values()) / len(passes),
        "format_error_rate": row["format_error_rate"],
        "mean_tokens": row["mean_completion_tokens"],
        "tokens_per_s": sum(s["completion_tokens"] for s in samples) / seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", default="smollm2", help="a policy spec (see aitp.policies.spec)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--tasks", default="basic_arithmetic,leg_counting,spell_backward,gcd,chain_sum")
    parser.add_argument("--levels", default="0,1,2", help="comma-separated curriculum levels, or none")
    parser.add_argument("--items", type=int, default=64, help="held-out items per cell")
    parser.add_argument("--group", type=int, default=16, help="samples per item")
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--temperature", type=float, default=0.8)
    parser.add_argument("--system-prompt", help="the recipe's system prompt (default: the environment's)")
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args()
    policy = load_policy(args.policy, device=args.device)
    rows = []
    for task in args.tasks.split(","):
        for level in args.levels.split(","):
            rows.append(cell(policy, task, level, args))
            print(json.dumps(rows[-1]), flush=True)
    name = torch.cuda.get_device_name(0) if args.device.startswith("cuda") else "CPU"
    print(
        f"\nPolicy {args.policy} on {name}; {args.items} held-out items per cell, {args.group} samples each, "
        f"temperature {args.temperature}, at most {args.max_tokens} tokens, system prompt "
        f"{args.system_prompt or 'the environment default'!r}.\n"
    )
    print("| task | level | pass@1 | pass@group | format errors | mean tokens | tokens/s |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        print(
            f"| {r['task']} | {r['level']} | {r['pass_at_1']:.3f} | {r['pass_at_group']:.3f} | "
            f"{r['format_error_rate']:.3f} | {r['mean_tokens']:.0f} | {r['tokens_per_s']:,.0f} |"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
