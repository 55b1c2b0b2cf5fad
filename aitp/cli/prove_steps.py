"""`aitp prove-steps`: replay the train theorems' human proofs and commit their steps to the lake."""

from __future__ import annotations

import re
import time
from pathlib import Path

import typer

from aitp.cli.app import app
from aitp.errors import BadInputError
from aitp.home import resolve_home
from aitp.proving.coq.backend import COQ
from aitp.proving.coq.human_steps import Replay, human_step_rows, replay_theorems, write_human_steps
from aitp.proving.errors import ProverUnavailableError


@app.command("prove-steps")
def prove_steps_command(
    theorems: str = typer.Option("coq-stdlib", help="Coq theorem set: coq-stdlib or a JSONL path."),
    name: list[str] = typer.Option(None, "--name", help="Replay only this train theorem (repeatable)."),
    limit: int = typer.Option(0, help="At most this many train theorems, in library order (0: all)."),
    tactic_timeout: float = typer.Option(10.0, help="Seconds before one human tactic is interrupted."),
    experiment: str = typer.Option("human-steps", help="Experiment (lake partition) the tables are written to."),
    home: Path | None = typer.Option(None, help="aitp home; default $AITP_HOME or ./data."),
    quiet: bool = typer.Option(False, help="Print only the summary, not a line per theorem."),
) -> None:
    """Replay human proofs step by step; write the lake tables human_steps and human_replays."""
    from aitp.cli.prove import _theorem_set

    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}", experiment):
        raise BadInputError(f"bad experiment name '{experiment}': use letters, digits, '_', '-', '.'")
    if limit < 0:
        raise BadInputError(f"--limit {limit} is negative: pass 0 (all) or a positive count")
    ok, why = COQ.available()  # human proofs are replayed in Coq (`aitp.proving.coq.human_steps`)
    if not ok:
        raise ProverUnavailableError(f"backend '{COQ.name}' is unavailable: {why}")
    library = _theorem_set(theorems, home)
    if library.backend != COQ.name:
        raise BadInputError(f"theorem set '{theorems}' is for {library.backend}: pass a Coq set (coq-stdlib)")
    chosen = [library.get(n) for n in name] if name else library.split("train")
    if not name and limit > 0:
        chosen = chosen[:limit]

    def report(replay: Replay) -> None:
        if not quiet:
            print(f"{replay.status}\t{replay.theorem.name}\tsteps={len(replay.steps)}\t{replay.reason or ''}")

    start = time.perf_counter()
    replays = replay_theorems(chosen, tactic_timeout, library.premise_map(), report)
    rows = human_step_rows(replays, experiment)
    counts = {s: sum(r.status == s for r in replays) for s in ("complete", "partial", "failed")}
    steps = rows["human_steps"]
    allowlisted = sum(r["allowlisted"] for r in steps)
    print(
        f"replayed {len(replays)}: complete {counts['complete']}, partial {counts['partial']}, "
        f"failed {counts['failed']}; steps {len(steps)}, allowlisted {allowlisted}; "
        f"{time.perf_counter() - start:.1f} s"
    )
    shard = re.sub(r"[^A-Za-z0-9_-]", "_", Path(library.name).stem)[:64] or "steps"
    print(f"steps: {write_human_steps(resolve_home(home), rows, experiment, shard)}")
