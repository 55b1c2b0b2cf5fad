"""Items generated per second and groups scored per second, one process vs all cores, from one run.

    .venv/bin/python benchmarks/scoring.py [--items 400] [--group-size 8]

Prints a markdown table; figures are ratios against the single-process baseline of the same run.
"""

from __future__ import annotations

import argparse
import os
import time
from concurrent.futures import ProcessPoolExecutor

from aitp.reasoning.groups import score_group
from aitp.reasoning.items import Item, generate_items
from aitp.tokenizer import load_token_counter

TASKS = ("basic_arithmetic", "spell_backward", "gcd", "word_ladder", "sudoku")


def _generate(args: tuple[str, int, int]) -> list[dict]:
    task, n, seed = args
    return [i.to_dict() for i in generate_items(task, n, seed, split="eval")]


def _score(args: tuple[list[dict], int]) -> int:
    records, group_size = args
    count = load_token_counter(None)
    for record in records:
        item = Item.from_dict(record)
        gold = item.answer or ""
        completions = [f"<think>step {k}</think><answer>{gold if k % 2 else 'x'}</answer>" for k in range(group_size)]
        score_group(item, completions, 1024, count)
    return len(records)


def _timed(fn, jobs, pool: ProcessPoolExecutor | None) -> tuple[float, list]:
    """Wall time of running the jobs in this process (pool None) or spread over a warm pool."""
    start = time.perf_counter()
    out = [fn(j) for j in jobs] if pool is None else list(pool.map(fn, jobs))
    return time.perf_counter() - start, out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--items", type=int, default=400, help="items per task")
    parser.add_argument("--group-size", type=int, default=8)
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    print(
        f"| task | items/s (1 proc) | items/s ({cores} procs) | ratio "
        f"| groups/s (1 proc) | groups/s ({cores} procs) | ratio |"
    )
    print("|---|---|---|---|---|---|---|")
    pool = ProcessPoolExecutor(cores)
    list(pool.map(_generate, [("gcd", 1, k) for k in range(cores)]))  # start and import in every process
    for task in TASKS:
        chunks = [(task, args.items // cores, 1000 + k) for k in range(cores)]
        t1, records = _timed(_generate, chunks, None)
        tn, _ = _timed(_generate, chunks, pool)
        score_jobs = [(r, args.group_size) for r in records]
        s1, _ = _timed(_score, score_jobs, None)
        sn, _ = _timed(_score, score_jobs, pool)
        n = sum(len(r) for r in records)
        print(
            f"| {task} | {n / t1:,.0f} | {n / tn:,.0f} | {t1 / tn:.2f}x "
            f"| {n / s1:,.0f} | {n / sn:,.0f} | {s1 / sn:.2f}x |"
        )
    pool.shutdown()


if __name__ == "__main__":
    main()
