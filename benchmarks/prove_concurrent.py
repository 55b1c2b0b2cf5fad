"""Many proof searches, one tactic model: throughput of concurrent searches against one search at a time.

    .venv/bin/python benchmarks/prove_concurrent.py [--generator SPEC] [--searches 1,4,16] [--limit 64]
                                                    [--split valid] [--expansions 8] [--tactics-per-goal 4]
                                                    [--json FILE]

The same theorems (the first `--limit` of a split of `coq-stdlib`, the loop's evaluation order) are searched
once per `--searches` value, every search sharing one tactic policy whose waiting requests are batched
(`aitp.proving.search.concurrent`): with `--generator`, a generative model (a policy spec or a generator checkpoint,
on the GPU when there is one); without, the untrained ranked models. Reported per value: theorems proved,
theorems per minute, tactics per second, the provers' busy share, the model's busy share and mean batch, and
the GPU's utilisation sampled by nvidia-smi while the searches ran (where there is one).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Any

from aitp.proving.backends import open_env
from aitp.proving.data.theorems import load_theorem_set
from aitp.proving.search import Budget, SearchConfig, make_search
from aitp.proving.search.concurrent import SharedTacticPolicy, search_concurrently


class GpuSampler:
    """Samples the first GPU's utilisation (percent) every `period` seconds while it runs (none without a GPU)."""

    def __init__(self, period: float = 0.5) -> None:
        self.period = period
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        query = ["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits", "--id=0"]
        while not self._stop.wait(self.period):
            done = subprocess.run(query, capture_output=True, text=True, check=False)
            if done.returncode == 0 and done.stdout.strip():
                self.samples.append(float(done.stdout.split()[0]))

    def __enter__(self) -> GpuSampler:
        if shutil.which("nvidia-smi"):
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def mean(self) -> float | None:
        """Mean utilisation over the samples, or None when nothing was sampled."""
        return statistics.fmean(self.samples) if self.samples else None


def tactic_policy(generator: str | None, library: Any) -> Any:
    """The generative model of `generator` (on the GPU if any), or the untrained ranked models' policy."""
    if generator:
        from aitp.proving.models.tactic_generator import load_tactic_generator

        return load_tactic_generator(generator, "coq")
    from aitp.proving.models.prover_models import ProverModels

    return ProverModels.untrained("coq", library).policy(library)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--generator", default=None, help="a generator checkpoint or policy spec (default: ranked)")
    parser.add_argument("--searches", default="1,4,16", help="comma-separated numbers of searches at once")
    parser.add_argument("--limit", type=int, default=64)
    parser.add_argument("--split", default="valid", choices=["train", "valid", "test"])
    parser.add_argument("--expansions", type=int, default=8)
    parser.add_argument("--tactics-per-goal", type=int, default=4)
    parser.add_argument("--tactic-timeout", type=float, default=2.0)
    parser.add_argument("--home", default=None, help="where coq-stdlib is cached (default: a scratch folder)")
    parser.add_argument("--json", default=None, help="also write the rows as JSON here")
    args = parser.parse_args()

    home = args.home or tempfile.mkdtemp(prefix="aitp-concurrent-")
    library = load_theorem_set("coq-stdlib", home=home)
    theorems = library.split(args.split)[: args.limit]
    premises = library.premise_map()
    config = SearchConfig(
        budget=Budget(args.expansions, 60.0, 120.0),
        tactics_per_goal=args.tactics_per_goal,
        tactic_timeout=args.tactic_timeout,
    )

    def session() -> Any:
        env = open_env("coq", tactic_timeout=args.tactic_timeout)
        env.set_premises(premises)
        return env

    rows = []
    policy = tactic_policy(args.generator, library)
    for searches in [int(s) for s in args.searches.split(",")]:
        with SharedTacticPolicy(policy) as shared, GpuSampler() as gpu:
            outcome, figures = search_concurrently(
                session, theorems, lambda: make_search("bestfs", config), shared, searches
            )
        rows.append({"proved": sum(outcome.proved.values()), **figures.as_metrics(), "gpu_utilisation": gpu.mean()})
        print(f"searches={searches}: {rows[-1]}", flush=True)

    print(
        f"\n{len(theorems)} {args.split} theorems of coq-stdlib, bestfs, {args.expansions} expansions, "
        f"{args.tactics_per_goal} tactics per goal, policy: {args.generator or 'untrained ranked models'}\n"
    )
    print(
        "| searches | proved | wall s | theorems/min | tactics/s | prover busy | model busy | mean batch | GPU util |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        gpu = "–" if r["gpu_utilisation"] is None else f"{r['gpu_utilisation']:.0f} %"
        print(
            f"| {r['searches']:.0f} | {r['proved']} | {r['wall_seconds']:.1f} | {r['theorems_per_minute']:.1f} | "
            f"{r['tactics_per_second']:.1f} | {100 * r['prover_busy_share']:.0f} % | "
            f"{100 * r['model_busy_share']:.0f} % | {r['mean_batch_goals']:.1f} | {gpu} |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
