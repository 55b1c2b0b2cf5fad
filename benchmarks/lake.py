"""Write, open, query and export throughput of the trace lake on synthetic rollouts, from one run.

    .venv/bin/python benchmarks/lake.py [--iterations 4] [--rows 20000] [--tokens 512] [--home DIR]

Each iteration commits one rollouts partition of `--rows` rows (a ~2 KB completion and `--tokens`
log-probs each), then rewrites one partition (idempotent commit). Then it times `connect`, the
`pass_rate` and `cost_per_kept_group` views, and an atropos-jsonl export. Prints a markdown table.
"""

from __future__ import annotations

import argparse
import io
import random
import tempfile
import time

import pyarrow as pa

from aitp.lake import connect, export_atropos, rows_to_table, write_partition


def _rollouts(rows: int, tokens: int, seed: int) -> pa.Table:
    rng = random.Random(seed)
    group = 8
    return rows_to_table(
        "rollouts",
        [
            {
                "item_id": f"item{i // group}",
                "task": rng.choice(["basic_arithmetic", "leg_counting", "spell_backward"]),
                "difficulty_level": rng.randint(0, 4),
                "group_id": f"g{i // group}",
                "sample_index": i % group,
                "prompt": [{"role": "user", "content": "question " * 20}],
                "completion": "thinking " * 220 + "<answer>1</answer>",
                "raw_score": float(rng.random() < 0.4),
                "final_score": rng.random(),
                "prompt_tokens": 40,
                "completion_tokens": tokens,
                "token_logprobs": [-rng.random() for _ in range(tokens)],
                "latency_s": rng.random(),
                "group_kept": (i // group) % 3 != 0,
            }
            for i in range(rows)
        ],
    )


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=4, help="partitions to commit")
    parser.add_argument("--rows", type=int, default=20_000, help="rollouts per partition")
    parser.add_argument("--tokens", type=int, default=512, help="log-probs per rollout")
    parser.add_argument("--home", default=None, help="home to write into (default: a temporary, removed after)")
    args = parser.parse_args()
    if args.home:
        _run(args, args.home)
        return
    with tempfile.TemporaryDirectory(prefix="aitp-lake-bench-") as home:
        _run(args, home)


def _run(args: argparse.Namespace, home: str) -> None:
    table = _rollouts(args.rows, args.tokens, seed=0)
    results = []
    write_s = sum(
        _timed(lambda k=k: write_partition(home, "rollouts", "bench", k, table)) for k in range(args.iterations)
    )
    total = args.rows * args.iterations
    results.append(
        ("commit partitions", write_s, f"{total / write_s:,.0f} rows/s, {table.nbytes / 2**20:.0f} MiB each")
    )
    results.append(("rewrite one partition", _timed(lambda: write_partition(home, "rollouts", "bench", 0, table)), ""))
    holder = {}
    results.append(("connect (views)", _timed(lambda: holder.setdefault("con", connect(home))), ""))
    con = holder["con"]
    assert con.execute("SELECT count(*) FROM rollouts").fetchone()[0] == total
    results.append(("pass_rate view", _timed(lambda: con.execute("FROM pass_rate").fetchall()), ""))
    results.append(("cost_per_kept_group view", _timed(lambda: con.execute("FROM cost_per_kept_group").fetchall()), ""))
    sink = io.StringIO()
    export_s = _timed(lambda: export_atropos(home, "bench", sink, iteration=0))
    results.append(("atropos-jsonl export (1 partition)", export_s, f"{args.rows / export_s:,.0f} rows/s"))

    print(f"home: {home}\n\n| step | seconds | note |\n|---|---:|---|")
    for step, seconds, note in results:
        print(f"| {step} | {seconds:.3f} | {note} |")


if __name__ == "__main__":
    main()
