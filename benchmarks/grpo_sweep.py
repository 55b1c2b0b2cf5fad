"""GRPO's settings swept on one iteration's rollouts: each setting trains the same base on the same groups, and
every trained model is scored on the experiment's own held-out items, paired against the base.

    .venv/bin/aitp run --config configs/quickstart-grpo.yaml --home runs/grpo --set iterations=1
    .venv/bin/python benchmarks/grpo_sweep.py --home runs/grpo --experiment quickstart-grpo --iteration 1 \\
        --grid lr=3e-4,1e-3 --grid grpo_epochs=1,2 --grid grpo_loss=bnpo,dr_grpo,dapo --group-sizes 8,4

A whole loop per setting would resample its rollouts from its own champion, so settings would differ in their
data too; here they differ only in the training step, which is what a sweep of the step should isolate, and a
setting costs one fit and one evaluation instead of an iteration. `--group-sizes` keeps the first g samples of
each group (the sampler's order is random), so a smaller group is the same items with fewer samples each. The
winners are then confirmed by whole loops (`benchmarks/objectives.py`).
"""

from __future__ import annotations

import argparse
import itertools
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from aitp.lake import connect, read_iteration
from aitp.loop.config import LoopConfig
from aitp.paired import gain_on_shared_items
from aitp.reasoning.evaluate import build_eval_set, load_checkpoint_policy, run_eval
from aitp.train.checkpoint import checkpoint_dir
from aitp.train.config import TrainConfig
from aitp.train.data import group_samples_sql, with_advantages
from aitp.train.run import fit


def parse_grid(entries: list[str]) -> list[dict[str, Any]]:
    """`key=v1,v2` entries as the product of their values, each value read as JSON where it parses."""
    axes = []
    for entry in entries:
        key, _, values = entry.partition("=")
        if not key or not values:
            raise SystemExit(f"error: grid entry '{entry}' is not key=v1,v2: write it like --grid lr=3e-4,1e-3")
        axes.append([(key, _value(v)) for v in values.split(",")])
    return [dict(point) for point in itertools.product(*axes)] or [{}]


def _value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def iteration_rows(home: str, experiment: str, iteration: int, config: TrainConfig) -> list[dict[str, Any]]:
    """Every train-split rollout of the iteration, as grpo selects them (before advantages)."""
    con = connect(home)
    try:
        params = {"experiment": experiment, "iteration": iteration}
        cursor = con.execute(group_samples_sql(config), params)
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row)) for row in cursor.fetchall()]
    finally:
        con.close()


def held_out(checkpoint: Path, world: Any, seed: int) -> dict[str, float]:
    """Item id -> pass rate of the checkpoint on the experiment's held-out items (nothing written to the lake)."""
    config = world.eval_config(seed)
    _, samples = run_eval(load_checkpoint_policy(str(checkpoint), "cpu"), build_eval_set(config), config)
    rates: dict[str, list[float]] = {}
    for s in samples:
        rates.setdefault(s["item_id"], []).append(float(s["passed"]))
    return {item: sum(v) / len(v) for item, v in rates.items()}


def sweep(args: argparse.Namespace) -> list[dict[str, Any]]:
    row = read_iteration(args.home, args.experiment, args.iteration)
    if row is None or not row.get("config_json"):
        raise SystemExit(f"error: {args.home} has no iteration {args.iteration} of '{args.experiment}': run it first")
    loop = LoopConfig.model_validate(json.loads(row["config_json"]))
    world, seed = loop.environment, loop.seed
    stage = world.train_config(args.iteration, seed)
    if stage.objective != "grpo":
        raise SystemExit(f"error: iteration {args.iteration} of '{args.experiment}' trains {stage.objective}, not grpo")
    base = Path(args.base) if args.base else checkpoint_dir(args.home, args.experiment, args.iteration - 1)
    rows = iteration_rows(args.home, args.experiment, args.iteration, stage)
    base_rates = held_out(base, world, seed)
    results = []
    scratch = Path(tempfile.mkdtemp(prefix="grpo-sweep-"))
    for group_size in args.group_sizes:
        subset = [r for r in rows if r["sample_index"] < group_size]
        for number, point in enumerate(parse_grid(args.grid)):
            config = TrainConfig.model_validate({**stage.model_dump(), **point})
            examples = with_advantages(subset, config)
            out = scratch / f"g{group_size}-{number}"
            began = time.perf_counter()
            trained = fit(examples, str(base), config, out)
            seconds = time.perf_counter() - began
            gain = gain_on_shared_items(base_rates, held_out(out, world, seed), "base", "trained")
            results.append(
                {
                    "group_size": group_size,
                    **point,
                    "samples": len(examples),
                    "groups": trained.groups,
                    "steps": trained.steps,
                    "tokens": trained.tokens,
                    "train_s": round(seconds, 1),
                    "held_out": gain.rate_b,
                    "gain": gain.gain,
                    "low": gain.low,
                    "high": gain.high,
                }
            )
            print(json.dumps(results[-1]), flush=True)
    print(f"\nbase held-out {sum(base_rates.values()) / len(base_rates):.3f} on {len(base_rates)} items\n")
    return results


def table(results: list[dict[str, Any]]) -> str:
    """The sweep as a Markdown table, best gain first."""
    keys = [k for k in results[0] if k not in ("gain", "low", "high")]
    lines = ["| " + " | ".join(keys) + " | gain (95 %) |", "|" + "---|" * (len(keys) + 1)]
    for r in sorted(results, key=lambda r: -r["gain"]):
        cells = [f"{r[k]:.3f}" if isinstance(r[k], float) and k == "held_out" else str(r[k]) for k in keys]
        lines.append("| " + " | ".join(cells) + f" | {r['gain']:+.3f} ({r['low']:+.3f} to {r['high']:+.3f}) |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", required=True, help="the loop's home")
    parser.add_argument("--experiment", required=True)
    parser.add_argument("--iteration", type=int, default=1, help="a grpo iteration whose rollouts are committed")
    parser.add_argument("--base", help="the checkpoint trained from (default: the previous iteration's)")
    parser.add_argument("--grid", action="append", default=[], help="key=v1,v2 of TrainConfig, repeatable")
    parser.add_argument("--group-sizes", type=lambda s: [int(x) for x in s.split(",")], default=[8])
    parser.add_argument("--out", help="also write the results as JSON lines here")
    args = parser.parse_args()
    results = sweep(args)
    if args.out:
        Path(args.out).write_text("".join(json.dumps(r) + "\n" for r in results))
    print(table(results))


if __name__ == "__main__":
    main()
