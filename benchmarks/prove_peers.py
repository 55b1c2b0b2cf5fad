"""The provers a user would pick instead of the learned one, on the loop's own evaluation set, at one wall-clock budget.

    python benchmarks/prove_peers.py --split valid --limit 200 --budget 20 \
        --provers coq-auto,sauto,hammer,portfolio [--offset K] \
        [--model HOME:EXPERIMENT[:ALIAS|:VERSION]]... [--closing TACTIC:SECONDS[:MAX_DEPTH]]... \
        [--workers N] [--out DIR [--resume]]

The theorems are `--limit` theorems of the split of the Coq loop's theorem set (`configs/prove-coq.yaml`) from the
`--offset`-th on, in set order (`--offset 100 --limit 200`: test theorems 101-300), each stated in its own library
context by `CoqEnv.open` under the one premise rule of every prover (`aitp.proving.coq.hints`: the lemma, its
auxiliaries and everything stated after it hidden from hints and from CoqHammer's premise search, and refused
where a tactic cites them). Every prover gets the same wall-clock budget per theorem (opening the theorem is not
counted: it is the same for all), and every proof is re-checked by `CoqEnv.check_proof`, which applies the rule
again and refuses a proof that depends on the lemma itself. A `hammer` proof is its printed reconstruction.

- `coq-auto`: Coq's own automation, `auto`, `eauto`, `lia`, `intuition`, `firstorder`, `intros; lia` in turn;
- `sauto`: CoqHammer's own proof search, no external prover;
- `hammer`: CoqHammer's `hammer` with every ATP installed (E, and cvc5 as `cvc4`), its ATP limit half the budget
  and its reconstruction limit a quarter (`aitp.proving.coq.hammer.session_sentences`);
- `portfolio`: the three above one after another inside the same budget, as a user chains them: Coq's automation
  and `sauto` first (each fails within a second or two where it fails), `hammer` with what is left;
- each `--model`, named `EXPERIMENT:ALIAS` or `EXPERIMENT:VERSION` in the table: a registered prover model of a
  loop (its champion unless an alias or version is named: version 1 of a loop that starts untrained is the
  untrained models), searched at its experiment's evaluation settings
  (search, tactics per goal, tactic timeout, CoqHammer's tactics and closing tactics where the experiment had
  them) but with the budget as its only limit (wall clock and prover seconds; no cap on expansions; a search
  that runs out of goals starts again asking for twice the tactics per goal), `--workers` searches at once
  sharing the model, after the peers, one model after another;
- with `--closing` (the syntax of `aitp prove --closing`), each model a second time with those closing tactics instead
  of its experiment's (`--closing sauto:2 --closing hammer:10:0`: CoqHammer's `hammer` on the theorem's own goal
  before the model's tactics): the ablation of a closing tactic on the same theorems at the same budget, one run.

Prints a markdown table (proved, 95 % Wilson interval, median seconds of the proofs) and every pair's paired
difference with its bootstrap 95 % interval; writes one JSON line per (theorem, prover) under `--out`, after every
chunk of theorems, so `--resume` (same arguments) goes on from what a stopped run measured instead of starting over.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import asdict, dataclass
from itertools import combinations
from multiprocessing import get_context
from pathlib import Path

import numpy as np

from aitp.atomic import publish_jsonl
from aitp.loop.registered_prover import RegisteredProver
from aitp.paired import paired_bootstrap, wilson
from aitp.proving.config import loop_proving
from aitp.proving.data.theorem_set import TheoremSet
from aitp.proving.env import ProofStep, Theorem
from aitp.proving.search.base import ClosingTactic

COQ_AUTO = ["auto", "eauto", "lia", "intuition", "firstorder", "intros; lia"]
PEER_TACTICS = {
    "coq-auto": COQ_AUTO,
    "sauto": ["sauto"],
    "hammer": ["hammer"],
    "portfolio": [*COQ_AUTO, "sauto", "hammer"],
}
CHEAP_SHARE = 0.25  # of the budget: the most any tactic before the portfolio's `hammer` may take
RULE_REFUSALS = ("rejected: cites what is not stated before", "proof depends on the theorem being proved")
UNBOUNDED_EXPANSIONS = 1_000_000  # the model, like every peer, is stopped by the wall clock alone
CHUNK = 5  # theorems per task: one prover session each, so long hammer runs spread over the workers


@dataclass
class Attempt:
    """One prover on one theorem: whether a re-checked proof was found, how long the search took, and why."""

    theorem: str
    prover: str
    proved: bool
    seconds: float
    proof: str
    check: str


def try_peer(env, theorem: Theorem, prover: str, budget: float) -> Attempt:
    """Run a peer's tactics on the theorem's root goal until one proves it or the budget is spent; re-check it."""
    goal = env.open(theorem)
    start, proof, note = time.perf_counter(), "", "not proved"
    tactics = PEER_TACTICS[prover]
    for tactic in tactics:
        left = budget - (time.perf_counter() - start)
        if left < 0.5:
            note = "budget spent"
            break
        cap = left if tactic == tactics[-1] else min(left, budget * CHEAP_SHARE)
        result = env.run_tactic(goal, tactic, timeout=cap)
        if result.outcome == "proved":
            proof = result.replay or tactic
            break
        note = f"{result.outcome}: {' '.join(result.error.split())[:160]}"
    seconds = time.perf_counter() - start
    if not proof:
        return Attempt(theorem.name, prover, False, seconds, "", note)
    check = env.check_proof(theorem, ProofStep(proof))
    return Attempt(theorem.name, prover, check.ok, seconds, proof, check.message)


def run_task(task: tuple[str, list[str], dict]) -> list[Attempt]:
    """One prover on a chunk of theorems, in one prover session of this worker process."""
    from aitp.proving.coq.env import CoqEnv
    from aitp.proving.data.theorems import load_theorem_set
    from aitp.proving.errors import ProverCrashedError, UnknownTheoremError

    prover, names, opts = task
    library = load_theorem_set(opts["theorems"], opts["home"])
    out = []
    with CoqEnv(tactic_timeout=opts["budget"], automation=prover != "coq-auto") as env:
        env.set_premises(library.premise_map())
        for name in names:
            try:
                out.append(try_peer(env, library.get(name), prover, opts["budget"]))
            except (UnknownTheoremError, ProverCrashedError) as exc:
                env.recover()
                out.append(Attempt(name, prover, False, 0.0, "", f"not opened: {' '.join(str(exc).split())[:160]}"))
    return out


def run_model(names: list[str], library: TheoremSet, opts: dict, label: str) -> list[Attempt]:
    """The registered prover model's search at its experiment's evaluation settings, the budget as its time limit.

    `searches` searches run at once sharing one batched tactic model (`aitp.proving.search.concurrent`), as the loop's
    evaluation runs them: as many prover sessions as the peers' worker processes, so every prover has the same
    cores, and a model on a GPU decodes for all of them.
    """
    from aitp.proving.coq.env import CoqEnv
    from aitp.proving.models.prover_models import load_prover_models
    from aitp.proving.search import Budget, SearchConfig, make_search
    from aitp.proving.search.concurrent import SharedTacticPolicy, search_concurrently

    models = load_prover_models(opts["checkpoint"], library)
    p = opts["proving"]
    budget = Budget(UNBOUNDED_EXPANSIONS, opts["budget"], opts["budget"])
    config = SearchConfig(
        budget=budget,
        tactics_per_goal=p.eval_tactics_per_goal,
        tactic_timeout=p.tactic_timeout,
        closing_tactics=tuple(p.closing_tactics),
        widen=True,
    )

    def session() -> CoqEnv:
        env = CoqEnv(tactic_timeout=p.tactic_timeout, automation=p.automation_tactics, hammer_timeout=p.hammer_timeout)
        env.set_premises(library.premise_map())
        return env

    policy = models.policy(library, automation=p.automation_tactics)
    warm_up(policy, opts["searches"], p.eval_tactics_per_goal)
    with SharedTacticPolicy(policy) as shared:
        outcome, figures = search_concurrently(
            session, [library.get(n) for n in names], lambda: make_search(p.search, config), shared, opts["searches"]
        )
    proofs = {
        r["theorem_id"].split(":", 1)[1]: r["proof_text"] for r in outcome.rows.get("proofs", []) if r["verified"]
    }
    print(
        f"{label}: {figures.theorems_per_minute:.1f} theorems/min, model busy {figures.model_busy_share:.0%}",
        flush=True,
    )
    return [
        Attempt(a.theorem, label, a.proved, a.wall_seconds, proofs.get(a.theorem, ""), a.outcome)
        for a in outcome.attempts
    ]


def warm_up(policy, searches: int, tactics: int) -> None:
    """Load and compile the model before any clock starts: the first searches must not pay for the decoder's
    warm-up (tens of seconds on a GPU) out of their budget, which the peers never pay."""
    from aitp.proving.env import Goal

    for batch in (1, searches):
        policy.suggest([Goal("⊢ forall n : nat, n + 0 = n", "warm-up")] * batch, tactics)


def table(attempts: list[Attempt], provers: list[str], theorems: list[str], budget: float) -> str:
    """The markdown report: one row per prover and the union, then every pair's paired difference."""
    proved = {p: np.array([0.0] * len(theorems)) for p in provers}
    index = {t: i for i, t in enumerate(theorems)}
    times: dict[str, list[float]] = {p: [] for p in provers}
    refused = dict.fromkeys(provers, 0)
    for a in attempts:
        refused[a.prover] += a.check.startswith(RULE_REFUSALS)
        if a.proved:
            proved[a.prover][index[a.theorem]] = 1.0
            times[a.prover].append(a.seconds)
    n = len(theorems)
    lines = [
        "| prover | proved | 95 % (Wilson) | median s of proofs | proofs refused by the premise rule |",
        "|---|---:|---|---:|---:|",
    ]
    for p in provers:
        k = int(proved[p].sum())
        low, high = wilson(k, n)
        median = f"{statistics.median(times[p]):.2f}" if times[p] else "-"
        row = f"| {p} ({budget:g} s cap) | {k}/{n} | {100 * low:.1f}–{100 * high:.1f} % | {median} | {refused[p]} |"
        lines.append(row)
    union = np.max(np.stack([proved[p] for p in provers]), axis=0)
    lines.append(f"| union of the above | {int(union.sum())}/{n} | | | |")
    lines += [
        "",
        "| b − a (paired, same theorems) | difference | 95 % (bootstrap) | only a | only b |",
        "|---|---:|---|---:|---:|",
    ]
    for a, b in combinations(provers, 2):
        gain, low, high = paired_bootstrap(proved[a], proved[b])
        only_a = int(((proved[a] == 1) & (proved[b] == 0)).sum())
        only_b = int(((proved[b] == 1) & (proved[a] == 0)).sum())
        lines.append(f"| {b} − {a} | {gain:+.3f} | {low:+.3f} to {high:+.3f} | {only_a} | {only_b} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", choices=("valid", "test"), default="valid")
    parser.add_argument("--limit", type=int, default=200, help="N theorems of the split, in set order")
    parser.add_argument("--offset", type=int, default=0, help="skip the split's first K theorems (held-out ranges)")
    parser.add_argument("--budget", type=float, default=20.0, help="wall-clock seconds per theorem, every prover")
    parser.add_argument(
        "--provers", default="coq-auto,sauto,hammer,portfolio", help=f"comma-separated: {','.join(PEER_TACTICS)}"
    )
    parser.add_argument(
        "--model",
        action="append",
        default=[],
        help="HOME:EXPERIMENT[:ALIAS|:VERSION]: also a registered prover model (repeatable)",
    )
    parser.add_argument(
        "--closing",
        action="append",
        default=[],
        help="TACTIC:SECONDS[:MAX_DEPTH]: also each model with these closing tactics instead of its own (repeatable)",
    )
    parser.add_argument("--workers", type=int, default=2, help="processes, one prover session each")
    parser.add_argument("--home", default=None, help="aitp home holding the theorem set cache (default ./data)")
    parser.add_argument("--out", type=Path, default=None, help="write attempts.jsonl and table.md here")
    parser.add_argument("--resume", action="store_true", help="keep the attempts already under --out, run the rest")
    args = parser.parse_args()
    if args.resume and args.out is None:
        raise SystemExit("error: --resume goes on from --out DIR: pass the --out of the stopped run")
    provers = [p.strip() for p in args.provers.split(",") if p.strip()]
    unknown = [p for p in provers if p not in PEER_TACTICS]
    if unknown:
        raise SystemExit(f"error: unknown prover {unknown[0]}: choose from {', '.join(PEER_TACTICS)}")
    from aitp.errors import AitpError
    from aitp.loop.registered_prover import registered_prover

    try:  # every spec refused before any prover runs
        models = [registered_prover(spec) for spec in args.model]
        models += [with_closing(model, args.closing) for model in models] if args.closing else []
    except (AitpError, ValueError) as exc:
        raise SystemExit(f"error: {exc}") from None
    from aitp.proving.data.theorems import load_theorem_set

    theorem_set = loop_proving("coq").theorem_set_name
    library = load_theorem_set(theorem_set, args.home)
    if args.offset < 0 or args.limit < 1:
        raise SystemExit("error: --offset must be >= 0 and --limit >= 1")
    theorems = [t.name for t in library.split(args.split)[args.offset : args.offset + args.limit]]
    opts = {"theorems": theorem_set, "home": args.home, "budget": args.budget}
    attempts = resumed_attempts(args, theorem_set, theorems) if args.resume else []
    done = {(a.theorem, a.prover) for a in attempts}
    tasks = [
        (p, chunk, opts)
        for p in provers
        for chunk in (theorems[i : i + CHUNK] for i in range(0, len(theorems), CHUNK))
        if any((t, p) not in done for t in chunk)
    ]
    keep_run_record(args, theorem_set, theorems)
    start = time.perf_counter()
    if tasks:  # `--provers ""`: the models alone, no peer processes started
        with get_context("spawn").Pool(args.workers) as pool:
            for chunk_attempts in pool.imap_unordered(run_task, tasks):
                fresh = {(a.theorem, a.prover) for a in chunk_attempts}  # a chunk is run again whole
                attempts = [a for a in attempts if (a.theorem, a.prover) not in fresh] + chunk_attempts
                save_attempts(args.out, attempts, theorems)
                print(
                    f"{len(attempts)}/{len(theorems) * len(provers)} attempts, {time.perf_counter() - start:.0f} s",
                    flush=True,
                )
    for model in models:  # after the peers, so each has the same cores to itself
        provers.append(model.label)
        if all((t, model.label) in done for t in theorems):
            continue  # measured before the run was stopped
        attempts = [a for a in attempts if a.prover != model.label]  # a model's searches are kept whole or not at all
        model_opts = opts | {"checkpoint": model.checkpoint, "proving": model.proving, "searches": args.workers}
        attempts.extend(run_model(theorems, library, model_opts, model.label))
        save_attempts(args.out, attempts, theorems)
    report = table(attempts, provers, theorems, args.budget)
    print(report)
    if args.out:
        (args.out / "table.md").write_text(report + "\n")


