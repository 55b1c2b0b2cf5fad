"""Replay a recorded loop's promotions under both rules of `promotion.rule`: which challengers each would promote.

    python benchmarks/promotion_rules.py --home HOME [--experiment NAME]... [--margin M]

Every iteration's challenger was evaluated on the experiment's pinned eval set and its per-item results are in the
lake (`eval_samples`), so the decisions can be made again without running anything: `margin` promotes any strict gain
of at least the margin over its own champion, `paired` only a gain whose paired bootstrap 95 % interval over the same
items is above zero. Each rule keeps its own champion as it goes (a challenger one rule refused is not the other's
champion), so the two histories can part. Prints one markdown table per experiment, with the last champion of each
rule over the first (paired, as the README reports a loop's gain), and whether the `margin` replay agrees with what
the loop recorded.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from aitp.lake import connect
from aitp.loop.stats import per_item_pass
from aitp.paired import PairedGain, gain_on_shared_items
from aitp.registry.promotion import decide, decide_on_gain


def challengers(home: Path, experiment: str) -> list[tuple[int, str, bool]]:
    """(iteration, challenger model, recorded promotion) in iteration order, as the loop's `iterations` rows say."""
    con = connect(home)
    try:
        rows = con.execute(
            """SELECT iteration, model_out, promoted FROM iterations
               WHERE experiment = $e AND model_out IS NOT NULL ORDER BY iteration""",
            {"e": experiment},
        ).fetchall()
    finally:
        con.close()
    return [(int(i), str(m), bool(p)) for i, m, p in rows]


def experiments(home: Path) -> list[str]:
    con = connect(home)
    try:
        return [r[0] for r in con.execute("SELECT DISTINCT experiment FROM iterations ORDER BY 1").fetchall()]
    finally:
        con.close()


def replay(home: Path, experiment: str, margin: float) -> str:
    """The markdown table of one experiment's promotions under both rules."""
    history = challengers(home, experiment)
    items = {model: per_item_pass(home, experiment, model) for _, model, _ in history}
    champion = {"margin": history[0][1], "paired": history[0][1]}
    lines = [
        f"### {experiment}",
        "",
        "| iter | challenger | recorded | margin: vs champion, gain | promotes | paired: vs champion, gain (95 %) "
        "| promotes |",
        "|---:|---|:---:|---|:---:|---|:---:|",
        f"| {history[0][0]} | {history[0][1]} | yes | first model | yes | first model | yes |",
    ]
    agrees = history[0][2]
    for iteration, model, recorded in history[1:]:
        cells = []
        for rule in ("margin", "paired"):
            gain = _gain(items, champion[rule], model)  # the registry's own rules on the replayed rates
            wins = decide(gain.rate_b, gain.rate_a, margin)[0] if rule == "margin" else decide_on_gain(gain, margin)[0]
            shown = (
                f"{gain.gain:+.3f}" if rule == "margin" else f"{gain.gain:+.3f} ({gain.low:+.3f} to {gain.high:+.3f})"
            )
            cells += [f"{champion[rule]}, {shown}", "yes" if wins else "no"]
            if rule == "margin":
                agrees = agrees and wins == recorded
            if wins:
                champion[rule] = model
        lines.append(f"| {iteration} | {model} | {'yes' if recorded else 'no'} | {' | '.join(cells)} |")
    lines.append("")
    for rule in ("margin", "paired"):
        gain = _gain(items, history[0][1], champion[rule])
        lines.append(f"- `{rule}`: last champion {champion[rule]}, over the first {gain}")
    lines.append(f"- the `margin` replay {'agrees' if agrees else 'DISAGREES'} with the recorded promotions")
    return "\n".join(lines)


def _gain(items: dict[str, dict[str, float]], champion: str, challenger: str) -> PairedGain:
    gain = gain_on_shared_items(items[champion], items[challenger], champion, challenger)
    if gain is None:
        raise SystemExit(f"error: models {champion} and {challenger} share no evaluated items: is the lake whole?")
    return gain


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", type=Path, required=True, help="the aitp home the loop ran in")
    parser.add_argument("--experiment", action="append", default=[], help="default: every experiment of the home")
    parser.add_argument("--margin", type=float, default=0.0, help="promotion.margin the loop ran with (default 0)")
    args = parser.parse_args()
    if not (args.home / "lake").is_dir():
        raise SystemExit(f"error: no lake under {args.home}: pass the --home the loop ran with")
    for experiment in args.experiment or experiments(args.home):
        if not challengers(args.home, experiment):
            raise SystemExit(f"error: experiment {experiment} has no recorded iterations in {args.home}")
        print(replay(args.home, experiment, args.margin))
        print()


if __name__ == "__main__":
    main()
