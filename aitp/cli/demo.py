"""`aitp demo`: a short tour of the reasoning environment (items, the prompt, strict and lenient scores)."""

from __future__ import annotations

import typer
from rich.console import Console
from rich.table import Table

from aitp.cli.app import app
from aitp.reasoning.groups import score_group
from aitp.reasoning.items import generate_items
from aitp.tokenizer import load_token_counter

DEMO_TASKS = ("basic_arithmetic", "spell_backward", "gcd", "leg_counting", "sudoku")


@app.command("demo")
def demo_command(seed: int = typer.Option(0, help="Base seed of the items.")) -> None:
    """Generate an item of five tasks and score a correct, an untagged and a double-tagged answer."""
    console = Console()
    table = Table(title="aitp: reasoning-gym items scored with the seed's rules")
    for column in ("task", "question", "gold", "completion", "strict", "lenient", "format error"):
        table.add_column(column, overflow="fold")
    count = load_token_counter(None)
    for task in DEMO_TASKS:
        item = generate_items(task, 1, seed, split="eval")[0]
        gold = item.answer or ""
        completions = [
            f"<think>working it out</think><answer>{gold}</answer>",
            gold,
            f"<answer>{gold}</answer> <answer>{gold}</answer>",
            f"<ANSWER> {gold.upper()}. </ANSWER>",
        ]
        group = score_group(item, completions, 1024, count)
        for i, completion in enumerate(completions):
            table.add_row(
                task if i == 0 else "",
                item.question[:60] + ("..." if len(item.question) > 60 else "") if i == 0 else "",
                gold[:20] if i == 0 else "",
                completion[:40],
                f"{group.raw_scores[i]:.2f}",
                f"{group.lenient_scores[i]:.2f}",
                group.format_errors[i] or "",
            )
    console.print(table)
