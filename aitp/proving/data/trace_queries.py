"""The lake queries that every kind of prover training data shares: train split only, re-checked by name.

The tactic examples (`aitp.proving.data.training_data`) and the goal critic's labels
(`aitp.proving.data.critic_data`) are both selected from the proof tables with SQL that may call
`aitp_split(theorem_id)`, the split recomputed from the theorem's name by the fixed hash; each row
that reaches training is checked once more in Python (`train_only`).
"""

from __future__ import annotations

from pathlib import Path

from aitp.errors import AitpError
from aitp.proving.data.theorem_set import split_of

TRAIN = "train"


class LeakageError(AitpError):
    """A valid- or test-split theorem reached training data: the lake holds mislabelled rows."""


def theorem_name(theorem_id: str) -> str:
    """The theorem's name out of a lake theorem id (`<set>:<name>`)."""
    return theorem_id.split(":", 1)[1] if ":" in theorem_id else theorem_id


def query_traces(home: str | Path, sql: str, experiment: str, up_to: int, **params: object) -> list[tuple]:
    """Rows of `sql` over the lake, with `$experiment`, `$up_to` and `aitp_split()` bound."""
    return query_lake(home, sql, experiment=experiment, up_to=up_to, **params)


def query_lake(home: str | Path, sql: str, **params: object) -> list[tuple]:
    """Rows of `sql` over the lake, with `aitp_split()` and the named parameters bound."""
    from aitp.lake import connect

    con = connect(home)
    try:
        con.create_function("aitp_split", lambda tid: split_of(theorem_name(tid)), ["VARCHAR"], "VARCHAR")
        return con.execute(sql, params or None).fetchall()
    finally:
        con.close()


def train_only(name: str) -> str:
    """`name`, or a LeakageError when it is not a train-split theorem (the SQL already filters: a guard's guard)."""
    if split_of(name) != TRAIN:
        raise LeakageError(f"theorem '{name}' of split {split_of(name)} reached training data: rerun the selection")
    return name
