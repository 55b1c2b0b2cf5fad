"""Rollouts in the seed's dump format (atropos-jsonl), so tools that read those dumps read our traces.

One JSON object per line and per group: `{"item_id": str, "rollouts": [{"conversation":
[{"role", "content"}…], "score": float}]}`. `item_id` is our stable item id; a group is the rows
of one (iteration, item_id, group_id); the conversation is the stored prompt plus the completion
as the assistant's turn; the score is `final_score` (else `raw_score`, else 0.0).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from aitp.errors import BadInputError
from aitp.lake.catalog import as_lake, require_partition
from aitp.lake.storage import Lake
from aitp.lake.views import connect

FORMATS = ("atropos-jsonl",)
ROLES = frozenset({"system", "user", "assistant", "tool"})


@dataclass
class ExportStats:
    """What an export wrote."""

    groups: int = 0
    rollouts: int = 0


def _messages(prompt: str | None) -> list[dict[str, str]]:
    if not prompt:
        return []
    try:
        messages = json.loads(prompt)
    except json.JSONDecodeError:
        return [{"role": "user", "content": prompt}]
    if isinstance(messages, str):
        return [{"role": "user", "content": messages}]
    return [{"role": str(m["role"]), "content": str(m["content"])} for m in messages]


def atropos_records(
    home: str | Path | Lake | None, experiment: str, iteration: int | None = None, kept_only: bool = False
) -> Iterator[dict[str, Any]]:
    """One seed-format record per group of the experiment (and iteration), in a stable order."""
    lake = as_lake(home)
    require_partition(lake, "rollouts", experiment, iteration)
    con = connect(lake)
    where = ["experiment = $experiment"] + (["iteration = $iteration"] if iteration is not None else [])
    where += ["group_kept"] if kept_only else []
    params: dict[str, Any] = {"experiment": experiment}
    if iteration is not None:
        params["iteration"] = iteration
    cursor = con.execute(
        "SELECT iteration, item_id, group_id, prompt, completion,"
        " coalesce(final_score, raw_score, 0.0) AS score FROM rollouts"
        f" WHERE {' AND '.join(where)} ORDER BY iteration, item_id, group_id, sample_index",
        params,
    )
    key, record = None, None
    while batch := cursor.fetchmany(5000):
        for it, item_id, group_id, prompt, completion, score in batch:
            if (it, item_id, group_id) != key:
                if record is not None:
                    yield record
                key, record = (it, item_id, group_id), {"item_id": item_id, "rollouts": []}
            conversation = _messages(prompt) + [{"role": "assistant", "content": completion or ""}]
            record["rollouts"].append({"conversation": conversation, "score": float(score)})
    if record is not None:
        yield record


def export_atropos(
    home: str | Path | Lake | None,
    experiment: str,
    out: TextIO,
    iteration: int | None = None,
    kept_only: bool = False,
) -> ExportStats:
    """Write the experiment's groups to `out` as atropos-jsonl; each line is validated first."""
    stats = ExportStats()
    for record in atropos_records(home, experiment, iteration, kept_only):
        validate_atropos_record(record)
        out.write(json.dumps(record, ensure_ascii=False) + "\n")
        stats.groups += 1
        stats.rollouts += len(record["rollouts"])
    return stats


def validate_atropos_record(record: Any) -> None:
    """Raise BadInputError unless `record` is one line of the seed's dump format."""

    def bad(why: str) -> BadInputError:
        return BadInputError(f"not an atropos-jsonl record: {why}")

    if not isinstance(record, dict) or set(record) != {"item_id", "rollouts"}:
        raise bad("want exactly the keys item_id, rollouts")
    if not isinstance(record["item_id"], str) or not record["item_id"]:
        raise bad("item_id must be a non-empty string")
    rollouts = record["rollouts"]
    if not isinstance(rollouts, list) or not rollouts:
        raise bad("rollouts must be a non-empty list")
    for rollout in rollouts:
        if not isinstance(rollout, dict) or set(rollout) != {"conversation", "score"}:
            raise bad("each rollout wants exactly the keys conversation, score")
        score = rollout["score"]
        if isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score):
            raise bad(f"score must be a finite number, got {score!r}")
        conversation = rollout["conversation"]
        if not isinstance(conversation, list) or not conversation:
            raise bad("conversation must be a non-empty list of messages")
        for message in conversation:
            if not isinstance(message, dict) or set(message) != {"role", "content"}:
                raise bad("each message wants exactly the keys role, content")
            if message["role"] not in ROLES or not isinstance(message["content"], str):
                raise bad(f"bad message role {message['role']!r} or non-string content")
        if conversation[-1]["role"] != "assistant":
            raise bad("a conversation must end with the assistant's completion")
