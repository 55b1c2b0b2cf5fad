"""Is a gain real? The loop's held-out pass rates per eval item, read from the lake and paired.

Both models answered the same fixed questions (the experiment's pinned eval set): this module finds
each model's per-item pass rates; `aitp.paired` owns the statistic computed over them.
"""

from __future__ import annotations

from pathlib import Path

from aitp.errors import AitpError
from aitp.evals import item_pass_rates
from aitp.paired import PairedGain, gain_on_shared_items


def per_item_pass(home: str | Path, experiment: str, model: str, eval_name: str | None = None) -> dict[str, float]:
    """Item id -> share of the model's eval samples that passed, over its evaluations (`aitp.evals`)."""
    return item_pass_rates(home, experiment, model, eval_name)


def paired_gain(
    home: str | Path, experiment: str, model_a: str, model_b: str, eval_name: str | None = None, n_boot: int = 10_000
) -> PairedGain:
    """The held-out gain of model b over model a, paired over the eval items both answered."""
    a, b = per_item_pass(home, experiment, model_a, eval_name), per_item_pass(home, experiment, model_b, eval_name)
    gain = gain_on_shared_items(a, b, model_a, model_b, n_boot)
    if gain is None:
        raise AitpError(
            f"models {model_a} and {model_b} share no evaluated items in experiment '{experiment}': "
            "evaluate both on the experiment's eval set first"
        )
    return gain


def champion_gain(home: str | Path, experiment: str) -> PairedGain:
    """The last champion over the first one (the warm start's), from the lake's `iterations` rows."""
    from aitp.lake import connect

    con = connect(home)
    try:
        champions = [
            r[0]
            for r in con.execute(
                """SELECT champion_model FROM iterations WHERE experiment = $e AND champion_model IS NOT NULL
                   ORDER BY iteration""",
                {"e": experiment},
            ).fetchall()
        ]
    finally:
        con.close()
    if not champions:
        raise AitpError(f"experiment '{experiment}' has no champion yet: run at least its first iteration")
    return paired_gain(home, experiment, champions[0], champions[-1])
