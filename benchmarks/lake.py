"""The lake at scale: ingest, every curated view, and the same questions asked of the seed's JSONL dump.

    .venv/bin/python benchmarks/lake.py [--sizes 100000 1000000 10000000] [--home DIR] [--keep]

For each size, synthetic rollouts (groups of 8 over three tasks, a ~90-character completion with
its token log-probs, ~15% without an answer tag) are committed in shards of 100k rows over ten
iterations; only `write_partition` is timed (ingest rows/s). The same groups are written as the
seed's atropos-jsonl dump (one file per iteration, one group per line: its item's messages and
scores), the format `aitp export` writes. Then, each in a fresh process (so peak memory is its own):
  lake  `connect` and every curated view (aggregates fetched whole; the row-level `groups` fetched
        as Arrow, `rollouts_rescored` counted); then `aitp lake check` (checksums) and `--deep`;
  JSONL the fastest plain-Python route (stdlib json, orjson, pandas: timed at the first size, the
        fastest used after) answers in one pass what the dump can answer of pass_rate,
        format_violations, group_decisions and cost_per_kept_group.
The dump has no task field: its item ids carry the task (`<task>/<n>`), a concession to JSONL.
The ratio compares the JSONL pass with the lake answering those four views (connect included).
Prints a markdown table; data is deleted after each size unless --keep.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import resource
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

TASKS = ("basic_arithmetic", "leg_counting", "spell_backward")
SYSTEM = "Answer in <answer></answer>."
GROUP = 8
SHARD_ROWS = 100_000
ITERATIONS = 10
EXPERIMENT = "bench"
QUESTIONS = ("pass_rate", "format_violations", "group_decisions", "cost_per_kept_group")


def rollout_batch(start: int, rows: int, seed: int) -> tuple[pa.Table, list[bytes]]:
    """Rows [start, start+rows) as a `rollouts` Arrow table, and the same groups as atropos-jsonl lines."""
    import orjson

    rng = np.random.default_rng(seed)
    index = np.arange(start, start + rows)
    groups = rows // GROUP
    item = index // GROUP
    task = rng.integers(0, len(TASKS), groups).repeat(GROUP)
    a, b = rng.integers(10, 999, groups).repeat(GROUP), rng.integers(10, 999, groups).repeat(GROUP)
    passed = rng.random(rows) < 0.4
    tagged = rng.random(rows) >= 0.15
    passed &= tagged
    tokens = rng.integers(16, 33, rows).astype(np.int32)
    item_ids = [f"{TASKS[t]}/{i:09d}" for t, i in zip(task, item)]
    questions = [f"What is {x} + {y}? Give only the number." for x, y in zip(a, b)]
    prompts = [json.dumps([{"role": "system", "content": SYSTEM}, {"role": "user", "content": q}]) for q in questions]
    answers = np.where(passed, a + b, a + b + rng.integers(1, 9, rows))
    completions = [
        f"<think>add {x} and {y}, carry the tens</think>" + (f"<answer>{s}</answer>" if ok else f"it is {s}")
        for x, y, s, ok in zip(a, b, answers, tagged)
    ]
    score = passed.astype(np.float64)
    per_group = score.reshape(groups, GROUP)
    kept = (per_group.min(axis=1) != per_group.max(axis=1)).repeat(GROUP)
    offsets = np.concatenate([[0], np.cumsum(tokens)]).astype(np.int32)
    logprobs = pa.ListArray.from_arrays(pa.array(offsets), pa.array(-rng.random(int(offsets[-1]), dtype=np.float32)))
    table = pa.table(
        {
            "item_id": item_ids,
            "task": [TASKS[t] for t in task],
            "split": ["train"] * rows,
            "difficulty_level": pa.array(rng.integers(0, 4, rows).astype(np.int32)),
            "gold_answer": [str(s) for s in a + b],
            "group_id": [f"g{i}" for i in item],
            "sample_index": pa.array((index % GROUP).astype(np.int32)),
            "prompt": prompts,
            "completion": completions,
            "extracted_answer": [str(s) if ok else None for s, ok in zip(answers, tagged)],
            "raw_score": score,
            "lenient_score": score,
            "final_score": score,
            "format_error": [None if ok else "no_answer_tag" for ok in tagged],
            "prompt_tokens": pa.array(np.full(rows, 24, np.int32)),
            "completion_tokens": pa.array(tokens),
            "token_logprobs": logprobs,
            "finish_reason": ["stop"] * rows,
            "latency_s": rng.random(rows),
            "worker": ["w0"] * rows,
            "model_version": ["m0"] * rows,
            "group_kept": kept,
            "keep_reason": np.where(kept, "mixed_scores", "all_same").tolist(),
        }
    )
    lines = []
    for g in range(groups):
        lo = g * GROUP
        rollouts = [
            {
                "conversation": [
                    {"role": "system", "content": SYSTEM},
                    {"role": "user", "content": questions[r]},
                    {"role": "assistant", "content": completions[r]},
                ],
                "score": float(score[r]),
            }
            for r in range(lo, lo + GROUP)
        ]
        lines.append(orjson.dumps({"item_id": item_ids[lo], "rollouts": rollouts}))
    return table, lines


def ingest(home: Path, jsonl: Path, size: int) -> dict[str, float]:
    """Commit `size` rows in shards over the iterations (timed) and write the JSONL dump (untimed)."""
    from aitp.lake import write_partition

    per_iteration = size // ITERATIONS
    shard_rows = min(SHARD_ROWS, per_iteration)
    seconds, done = 0.0, 0
    jsonl.mkdir(parents=True)
    for k in range(ITERATIONS):
        with open(jsonl / f"iteration-{k:03d}.jsonl", "wb") as dump:
            for s in range(per_iteration // shard_rows):
                table, lines = rollout_batch(done, shard_rows, seed=done)
                start = time.perf_counter()
                write_partition(home, "rollouts", EXPERIMENT, k, table, shard=f"chunk-{s:04d}")
                seconds += time.perf_counter() - start
                dump.write(b"\n".join(lines) + b"\n")
                done += shard_rows
    return {"rows": done, "ingest_s": seconds, "ingest_peak_mib": _peak_mib()}


def _peak_mib() -> float:
    """This process's peak resident memory. VmHWM, not ru_maxrss: Linux carries the parent's peak into
    ru_maxrss across fork and exec, so a spawned child would report at least its parent's peak."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def lake_questions(home: str) -> dict[str, Any]:
    """Connect and run every curated view; seconds per view and this process's peak memory."""
    from aitp.lake import CURATED_VIEWS, connect

    start = time.perf_counter()
    con = connect(home)
    con.execute("SET memory_limit = '6GB'")
    out: dict[str, Any] = {"connect": time.perf_counter() - start}
    answers = {}
    for view in CURATED_VIEWS:
        start = time.perf_counter()
        if view == "rollouts_rescored":
            result = con.execute(f"SELECT count(*) FROM {view}").fetchall()
        elif view == "groups":
            result = con.sql(f"FROM {view}").to_arrow_table().num_rows
        else:
            result = con.execute(f"FROM {view}").fetchall()
        out[view] = time.perf_counter() - start
        answers[view] = result
    out["answer"] = con.execute(
        "SELECT iteration, task, sum(n), sum(n_pass) FROM pass_rate GROUP BY ALL ORDER BY ALL"
    ).fetchall()
    out["kept"] = con.execute("SELECT sum(n_groups), sum(n_kept_groups) FROM cost_per_kept_group").fetchone()
    out["peak_mib"] = _peak_mib()
    from aitp.lake.check import check_report

    for name, deep in (("check", False), ("check_deep", True)):
        start = time.perf_counter()
        report = check_report(home, deep=deep)
        out[name] = time.perf_counter() - start
        assert not report.problems and report.unverified == 0 and report.verified > 0
    return out


