"""Prover latency and search throughput per backend, from one run.

    .venv/bin/python benchmarks/proving.py [--backends coq,hol-light] [--theorems 20] [--search bestfs]

For each installed backend: start-up time (HOL Light: loading the library, then forking a
session), median and p90 tactic latency on a fixed tactic, and a BestFS run of the fixed-tactic
policy over the first `--theorems` test theorems (proved/attempted, expansions/s). Prints a
markdown table.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

from aitp.proving.backends import backend_available, open_env
from aitp.proving.policies import FixedTacticPolicy
from aitp.proving.search import Budget, SearchConfig, make_search
from aitp.proving.theorems import load_theorem_set

PROBES = {"coq": ("Coq.Lists.List.app_nil_r", "intros"), "hol-light": ("ADD_CLAUSES", "REPEAT CONJ_TAC")}
SETS = {"coq": "coq-stdlib", "hol-light": "hol-core"}


def bench(backend: str, n_theorems: int, search: str, home: str) -> dict:
    start = time.perf_counter()
    env = open_env(backend)
    startup = time.perf_counter() - start
    row = {"backend": backend, "startup_s": startup}
    if backend == "hol-light":
        t = time.perf_counter()
        env.server.connect().kill()
        row["fork_ms"] = 1000 * (time.perf_counter() - t)
    library = load_theorem_set(SETS[backend], home)
    env.set_premises(library.premise_map())
    name, tactic = PROBES[backend]
    root = env.open(library.get(name))
    times = sorted(env.run_tactic(root, tactic).seconds for _ in range(200))
    row["tactic_median_ms"] = 1000 * statistics.median(times)
    row["tactic_p90_ms"] = 1000 * times[int(0.9 * len(times))]
    policy = FixedTacticPolicy(backend, library)
    searcher = make_search(search, SearchConfig(budget=Budget(expansions=32, prover_seconds=20)))
    proved = expansions = 0
    t = time.perf_counter()
    theorems = library.split("test")[:n_theorems]
    for theorem in theorems:
        result = searcher.run(env, theorem, policy)
        proved += result.proved
        expansions += result.expansions
    elapsed = time.perf_counter() - t
    row.update(proved=f"{proved}/{len(theorems)}", expansions_per_s=expansions / elapsed)
    env.close()
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default="coq,hol-light")
    parser.add_argument("--theorems", type=int, default=20)
    parser.add_argument("--search", default="bestfs")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as home:
        for backend in args.backends.split(","):
            ok, why = backend_available(backend)
            if not ok:
                print(f"skip {backend}: {why}")
                continue
            rows.append(bench(backend, args.theorems, args.search, home))
    cols = ["backend", "startup_s", "fork_ms", "tactic_median_ms", "tactic_p90_ms", "proved", "expansions_per_s"]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for row in rows:
        cells = [f"{row[c]:.2f}" if isinstance(row.get(c), float) else str(row.get(c, "")) for c in cols]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
