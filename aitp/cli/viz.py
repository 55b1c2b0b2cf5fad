"""`aitp viz proof`: a proof search from the lake as one self-contained HTML page."""

from __future__ import annotations

from pathlib import Path

import typer

from aitp.cli.app import app

viz_app = typer.Typer(help="Pages that show what the loop recorded.", no_args_is_help=True)
app.add_typer(viz_app, name="viz")


@viz_app.command("proof")
def proof_command(
    experiment: str = typer.Option(..., help="Experiment whose proof traces to read."),
    theorem: str = typer.Option(..., help="Theorem: its id (coq:Name), full name or last name component."),
    search_id: str | None = typer.Option(None, help="Which search, when the theorem was searched several times."),
    home: Path | None = typer.Option(None, help="aitp home; default $AITP_HOME or ./data."),
    out: Path | None = typer.Option(None, help="HTML file to write (default proof-<theorem>-<search id>.html)."),
) -> None:
    """Write an HTML page that replays one proof search step by step: tree, goals, tactics, proof."""
    from aitp.home import require_home
    from aitp.viz.proof import write_proof_page

    require_home(home)
    path, trace = write_proof_page(home, experiment, theorem, out, search_id)
    status = "proved" if trace.proof is not None else "not proved"
    print(f"{path}\t{trace.theorem_id}\t{len(trace.nodes)} goals\t{len(trace.edges)} tactics\t{status}")
