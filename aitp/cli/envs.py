"""`aitp tasks`, `aitp items`, `aitp score`: the reasoning environment from the shell, as JSONL."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

import typer

from aitp.cli.app import app
from aitp.errors import AitpError, BadInputError
from aitp.reasoning.groups import score_group
from aitp.reasoning.items import DEFAULT_EVAL_SIZE, Item, generate_items, parse_difficulty
from aitp.reasoning.tasks import list_tasks
from aitp.tokenizer import load_token_counter


@app.command("tasks")
def tasks_command() -> None:
    """List every reasoning-gym task: name, category, whether it has a curriculum."""
    for t in list_tasks():
        fields = [t.name, t.category, "curriculum" if t.has_curriculum else "no-curriculum"]
        if t.solution_checked:
            fields.append("solution-checked")
        print("\t".join(fields))


@app.command("items")
def items_command(
    task: str = typer.Option(..., help="reasoning-gym task name (see `aitp tasks`)."),
    n: int = typer.Option(10, help="Number of items."),
    seed: int = typer.Option(0, help="Base seed; split seeds are derived from it."),
    split: str = typer.Option("train", help="train or eval; train never repeats an eval question."),
    difficulty: str = typer.Option("none", help="none, random, or a curriculum level (0, 1, ...)."),
    eval_size: int = typer.Option(DEFAULT_EVAL_SIZE, help="Size of the eval set that train items avoid."),
) -> None:
    """Generate deterministic items as JSONL, each with the identity that regenerates it."""
    for item in generate_items(task, n, seed, split, parse_difficulty(difficulty), eval_size):
        print(json.dumps(item.to_dict(), default=str))


def _read_groups(stream: TextIO) -> Iterator[tuple[int, dict[str, Any]]]:
    number = 0
    try:
        for number, line in enumerate(stream, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise BadInputError(f"line {number}: not valid JSON ({exc.msg}): fix or remove that line") from None
            if not isinstance(record, dict):
                raise BadInputError(f'line {number}: expected a JSON object from `aitp items` plus "completions"')
            yield number, record
    except UnicodeDecodeError:
        raise BadInputError(f"line {number + 1}: not UTF-8 text: pass JSONL lines from `aitp items`") from None


def _score_record(record: dict[str, Any], max_token_length: int, count_tokens) -> dict[str, Any]:
    completions = record.get("completions")
    if not isinstance(completions, list) or not all(isinstance(c, str) for c in completions):
        raise BadInputError('missing or bad field "completions": add a list of completion strings')
    item = Item.from_dict(record)
    group = score_group(item, completions, max_token_length, count_tokens)
    return {
        **record,
        "scores": group.scores,
        "raw_scores": group.raw_scores,
        "lenient_scores": group.lenient_scores,
        "format_errors": group.format_errors,
        "extracted_answers": group.extracted_answers,
        "completion_tokens": group.completion_tokens,
    }


@app.command("score")
def score_command(
    input: Path | None = typer.Option(None, "--input", "-i", help="JSONL file; default stdin."),
    max_token_length: int = typer.Option(1024, help="Max completion tokens; the length penalty starts at 75%."),
    tokenizer: Path | None = typer.Option(None, help="Local HF tokenizer dir; default: the byte tokenizer."),
) -> None:
    """Score groups of completions: each line is an `aitp items` line plus "completions": [str, ...]."""
    if max_token_length <= 0:
        raise BadInputError(f"--max-token-length must be positive, got {max_token_length}")
    if input is not None and not input.is_file():
        what = "is a directory" if input.is_dir() else "does not exist"
        raise BadInputError(f"input file {input} {what}: pass an existing JSONL file")
    count_tokens = load_token_counter(tokenizer)
    stream = open(input, encoding="utf-8") if input is not None else sys.stdin
    with stream:
        for number, record in _read_groups(stream):
            try:
                scored = _score_record(record, max_token_length, count_tokens)
            except AitpError as exc:
                raise BadInputError(f"line {number}: {exc}") from exc
            sys.stdout.write(json.dumps(scored, default=str) + "\n")
            sys.stdout.flush()
