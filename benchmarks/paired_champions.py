"""Self-training against its control: the two experiments' last champions, paired on the same eval items.

    python benchmarks/paired_champions.py HOME EXPERIMENT CONTROL_HOME CONTROL_EXPERIMENT

A recipe and its control (e.g. configs/gpu.yaml and configs/gpu-control.yaml) evaluate on the same
fixed held-out items (same tasks, seed and eval size give the same item ids), so the difference of
their last champions is measured per item and the items resampled, as each run's own gain is.
Prints each run's first-to-last gain and the recipe's last champion minus the control's.
"""

from __future__ import annotations

import argparse

import numpy as np

from aitp.lake import connect
from aitp.loop.stats import champion_gain, per_item_pass
from aitp.paired import paired_bootstrap


def last_champion(home: str, experiment: str) -> str:
    """The champion model id recorded by the experiment's last decided iteration."""
    con = connect(home)
    try:
        row = con.execute(
            """SELECT champion_model FROM iterations WHERE experiment = $e AND champion_model IS NOT NULL
               ORDER BY iteration DESC LIMIT 1""",
            {"e": experiment},
        ).fetchone()
    finally:
        con.close()
    if row is None:
        raise SystemExit(f"error: experiment '{experiment}' in {home} has no champion: run it first")
    return row[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name in ("home", "experiment", "control_home", "control_experiment"):
        parser.add_argument(name)
    args = parser.parse_args()
    for home, experiment in ((args.home, args.experiment), (args.control_home, args.control_experiment)):
        print(f"{experiment}: last champion over first {champion_gain(home, experiment)}")
    mine = per_item_pass(args.home, args.experiment, last_champion(args.home, args.experiment))
    theirs = per_item_pass(
        args.control_home, args.control_experiment, last_champion(args.control_home, args.control_experiment)
    )
    items = sorted(set(mine) & set(theirs))
    if not items:
        raise SystemExit("error: the two runs share no eval items: give both the same tasks, seed and eval size")
    a, b = np.array([theirs[i] for i in items]), np.array([mine[i] for i in items])
    gain, low, high = paired_bootstrap(a, b)
    print(
        f"{args.experiment} last champion {b.mean():.3f} vs {args.control_experiment} last champion {a.mean():.3f}: "
        f"{gain:+.3f} (paired 95% {low:+.3f} to {high:+.3f}, {len(items)} items)"
    )


if __name__ == "__main__":
    main()