def _parse_lines(route: str, path: Path):
    if route == "pandas":
        import pandas as pd

        for chunk in pd.read_json(path, lines=True, chunksize=50_000):
            yield from zip(chunk["item_id"], chunk["rollouts"])
        return
    loads = __import__(route).loads  # json or orjson
    with open(path, "rb") as lines:
        for line in lines:
            group = loads(line)
            yield group["item_id"], group["rollouts"]


def jsonl_questions(root: str, route: str) -> dict[str, Any]:
    """One pass over the dump answering what it can of the four views: pass rate and format errors by
    (iteration, task), groups kept (mixed scores) and completion characters per kept group."""
    start = time.perf_counter()
    per: dict[tuple[int, str], list[int]] = {}
    groups = kept = chars = 0
    for path in sorted(Path(root).glob("iteration-*.jsonl")):
        k = int(path.stem.split("-")[1])
        for item_id, rollouts in _parse_lines(route, path):
            counts = per.setdefault((k, item_id.split("/", 1)[0]), [0, 0, 0])
            scores = [r["score"] for r in rollouts]
            for r in rollouts:
                text = r["conversation"][-1]["content"]
                counts[0] += 1
                counts[1] += r["score"] >= 1.0
                counts[2] += "<answer>" not in text
                chars += len(text)
            groups += 1
            kept += min(scores) != max(scores)
    seconds = time.perf_counter() - start
    answer = sorted((k, t, n, p) for (k, t), (n, p, _f) in per.items())
    return {"seconds": seconds, "answer": answer, "kept": (groups, kept), "peak_mib": _peak_mib()}


