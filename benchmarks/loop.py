"""Orchestration overhead: the share of an iteration's wall time that is not sampling or training.

Runs self-training iterations of the quickstart under Prefect (a real server on loopback, MLflow
on SQLite, the lake under a scratch home) at its own size and at a larger one (`--scale 10`: ten
times the train and held-out items). The work is timed where it happens: the Dask rollout fan-out
(`run_rollouts`), the Lightning fit (`fit`) and eval sampling (`run_eval`); everything else in the
iteration's wall time is overhead: orchestration, tracking and the lake (Prefect task runs, MLflow
calls, Parquet commits, DuckDB selections, checkpoint saves, the plot) and the environment's item
generation. Item generation (reasoning-gym questions: `_iteration_items`, `build_eval_set`) is
environment work rather than orchestration, so it is also timed on its own (`items`) and the share
less it is shown beside the full one; the full `overhead` keeps its old meaning, nothing is moved
out of it.

    .venv/bin/python benchmarks/loop.py --scale 1 --scale 10
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

QUICKSTART = Path(__file__).resolve().parents[1] / "configs" / "quickstart.yaml"
WORK = {
    "rollouts": ("aitp.reasoning.rollouts.run", "run_rollouts"),
    "fit": ("aitp.train.run", "fit"),
    "eval": ("aitp.reasoning.evaluate", "run_eval"),
}
ENVIRONMENT = {
    "items": ("aitp.reasoning.environment", "generate_items"),
    "eval_set": ("aitp.reasoning.evaluate", "build_eval_set"),
}


@contextmanager
def timed_work(spent: dict[str, float]):
    """Wrap the work functions so their wall time adds up in `spent`."""
    import importlib

    originals = []
    for label, (module_name, name) in {**WORK, **ENVIRONMENT}.items():
        module = importlib.import_module(module_name)
        original = getattr(module, name)

        def wrapper(*args: Any, _fn=original, _label=label, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return _fn(*args, **kwargs)
            finally:
                spent[_label] = spent.get(_label, 0.0) + time.perf_counter() - start

        setattr(module, name, wrapper)
        originals.append((module, name, original))
    try:
        yield
    finally:
        for module, name, original in originals:
            setattr(module, name, original)


def flow_run_walls(url: str, experiment: str) -> dict[int, float]:
    """Iteration -> wall seconds of its flow run, as the Prefect server recorded them."""
    import asyncio

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterTags
    from prefect.settings import PREFECT_API_URL, temporary_settings

    async def read():
        async with get_client() as client:
            return await client.read_flow_runs(flow_run_filter=FlowRunFilter(tags=FlowRunFilterTags(all_=[experiment])))

    with temporary_settings({PREFECT_API_URL: url}):
        runs = asyncio.run(read())
    return {
        int(r.name.rsplit("-", 1)[1]): (r.end_time - r.start_time).total_seconds()
        for r in runs
        if "-iter-" in r.name and r.start_time and r.end_time
    }


def measure(scale: int, iterations: int, home: Path, config: Path = QUICKSTART) -> dict[str, Any]:
    """Run iterations 0..N at a scale; the overhead share of each self-training iteration."""
    from aitp.configs import load_config
    from aitp.loop import LoopConfig
    from aitp.services import prefect_api

    base = load_config(LoopConfig, config)
    overrides = [
        f"experiment=bench-x{scale}",
        f"iterations={iterations}",
        f"environment.rollouts.items_per_task={base.environment.rollouts.items_per_task * scale}",
        f"fanout.chunk_items={base.fanout.chunk_items * scale}",
        f"environment.eval.n_per_task={base.environment.eval.n_per_task * scale}",
        f"environment.demonstrations_per_task={base.environment.demonstrations_per_task}",
    ]
    spent_by_iteration: dict[int, dict[str, float]] = {}
    spent: dict[str, float] = {}

    def split(kind: str, payload: dict[str, Any]) -> None:
        if kind == "iteration":
            spent_by_iteration[payload["iteration"]] = dict(spent)
            spent.clear()

    with prefect_api(home) as url:
        from flows.loop import loop_flow

        with timed_work(spent):
            loop_flow(config=str(config), overrides=overrides, home=str(home), listeners=[split])
        walls = flow_run_walls(url, f"bench-x{scale}")
    rows = []
    for k in sorted(walls):
        work = spent_by_iteration.get(k, {})
        overhead = walls[k] - sum(work.get(label, 0.0) for label in WORK)
        items = sum(work.get(label, 0.0) for label in ENVIRONMENT)
        rows.append(
            {
                "iteration": k,
                "wall_s": round(walls[k], 2),
                **{f"{label}_s": round(work.get(label, 0.0), 2) for label in WORK},
                "items_s": round(items, 2),
                "overhead_s": round(overhead, 2),
                "overhead_share": round(overhead / walls[k], 4),
                "overhead_less_items_s": round(overhead - items, 2),
                "overhead_less_items_share": round((overhead - items) / walls[k], 4),
            }
        )
    return {"scale": scale, "iterations": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=int, action="append", help="size multiple of the quickstart (repeatable)")
    parser.add_argument("--iterations", type=int, default=1, help="self-training iterations after the warm start")
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    parser.add_argument("--config", type=Path, default=QUICKSTART, help="the loop config to scale (the quickstart)")
    args = parser.parse_args()
    results = []
    for scale in args.scale or [1]:
        # each size in its own process: Prefect binds its API URL at import, and each size has its own server
        with tempfile.TemporaryDirectory(prefix=f"aitp-bench-loop-x{scale}-") as tmp:
            if len(args.scale or [1]) > 1:
                out = Path(tmp) / "result.json"
                cmd = [sys.executable, __file__, "--scale", str(scale), "--iterations", str(args.iterations)]
                cmd += ["--config", str(args.config)]
                subprocess.run([*cmd, "--out", str(out)], check=True)
                results += json.loads(out.read_text())
                continue
            result = measure(scale, args.iterations, Path(tmp), args.config)
        results.append(result)
        for row in result["iterations"]:
            print(
                f"x{scale:<3} iter {row['iteration']}  wall {row['wall_s']:8.1f}s  rollouts {row['rollouts_s']:7.1f}s  "
                f"fit {row['fit_s']:7.1f}s  eval {row['eval_s']:6.1f}s  overhead {row['overhead_s']:6.1f}s "
                f"({100 * row['overhead_share']:.1f}%)  of it items {row['items_s']:5.1f}s, "
                f"less items {row['overhead_less_items_s']:5.1f}s ({100 * row['overhead_less_items_share']:.1f}%)",
                flush=True,
            )
    if args.out:
        args.out.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
