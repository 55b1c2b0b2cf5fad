"""The per-iteration table of a proving-loop run (`aitp run --config configs/prove-coq.yaml`), read from its lake.

    PYTHONPATH=. .venv/bin/python benchmarks/prove_loop_table.py --home HOME --experiment prove-coq

Valid figures are the iteration's evaluation of its challenger: proved with a Wilson 95 % interval, new / retained /
lost against the champion it was gated against (paired on the valid theorems). Train figures are the iteration's
exploring search of its slice (proved to date: distinct train theorems proved so far). Expansions and prover
seconds per proof from the `proof_search` view (valid: "–" for a run whose evaluations committed no traces, before
they did, or an iteration whose challenger equals a model evaluated before). Wall seconds from the `iterations` rows.
Last line: the last champion over the first, paired bootstrap over theorems.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from aitp.lake import connect
from aitp.loop.stats import champion_gain, per_item_pass
from aitp.paired import wilson

HEADER = (
    "| iter | train slice proved (to date) | valid proved (Wilson 95 %) | new / retained / lost vs champion "
    "| promoted | champion | expansions / proof train, valid | prover s / proof train, valid | wall s |\n"
    "|---:|---:|---:|---:|:---:|---:|---:|---:|---:|"
)


def _num(value: float | None, digits: int) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _figures(con, experiment: str) -> dict[tuple[int, str], dict]:
    cur = con.execute("SELECT * FROM proof_search WHERE experiment = ?", [experiment])
    names = [d[0] for d in cur.description]
    return {(r["iteration"], r["split"]): r for r in (dict(zip(names, row, strict=True)) for row in cur.fetchall())}


def table(home: Path, experiment: str) -> str:
    """The Markdown table and the champion's paired gain."""
    con = connect(home)
    try:
        figures = _figures(con, experiment)
        iterations = con.execute(
            "SELECT iteration, model_in, model_out, promoted, champion_pass_rate,"
            " epoch(finished_at) - epoch(started_at) FROM iterations WHERE experiment = ? AND status = 'done'"
            " ORDER BY iteration",
            [experiment],
        ).fetchall()
        evals = dict(
            con.execute(
                "SELECT model_version, (n_pass, n_items) FROM evals WHERE experiment = ?", [experiment]
            ).fetchall()
        )
    finally:
        con.close()
    lines = [HEADER]
    for k, model_in, model_out, promoted, champion, wall in iterations:
        train, valid = figures.get((k, "train")), figures.get((k, "valid"))
        slice_ = f"{train['n_proved']}/{train['n_searched']} ({train['n_proved_to_date']})" if train else "–"
        proved = "–"
        if model_out in evals:
            n_pass, n = evals[model_out]
            low, high = wilson(n_pass, n)
            proved = f"{n_pass}/{n} ({low:.3f}–{high:.3f})"
        moved, a = "–", per_item_pass(home, experiment, model_in) if model_in else {}
        if a and model_in != model_out:
            b = per_item_pass(home, experiment, model_out)
            new = sum(1 for t in b if b[t] and not a.get(t))
            kept = sum(1 for t in b if b[t] and a.get(t))
            lost = sum(1 for t in a if a[t] and not b.get(t))
            moved = f"{new} / {kept} / {lost}"
        exp = ", ".join(_num((f or {}).get("expansions_per_proof"), 1) for f in (train, valid))
        sec = ", ".join(_num((f or {}).get("prover_seconds_per_proof"), 2) for f in (train, valid))
        lines.append(
            f"| {k} | {slice_} | {proved} | {moved} | {'yes' if promoted else 'no'} | {_num(champion, 3)} | {exp} "
            f"| {sec} | {_num(wall, 0)} |"
        )
    gain = champion_gain(home, experiment)
    lines.append(
        f"\nLast champion over the first: {gain.rate_a:.3f} → {gain.rate_b:.3f}, paired gain {gain.gain:+.3f} "
        f"(95 % {gain.low:+.3f} to {gain.high:+.3f}, {gain.n_items} theorems)."
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", type=Path, required=True)
    parser.add_argument("--experiment", default="prove-coq")
    args = parser.parse_args()
    print(table(args.home, args.experiment))


if __name__ == "__main__":
    main()
