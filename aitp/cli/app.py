"""The typer application that every command module registers on, and its one-line error handling."""

from __future__ import annotations

import sys

import typer

from aitp.errors import AitpError

app = typer.Typer(
    name="aitp",
    help="aitp: eval -> filter -> train -> promote, for verifiable reasoning and theorem proving.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def fail(message: str, code: int = 2) -> None:
    """Print a one-line error to stderr and exit non-zero."""
    one_line = " ".join(str(message).split())
    print(f"error: {one_line}", file=sys.stderr)
    raise SystemExit(code)


def run_app() -> None:
    """Run the CLI, turning user-facing errors into one line on stderr and a non-zero exit."""
    try:
        app()
    except AitpError as exc:
        fail(str(exc))
