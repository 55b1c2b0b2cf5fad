"""The typer application that every command module registers on, and its one-line error handling."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from aitp.errors import AitpError, BadInputError

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


def read_text(path: Path, option: str) -> str:
    """A UTF-8 text file named by `option`, or a one-line error saying what is wrong with it."""
    if not path.is_file():
        what = "is a directory" if path.is_dir() else "does not exist"
        raise BadInputError(f"{option} {path} {what}: pass an existing text file")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise BadInputError(f"{option} {path} is not UTF-8 text: pass a text file") from None


def run_app(args: list[str] | None = None) -> None:
    """Run the CLI, turning user-facing errors (bad options, AitpError) into one line on stderr and a non-zero exit."""
    try:
        code = app(args=args, prog_name="aitp", standalone_mode=False)
    except typer.TyperException as exc:  # click's usage errors: unknown options, wrong types, missing values
        if type(exc).__name__ == "NoArgsIsHelpError":  # `aitp lake` alone asks for the help
            typer.echo(exc.ctx.get_help())
            raise SystemExit(exc.exit_code) from None
        context = getattr(exc, "ctx", None)
        where = context.command_path if context is not None else "aitp"
        fail(f"{exc.format_message()} (see `{where} --help`)", exc.exit_code)
    except typer.Abort:
        fail("aborted", 1)
    except AitpError as exc:
        fail(str(exc))
    if isinstance(code, int) and code:  # `typer.Exit(code)` is returned, not raised, outside standalone mode
        raise SystemExit(code)
