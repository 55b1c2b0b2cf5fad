"""Proof search cost: where the wall time goes, prover vs aitp itself, per backend and search.

    .venv/bin/python benchmarks/prove.py [--backends coq,hol-light] [--searches bestfs,htps] [--theorems 15]
                                         [--expansions 32] [--profile coq:htps]

For each installed backend: start-up (HOL Light: loading the library, then forking a session),
median and p90 latency of one fixed tactic; then each search runs the fixed-tactic policy over
the first `--theorems` test theorems under one budget and writes its traces to a scratch lake,
as `aitp prove` does. Prover time is the wall time inside the backend's calls (opening a
theorem, running a validated tactic, re-checking a proof); aitp's share is the rest: search,
policy, tactic validation, trace rows and the lake write. Prints markdown tables.
`--profile backend:search` prints the top functions of that run by own time (cProfile).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import tempfile
import time
from collections.abc import Callable
from functools import wraps

from aitp.proving.backends import BACKENDS, backend_available, open_env
from aitp.proving.data.theorems import TheoremSet, load_theorem_set, split_of
from aitp.proving.data.traces import merge_rows, trace_rows, write_traces
from aitp.proving.env import ProverEnv
from aitp.proving.models.fixed_policy import FixedTacticPolicy
from aitp.proving.search import Budget, SearchConfig, make_search

# the theorem and tactic whose latency is measured: this benchmark's own choice per backend
PROBES = {"coq": ("Coq.Lists.List.app_nil_r", "intros"), "hol-light": ("ADD_CLAUSES", "REPEAT CONJ_TAC")}


class Clock:
    """Adds up the wall seconds spent inside the callables it wraps, by account."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def wrap(self, account: str, fn: Callable) -> Callable:
        self.seconds.setdefault(account, 0.0)

        @wraps(fn)
        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[account] += time.perf_counter() - start

        return timed


def instrument(env: ProverEnv, policy: FixedTacticPolicy) -> Clock:
    """Time the backend's own calls (prover) and the policy, on these instances only."""
    clock = Clock()
    for method in ("open", "_run", "check_proof"):
        setattr(env, method, clock.wrap("prover", getattr(env, method)))
    policy.suggest = clock.wrap("policy", policy.suggest)
    return clock


def latency(backend: str, env: ProverEnv, library: TheoremSet, startup: float) -> dict:
    """Start-up and single-tactic latency of a backend."""
    row = {"backend": backend, "startup_s": startup}
    if BACKENDS[backend].serve is not None:  # sessions fork from a loaded prover: time one fork
        t = time.perf_counter()
        env.server.connect().kill()
        row["fork_ms"] = 1000 * (time.perf_counter() - t)
    name, tactic = PROBES[backend]
    root = env.open(library.get(name))
    times = sorted(env.run_tactic(root, tactic).seconds for _ in range(200))
    row["tactic_median_ms"] = 1000 * statistics.median(times)
    row["tactic_p90_ms"] = 1000 * times[int(0.9 * len(times))]
    return row


def split_run(env: ProverEnv, library: TheoremSet, backend: str, search: str, args, home: str) -> dict:
    """One search over the test theorems: expansions/s and the prover / aitp split of its wall time."""
    policy = FixedTacticPolicy(backend, library)
    clock = instrument(env, policy)
    config = SearchConfig(budget=Budget(expansions=args.expansions, prover_seconds=20, wall_seconds=60))
    searcher = make_search(search, config)
    theorems = library.split("test")[: args.theorems]
    proved = expansions = 0
    parts = []
    profiler = cProfile.Profile() if args.profile == f"{backend}:{search}" else None
    start = time.perf_counter()
    if profiler:
        profiler.enable()
    for theorem in theorems:
        result = searcher.run(env, theorem, policy)
        proved += result.proved
        expansions += result.expansions
        t = time.perf_counter()
        parts.append(trace_rows(result, backend, "bench", 0, split_of(theorem.name)))
        clock.seconds["lake"] = clock.seconds.get("lake", 0.0) + time.perf_counter() - t
    t = time.perf_counter()
    write_traces(home, "bench", 0, merge_rows(parts), shard=f"{backend}-{search}".replace("_", "-"))
    clock.seconds["lake"] += time.perf_counter() - t
    wall = time.perf_counter() - start
    if profiler:
        profiler.disable()
        pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
    prover = clock.seconds["prover"]
    return {
        "backend": backend,
        "search": search,
        "proved": f"{proved}/{len(theorems)}",
        "expansions": expansions,
        "wall_s": wall,
        "expansions_per_s": expansions / wall,
        "prover_s": prover,
        "policy_s": clock.seconds["policy"],
        "lake_s": clock.seconds["lake"],
        "search_s": wall - prover - clock.seconds["policy"] - clock.seconds["lake"],
        "aitp_share": 1 - prover / wall,
    }


def bench(backend: str, args, home: str) -> tuple[dict, list[dict]]:
    start = time.perf_counter()
    env = open_env(backend, tactic_timeout=5.0)
    startup = time.perf_counter() - start
    library = load_theorem_set(BACKENDS[backend].default_theorem_set, home)
    env.set_premises(library.premise_map())
    try:
        row = latency(backend, env, library, startup)
        runs = [split_run(env, library, backend, search, args, home) for search in args.searches.split(",")]
    finally:
        env.close()
    return row, runs


def table(rows: list[dict], cols: list[str]) -> None:
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for row in rows:
        cells = []
        for c in cols:
            value = row.get(c, "")
            if isinstance(value, float):
                value = f"{value:.0%}" if c.endswith("share") else f"{value:.2f}"
            cells.append(str(value))
        print("| " + " | ".join(cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default="coq,hol-light")
    parser.add_argument("--searches", default="bestfs,htps")
    parser.add_argument("--theorems", type=int, default=15)
    parser.add_argument("--expansions", type=int, default=32)
    parser.add_argument("--profile", default="", help="backend:search to profile, e.g. coq:htps")
    args = parser.parse_args()
    latencies, runs = [], []
    with tempfile.TemporaryDirectory() as home:
        for backend in args.backends.split(","):
            ok, why = backend_available(backend)
            if not ok:
                print(f"skip {backend}: {why}")
                continue
            row, split = bench(backend, args, home)
            latencies.append(row)
            runs.extend(split)
    table(latencies, ["backend", "startup_s", "fork_ms", "tactic_median_ms", "tactic_p90_ms"])
    print()
    cols = ["backend", "search", "proved", "expansions", "wall_s", "expansions_per_s", "prover_s"]
    table(runs, [*cols, "policy_s", "search_s", "lake_s", "aitp_share"])


if __name__ == "__main__":
    main()
