"""Which objective learns more per sample and per second: loops of one recipe, side by side, from their lakes.

    python benchmarks/objectives.py HOME:EXPERIMENT [HOME:EXPERIMENT ...] [--baseline N]

Each run is a loop of the same tasks, items, rollout budget and held-out set (e.g. configs/gpu.yaml,
configs/gpu-grpo.yaml, configs/gpu-control.yaml, or one of them with rollouts.overlap). Printed as
Markdown: per iteration, the challenger's and the champion's held-out pass rate, the promotion, the
rollout tokens generated, the wall seconds, the sampler/trainer log-prob gap and the policy lag; per run,
its last champion over its first (paired on the held-out items), that gain per million generated tokens
and per wall minute, and each run's last champion against the baseline run's (the first given, or
--baseline), paired on the same items; and the rows of every lake table, so that two runs meant to do
the same work (overlap on and off) can be checked to have done it.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from aitp.lake import TABLES, connect
from aitp.loop.stats import champion_gain, per_item_pass
from aitp.paired import gain_on_shared_items

_ITERATIONS_SQL = """
    SELECT i.iteration, i.eval_pass_rate, i.champion_pass_rate, i.promoted, i.logprob_gap, i.policy_lag,
           epoch(i.finished_at) - epoch(i.started_at) AS seconds, r.tokens, r.samples
    FROM iterations i
    LEFT JOIN (SELECT iteration, sum(completion_tokens) AS tokens, count(*) AS samples FROM rollouts
               WHERE experiment = $e GROUP BY iteration) r USING (iteration)
    WHERE i.experiment = $e ORDER BY i.iteration"""


@dataclass(frozen=True)
class Run:
    home: str
    experiment: str

    @classmethod
    def parse(cls, text: str) -> Run:
        home, _, experiment = text.rpartition(":")
        if not home or not experiment:
            raise SystemExit(f"error: {text!r} is not HOME:EXPERIMENT: name a loop's home and its experiment")
        return cls(home, experiment)

    def query(self, sql: str, params: dict | None = None) -> list[tuple]:
        con = connect(self.home, read_only=True)
        try:
            return con.execute(sql, params or {}).fetchall()
        finally:
            con.close()

    def last_champion(self) -> str:
        rows = self.query(
            "SELECT champion_model FROM iterations WHERE experiment = $e AND champion_model IS NOT NULL "
            "ORDER BY iteration DESC LIMIT 1",
            {"e": self.experiment},
        )
        if not rows:
            raise SystemExit(f"error: experiment '{self.experiment}' in {self.home} has no champion: run it first")
        return rows[0][0]


def _fmt(value: float | None, spec: str = ".3f") -> str:
    return "–" if value is None else format(value, spec)


def iteration_table(run: Run) -> tuple[str, float, float]:
    """The run's per-iteration Markdown table, its generated tokens and its wall seconds after iteration 0."""
    rows = run.query(_ITERATIONS_SQL, {"e": run.experiment})
    lines = [
        f"### {run.experiment} ({run.home})",
        "",
        "| iteration | challenger | champion | promoted | rollout tokens | samples | wall s | logprob gap | lag |",
        "|---:|---:|---:|---|---:|---:|---:|---:|---:|",
    ]
    tokens = seconds = 0.0
    for k, challenger, champion, promoted, gap, lag, secs, toks, samples in rows:
        lines.append(
            f"| {k} | {_fmt(challenger)} | {_fmt(champion)} | {'yes' if promoted else 'no'} | {_fmt(toks, ',.0f')} "
            f"| {_fmt(samples, ',.0f')} | {_fmt(secs, '.1f')} | {_fmt(gap, '.2e')} | {_fmt(lag, 'd')} |"
        )
        if k > 0:
            tokens += toks or 0
            seconds += secs or 0
    return "\n".join(lines), tokens, seconds


def table_rows(run: Run) -> dict[str, int]:
    """Rows of every lake table for the experiment."""
    return {
        t: run.query(f"SELECT count(*) FROM {t} WHERE experiment = $e", {"e": run.experiment})[0][0] for t in TABLES
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Run.parse, help="HOME:EXPERIMENT of each loop")
    parser.add_argument("--baseline", type=int, default=0, help="index of the run the others are paired with")
    args = parser.parse_args()
    summary = [
        "| run | first → last champion | gain (paired 95 %) | per 1M rollout tokens | per wall minute | "
        "iterations 1+ wall s |",
        "|---|---|---|---:|---:|---:|",
    ]
    tables = []
    for run in args.runs:
        table, tokens, seconds = iteration_table(run)
        tables.append(table)
        g = champion_gain(run.home, run.experiment)
        per_token = g.gain / (tokens / 1e6) if tokens else None
        per_minute = g.gain / (seconds / 60) if seconds else None
        summary.append(
            f"| {run.experiment} | {g.rate_a:.3f} → {g.rate_b:.3f} | {g.gain:+.3f} ({g.low:+.3f} to {g.high:+.3f}) "
            f"| {_fmt(per_token, '+.4f')} | {_fmt(per_minute, '+.4f')} | {seconds:.1f} |"
        )
    base = args.runs[args.baseline]
    theirs = per_item_pass(base.home, base.experiment, base.last_champion())
    paired = ["| run | its last champion | baseline's | difference (paired 95 %) | items |", "|---|---:|---:|---|---:|"]
    for run in args.runs:
        if run == base:
            continue
        mine = per_item_pass(run.home, run.experiment, run.last_champion())
        g = gain_on_shared_items(theirs, mine, base.experiment, run.experiment)
        if g is None:
            raise SystemExit(
                f"error: {run.experiment} and {base.experiment} share no eval items: give both one eval set"
            )
        interval = f"{g.gain:+.3f} ({g.low:+.3f} to {g.high:+.3f})"
        paired.append(f"| {run.experiment} | {g.rate_b:.3f} | {g.rate_a:.3f} | {interval} | {g.n_items} |")
    same_name = len({run.experiment for run in args.runs}) < len(args.runs)  # e.g. overlap on and off, two homes
    counts = {(f"{run.experiment} ({run.home})" if same_name else run.experiment): table_rows(run) for run in args.runs}
    rows = ["| table | " + " | ".join(counts) + " |", "|---|" + "---:|" * len(counts)]
    rows += [f"| {t} | " + " | ".join(f"{c[t]:,}" for c in counts.values()) + " |" for t in TABLES]
    print(
        "\n\n".join(
            ["\n".join(summary), f"Paired with {base.experiment}:\n\n" + "\n".join(paired), *tables, "\n".join(rows)]
        )
    )


if __name__ == "__main__":
    main()
