"""`aitp report`: one self-contained HTML file of an experiment's iterations, promotions and pass rates."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from aitp.cli.app import app

HOME_HELP = "Home directory (default: $AITP_HOME, else ./data)."


def _aliases(home: Path, experiment: str, tracking_uri: str) -> dict[str, str] | None:
    """The registry's aliases, or None with a warning when the tracking server cannot be read."""
    from aitp.registry import Registry, RegistryError

    try:
        return Registry(home, tracking_uri).aliases(experiment)
    except RegistryError as exc:  # the lake is the source of truth: the report goes on without aliases
        print(f"warning: registry aliases left out ({' '.join(str(exc).split())})", file=sys.stderr)
        return None


@app.command("report")
def report_command(
    experiment: str = typer.Option(..., "--experiment", help="Experiment to report on."),
    home: str | None = typer.Option(None, "--home", help=HOME_HELP),
    out: Path | None = typer.Option(
        None, "--out", "-o", help="HTML file to write (default: <home>/reports/<experiment>.html)."
    ),
    tracking_uri: str | None = typer.Option(
        None, "--tracking-uri", help="MLflow tracking URI: add the registry's aliases when it is reachable."
    ),
) -> None:
    """Write an experiment's HTML report (plot embedded, no network needed to open it) and print its path."""
    from aitp.home import require_home, resolve_home
    from aitp.report import write_report

    require_home(home, object_store=False)  # a report only reads: a mistyped home is an error, not a new empty one
    root = resolve_home(home)
    aliases = _aliases(root, experiment, tracking_uri) if tracking_uri else None
    path = write_report(root, experiment, out or root / "reports" / f"{experiment}.html", aliases)
    print(path)
