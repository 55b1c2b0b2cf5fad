"""`aitp prove`: run proof search on a theorem set and write the traces; `aitp prove-theorems` lists a set."""

from __future__ import annotations

import json
import re
from pathlib import Path

import typer

from aitp.cli.app import app
from aitp.errors import BadInputError
from aitp.home import resolve_home
from aitp.proving.backends import BACKENDS, backend_available, open_env
from aitp.proving.data.theorems import TheoremSet, load_theorem_set, split_of
from aitp.proving.data.traces import merge_rows, trace_rows, write_traces
from aitp.proving.errors import ProverUnavailableError, UnknownTheoremError
from aitp.proving.search import Budget, SearchConfig, make_search


@app.command("prove")
def prove_command(
    backend: str = typer.Option("coq", help="Prover: coq, hol-light or leandojo."),
    theorems: str | None = typer.Option(None, help="Theorem set: coq-stdlib, hol-core or a JSONL path."),
    split: str = typer.Option("test", help="train, valid, test or all."),
    name: list[str] = typer.Option(None, "--name", help="Prove only this theorem (repeatable)."),
    limit: int = typer.Option(10, help="At most this many theorems (0: all of the split)."),
    search: str = typer.Option("bestfs", help="bestfs, bfs, htps, fringe or updown."),
    budget_expansions: int = typer.Option(64, help="Goals expanded per theorem."),
    budget_prover_seconds: float = typer.Option(60.0, help="Prover seconds per theorem."),
    budget_wall_seconds: float = typer.Option(300.0, help="Wall seconds per theorem."),
    tactics_per_goal: int = typer.Option(16, help="Tactics tried per expanded goal."),
    batch_size: int = typer.Option(4, help="Goals per policy call."),
    tactic_timeout: float = typer.Option(5.0, help="Seconds before a tactic is interrupted."),
    exploration: float = typer.Option(1.0, help="HTPS exploration constant."),
    tactics: str | None = typer.Option(None, help="Comma-separated subset of the fixed tactic set."),
    experiment: str = typer.Option("prove", help="Experiment (lake partition)."),
    iteration: int = typer.Option(0, help="Iteration (lake partition)."),
    home: Path | None = typer.Option(None, help="aitp home; default $AITP_HOME or ./data."),
    traces: bool = typer.Option(True, help="Write proof_nodes, proof_edges and proofs."),
) -> None:
    """Search proofs with the fixed-tactic policy; print proved/attempted and write the traces."""
    config = SearchConfig(
        budget=Budget(budget_expansions, budget_prover_seconds, budget_wall_seconds),
        tactics_per_goal=tactics_per_goal,
        batch_size=batch_size,
        tactic_timeout=tactic_timeout,
        exploration=exploration,
    )
    searcher = make_search(search, config)
    ok, why = backend_available(backend)
    if not ok:
        raise ProverUnavailableError(f"backend '{backend}' is unavailable: {why}")
    set_name = theorems or BACKENDS[backend].default_theorem_set
    if set_name is None:
        raise BadInputError(f"backend '{backend}' has no built-in theorem set: pass --theorems FILE.jsonl")
    if experiment and not re.fullmatch(r"[A-Za-z0-9_.-]{1,128}", experiment):
        raise BadInputError(f"bad experiment name '{experiment}': use letters, digits, '_', '-', '.'")
    library = _theorem_set(set_name, home)
    if library.backend != backend:
        raise BadInputError(
            f"theorem set '{set_name}' is for {library.backend}, not {backend}: pass --backend {library.backend}"
        )
    chosen = [library.get(n) for n in name] if name else library.split(split)
    if not name and limit > 0:
        chosen = chosen[:limit]
    if not chosen:
        raise UnknownTheoremError(f"no theorems in split '{split}' of '{set_name}'")
    from aitp.proving.models.fixed_policy import FixedTacticPolicy  # torch: only when proving

    policy = FixedTacticPolicy(backend, library, tactics=[t.strip() for t in tactics.split(",")] if tactics else None)

    parts, proved = [], 0
    with open_env(backend, tactic_timeout=tactic_timeout) as env:
        env.set_premises(library.premise_map())
        for theorem in chosen:
            result = searcher.run(env, theorem, policy)
            proved += result.proved
            status = "proved" if result.proved else "failed"
            print(
                f"{status}\t{theorem.name}\texpansions={result.expansions}\t"
                f"prover_s={result.prover_seconds:.2f}\twall_s={result.wall_seconds:.2f}\t{result.proof_text}"
            )
            parts.append(trace_rows(result, backend, experiment, iteration, split_of(theorem.name)))
    print(f"proved {proved}/{len(chosen)}\t{backend}\t{search}\t{set_name}:{split}")
    if traces:
        shard = re.sub(r"[^A-Za-z0-9_-]", "_", f"{backend}-{search}-{split}")[:64]
        where = write_traces(resolve_home(home), experiment, iteration, merge_rows(parts), shard)
        print(f"traces: {where}")


@app.command("prove-theorems")
def prove_theorems_command(
    theorems: str = typer.Option("coq-stdlib", help="Theorem set: coq-stdlib, hol-core or a JSONL path."),
    split: str = typer.Option("all", help="train, valid, test or all."),
    home: Path | None = typer.Option(None, help="aitp home; default $AITP_HOME or ./data."),
) -> None:
    """List a theorem set: name, split and statement, one per line."""
    library = _theorem_set(theorems, home)
    for theorem in library.split(split):
        print(f"{theorem.name}\t{split_of(theorem.name)}\t{theorem.statement}")


def _theorem_set(name: str, home: Path | None) -> TheoremSet:
    """A theorem set by name or JSONL path; a file that is not one fails in one line naming it."""
    try:
        return load_theorem_set(name, home)
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
        raise BadInputError(
            f"{name} is not a theorem set ({type(exc).__name__}): pass coq-stdlib, hol-core or a JSONL file written "
            "by aitp (a header line, then one theorem per line)"
        ) from None