def _in_child(fn, *args):
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(fn, args)


def _disk_mib(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 2**20


def measure(root: Path, size: int, route: str | None) -> dict[str, Any]:
    home, dump = root / f"home-{size}", root / f"jsonl-{size}"
    result = {"size": size, **ingest(home, dump, size)}
    result["lake_mib"], result["jsonl_mib"] = _disk_mib(home / "lake"), _disk_mib(dump)
    result["lake"] = _in_child(lake_questions, str(home))
    routes = [route] if route else ["orjson", "json", "pandas"]
    result["jsonl"] = {r: _in_child(jsonl_questions, str(dump), r) for r in routes}
    for r, got in result["jsonl"].items():  # the two routes must give the same answers
        assert [tuple(x) for x in got["answer"]] == [tuple(x) for x in result["lake"]["answer"]], r
        assert tuple(got["kept"]) == tuple(result["lake"]["kept"]), r
    return result


def report(results: list[dict[str, Any]]) -> str:
    from aitp.lake import CURATED_VIEWS

    lines = [
        "| rows | ingest rows/s | lake MiB | JSONL MiB | connect s | "
        + " | ".join(f"{v} s" for v in CURATED_VIEWS)
        + " | lake 4 views s | JSONL route | JSONL s | ratio | lake peak MiB | JSONL peak MiB"
        + " | check s | check --deep s |",
        "|" + "---:|" * (12 + len(CURATED_VIEWS)),
    ]
    for r in results:
        lake = r["lake"]
        route, best = min(r["jsonl"].items(), key=lambda kv: kv[1]["seconds"])
        four = lake["connect"] + sum(lake[q] for q in QUESTIONS)
        lines.append(
            f"| {r['rows']:,} | {r['rows'] / r['ingest_s']:,.0f} | {r['lake_mib']:,.0f} | {r['jsonl_mib']:,.0f} | "
            f"{lake['connect']:.2f} | "
            + " | ".join(f"{lake[v]:.3f}" for v in CURATED_VIEWS)
            + f" | {four:.2f} | {route} | {best['seconds']:.1f} | {best['seconds'] / four:,.0f}x | "
            f"{lake['peak_mib']:,.0f} | {best['peak_mib']:,.0f} | {lake['check']:.1f} | {lake['check_deep']:.1f} |"
        )
    routes = [
        f"{r['rows']:,}: " + ", ".join(f"{k} {v['seconds']:.1f} s" for k, v in r["jsonl"].items()) for r in results
    ]
    return "\n".join(lines) + "\n\nJSONL routes timed: " + "; ".join(routes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000, 10_000_000])
    parser.add_argument("--home", default=None, help="scratch directory (default: a temporary one)")
    parser.add_argument("--keep", action="store_true", help="keep the data of each size")
    args = parser.parse_args()
    root = Path(args.home or tempfile.mkdtemp(prefix="aitp-lake-bench-"))
    results, route = [], None
    try:
        for size in args.sizes:
            result = measure(root, size, route)
            route = route or min(result["jsonl"].items(), key=lambda kv: kv[1]["seconds"])[0]
            results.append(result)
            print(json.dumps({k: v for k, v in result.items() if k not in ("lake", "jsonl")}), flush=True)
            if not args.keep:
                shutil.rmtree(root / f"home-{size}")
                shutil.rmtree(root / f"jsonl-{size}")
    finally:
        if not args.keep and not args.home:
            shutil.rmtree(root, ignore_errors=True)
    print(report(results))


if __name__ == "__main__":
    main()