def with_closing(model: RegisteredProver, specs: list[str]) -> RegisteredProver:
    """The model searched with `specs` as its closing tactics instead of its experiment's, validated as a config is
    (a tactic the experiment's prover could not run is refused before anything runs)."""
    closing = [ClosingTactic.parse(spec) for spec in specs]
    proving = type(model.proving).model_validate(model.proving.model_dump() | {"closing_tactics": closing})
    label = f"{model.label} closing {','.join(c.spec() for c in closing)}"
    return RegisteredProver(label, model.checkpoint, proving)


def run_record(args: argparse.Namespace, theorem_set: str, theorems: list[str]) -> dict:
    """What makes two runs' attempts the same measurement: a resumed run must match it exactly."""
    return {"theorem_set": theorem_set, "theorems": theorems, "budget": args.budget, "workers": args.workers}


def resumed_attempts(args: argparse.Namespace, theorem_set: str, theorems: list[str]) -> list[Attempt]:
    """The attempts a stopped run left under `--out`, refused where that run measured something else."""
    record, path = args.out / "run.json", args.out / "attempts.jsonl"
    if not record.exists():
        return []
    if json.loads(record.read_text()) != run_record(args, theorem_set, theorems):
        raise SystemExit(
            f"error: {args.out} holds a run of other theorems, budget or workers: pass those, or another --out"
        )
    lines = path.read_text().splitlines() if path.exists() else []
    return [Attempt(**json.loads(line)) for line in lines if line.strip()]


def keep_run_record(args: argparse.Namespace, theorem_set: str, theorems: list[str]) -> None:
    """Record what this run measures, so `--resume` can tell its attempts from another run's."""
    if args.out is None:
        return
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.resume and (args.out / "attempts.jsonl").exists():
        raise SystemExit(f"error: {args.out} already holds attempts: pass --resume to go on, or another --out")
    (args.out / "run.json").write_text(json.dumps(run_record(args, theorem_set, theorems)) + "\n")


def save_attempts(out: Path | None, attempts: list[Attempt], theorems: list[str]) -> None:
    """Write every attempt so far under `out` (after every chunk of a peer and after each model), so a stopped run
    keeps what it measured and `--resume` goes on from there."""
    if out is None:
        return
    out.mkdir(parents=True, exist_ok=True)
    rows = sorted(attempts, key=lambda a: (theorems.index(a.theorem), a.prover))
    publish_jsonl(out / "attempts.jsonl", (asdict(a) for a in rows))  # whole or not at all, if stopped mid-write


if __name__ == "__main__":
    main()
