"""`aitp prove`: run proof search on a theorem set and write the traces; `aitp prove-theorems` lists a set."""

from __future__ import annotations

import json
import re
from pathlib import Path

import typer

from aitp.cli.app import app
from aitp.errors import BadInputError
from aitp.home import resolve_home
from aitp.loop.registered_prover import RegisteredProver, registered_prover
from aitp.proving.backends import BACKENDS, backend_available, open_env
from aitp.proving.data.theorems import TheoremSet, load_theorem_set, split_of
from aitp.proving.data.traces import merge_rows, trace_rows, write_traces
from aitp.proving.errors import ProverUnavailableError, UnknownTheoremError
from aitp.proving.search import Budget, SearchConfig, make_search
from aitp.proving.search.base import ClosingTactic, SearchResult, TacticPolicy


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
    automation: bool = typer.Option(
        False, help="Coq: load CoqHammer, so its tactics (sauto, hammer...) join the tactic set, as in the loop."
    ),
    closing: list[str] = typer.Option(
        None,
        "--closing",
        help="TACTIC:SECONDS[:MAX_DEPTH], tried on every goal before the policy's, as the loop's closing_tactics "
        "(repeatable; e.g. --closing sauto:2 --closing hammer:10:0).",
    ),
    model: str | None = typer.Option(
        None,
        help="HOME:EXPERIMENT[:ALIAS|:VERSION] (default alias champion): search with this registered prover model "
        "instead of the fixed tactic set, with its experiment's CoqHammer and closing tactics (--automation adds "
        "CoqHammer, --closing replaces them).",
    ),
    experiment: str = typer.Option("prove", help="Experiment (lake partition)."),
    iteration: int = typer.Option(0, help="Iteration (lake partition)."),
    home: Path | None = typer.Option(None, help="aitp home; default $AITP_HOME or ./data."),
    traces: bool = typer.Option(True, help="Write proof_nodes, proof_edges and proofs."),
) -> None:
    """Search proofs with the fixed tactic set or a registered model, under the loop's premise rule; print
    proved/attempted and write the traces."""
    registered = _registered(model, backend, tactics)
    if registered is not None:
        automation = automation or registered.proving.automation_tactics
    closing_tactics = tuple(_closing_tactic(c, backend, automation) for c in closing or [])
    if registered is not None and not closing:
        closing_tactics = tuple(registered.proving.closing_tactics)
    config = SearchConfig(
        budget=Budget(budget_expansions, budget_prover_seconds, budget_wall_seconds),
        tactics_per_goal=tactics_per_goal,
        batch_size=batch_size,
        tactic_timeout=tactic_timeout,
        exploration=exploration,
        closing_tactics=closing_tactics,
    )
    if automation and not BACKENDS[backend].automation_tactics:
        raise BadInputError(f"--automation loads CoqHammer, which backend '{backend}' has not: use --backend coq")
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
    policy = _policy(registered, backend, library, tactics, automation)
    hammer = next((c.timeout for c in closing_tactics if c.tactic == "hammer"), tactic_timeout)
    options = {"automation": True, "hammer_timeout": hammer} if automation else {}

    from aitp.proving.learning import search_one  # the loop's promotion rule and lake: only once proving

    parts, proved, restarts = [], 0, 0
    with open_env(backend, tactic_timeout=tactic_timeout, **options) as env:
        env.set_premises(library.premise_map())
        for theorem in chosen:
            result = search_one(env, theorem, searcher, policy)
            proved, restarts = proved + result.proved, restarts + result.restarts
            status = "proved" if result.proved else "failed"
            died = f"prover_restarts={result.restarts}\t" if result.restarts else ""
            print(
                f"{status}\t{theorem.name}\texpansions={result.expansions}\t"
                f"prover_s={result.prover_seconds:.2f}\twall_s={result.wall_seconds:.2f}\t{died}{_outcome(result)}"
            )
            parts.append(trace_rows(result, backend, experiment, iteration, split_of(theorem.name)))
    splits = ",".join(sorted({split_of(t.name) for t in chosen}))  # `--name` picks from any split
    died = f"\tprover restarts: {restarts}" if restarts else ""
    print(f"proved {proved}/{len(chosen)}\t{backend}\t{search}\t{set_name}:{splits}{died}")
    if traces:
        shard = re.sub(r"[^A-Za-z0-9_-]", "_", f"{backend}-{search}-{split}")[:64]
        where = write_traces(resolve_home(home), experiment, iteration, merge_rows(parts), shard)
        print(f"traces: {where}")


def _outcome(result: SearchResult) -> str:
    """A proved theorem's proof, or why the search failed: the re-check's refusal, or how the search stopped."""
    return result.proof_text if result.proved else f"reason: {result.outcome}"


def _registered(model: str | None, backend: str, tactics: str | None) -> RegisteredProver | None:
    """The registered model `--model` names, refused in one line where it cannot prove on `backend`."""
    if model is None:
        return None
    if tactics:
        raise BadInputError("--tactics picks from the fixed tactic set, which a --model replaces: pass one of them")
    registered = registered_prover(model)
    if registered.proving.backend != backend:
        raise BadInputError(
            f"--model {model} proves with {registered.proving.backend}: pass --backend {registered.proving.backend}"
        )
    return registered


def _policy(
    registered: RegisteredProver | None, backend: str, library: TheoremSet, tactics: str | None, automation: bool
) -> TacticPolicy:
    """The registered model's policy as its experiment evaluates with it, else the fixed tactic set."""
    from aitp.proving.models.fixed_policy import FixedTacticPolicy  # torch: only when proving
    from aitp.proving.models.prover_models import load_prover_models

    if registered is not None:
        return load_prover_models(registered.checkpoint, library).policy(library, automation=automation)
    chosen_tactics = [t.strip() for t in tactics.split(",")] if tactics else None
    return FixedTacticPolicy(backend, library, tactics=chosen_tactics, automation=automation)


def _closing_tactic(spec: str, backend: str, automation: bool) -> ClosingTactic:
    """`TACTIC:SECONDS[:MAX_DEPTH]` as a closing tactic, refused in one line where it could not run."""
    from aitp.proving.errors import TacticRejectedError

    try:
        closing = ClosingTactic.parse(spec)
    except ValueError as exc:
        raise BadInputError(f"--closing {exc}") from None
    try:
        BACKENDS[backend].validate_tactic(closing.tactic, automation)
    except TacticRejectedError as exc:
        raise BadInputError(f"--closing {spec!r} is refused: {exc}") from None
    return closing


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
