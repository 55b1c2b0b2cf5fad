"""Where a HOL Light train search's time goes, and what the tactic timeout costs: one run, two timeouts.

    PYTHONPATH=. .venv/bin/python benchmarks/hol_tactic_timeout.py [--theorems 8] [--timeouts 2.0,0.5]

Searches the first `--theorems` of prove-hol's first train slice with its train search (BestFS, 8 expansions,
10 tactics per goal, exploration at temperature 1, untrained models), once per tactic timeout, in forked sessions
of one loaded toplevel. Reports per theorem: proved, tactic timeouts, CPU seconds of the session (from /proc:
what the timeout budgets, whatever the machine's load) and wall seconds; the last column is the CPU ratio
against the first timeout. Prints a markdown table.
"""

from __future__ import annotations

import argparse
import os
import time

from aitp.proving.data.theorems import load_theorem_set
from aitp.proving.hol_light.env import HolLightEnv, HolLightServer
from aitp.proving.learning import train_slice
from aitp.proving.models.prover_models import ProverModels
from aitp.proving.models.ranked_policy import Exploration
from aitp.proving.search import Budget, SearchConfig, make_search

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User plus system CPU seconds of a process so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def search_slice(env: HolLightEnv, theorems, library, timeout: float) -> dict[str, float]:
    """One pass of the train search over the theorems at this tactic timeout: totals."""
    models = ProverModels.untrained("hol-light", library)
    config = SearchConfig(budget=Budget(8, 60.0, 120.0), tactics_per_goal=10, tactic_timeout=timeout)
    totals = {"proved": 0, "timeouts": 0, "tactics": 0, "cpu": 0.0, "wall": 0.0}
    for theorem in theorems:
        policy = models.policy(library, Exploration(1.0, seed=1001))  # the same candidate orders for every timeout
        pid, cpu, start = env._session.pid, cpu_seconds(env._session.pid), time.perf_counter()
        result = make_search("bestfs", config).run(env, theorem, policy)
        totals["wall"] += time.perf_counter() - start
        totals["cpu"] += cpu_seconds(pid) - cpu if env._session.pid == pid else float("nan")
        totals["proved"] += result.proved
        totals["timeouts"] += sum(e.outcome == "timeout" for e in result.tree.edges)
        totals["tactics"] += len(result.tree.edges)
    return totals


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--theorems", type=int, default=8)
    ap.add_argument("--timeouts", default="2.0,0.5")
    ap.add_argument("--home", default=None, help="aitp home caching the hol-core set")
    args = ap.parse_args()
    library = load_theorem_set("hol-core", args.home)
    theorems = train_slice(library, 0, 40, 1)[: args.theorems]
    start = time.perf_counter()
    server = HolLightServer()
    load = time.perf_counter() - start
    load_cpu = cpu_seconds(server.proc.pid)
    env = HolLightEnv(2.0, server)
    env.set_premises(library.premise_map())
    rows = []
    try:
        for timeout in [float(t) for t in args.timeouts.split(",")]:
            rows.append((timeout, search_slice(env, theorems, library, timeout)))
    finally:
        env.close()
        server.close()
    n = len(theorems)
    print(f"Loading HOL Light: {load:.0f} s wall, {load_cpu:.0f} s CPU (load average {os.getloadavg()[0]:.1f}).\n")
    print("| tactic timeout s | proved | tactics | timeouts | session CPU s / theorem | wall s / theorem | CPU ratio |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    base = rows[0][1]["cpu"]
    for timeout, t in rows:
        print(
            f"| {timeout:.2f} | {t['proved']}/{n} | {t['tactics']} | {t['timeouts']} | {t['cpu'] / n:.2f} "
            f"| {t['wall'] / n:.2f} | {t['cpu'] / base:.2f} |"
        )


if __name__ == "__main__":
    main()
