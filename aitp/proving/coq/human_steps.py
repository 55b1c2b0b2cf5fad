"""Human proof steps: each train theorem's library proof replayed in Coq, one (goal, tactic, goals) row a tactic.

Search learns from its own few proofs; the library's human proofs are the supervised warm start the
tactic generator needs (ReProver, Proverbot9001). A theorem is opened as `CoqEnv` opens it for search
(its module required, its enclosing modules imported so the script's short names resolve, itself and
later lemmas hidden from the hint databases), then its script runs sentence by sentence at the tip:

- bullets (`-`, `+`, `*`, `--`...) and braces (`{`, `}`, `2: {`) are structure: executed, never steps;
- a tactic sentence, `;`-chains and `...` included, is one step: the first focused goal before it, and
  the goals it left (the focused goals after it less the untouched siblings);
- `Proof with T` is executed (its `...` sentences need it), `Proof using` dropped (no section here),
  `Proof t` (a proof term) is recorded as unsupported;
- a command between tactics (`Opaque f.`, `Unshelve.`) is executed but is no step.

Valid and test theorems are never replayed: `replay_theorems` and `human_step_rows` refuse them. A
replay that fails (a Coq error at step k, a timeout, an unsupported sentence, goals left at the end)
keeps the steps before it and records why in `human_replays`.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from aitp.proving.coq.env import CoqEnv
from aitp.proving.coq.human_context import LemmaContext, lemma_context, section_intros
from aitp.proving.coq.protocol import CoqError, CoqTimeout
from aitp.proving.coq.tactics import parse_coq_tactic
from aitp.proving.data.theorem_set import split_of
from aitp.proving.env import Theorem
from aitp.proving.errors import ProverCrashedError, TacticRejectedError, UnknownTheoremError

HUMAN_TABLES = ("human_steps", "human_replays")
_SENTENCE = re.compile(r"\S.*?(?:\.\.\.|(?<!\.)\.)(?=\s|$)", re.S)
_STRUCTURE = re.compile(r"^(?:(?:\d+|\[[^\]]+\])\s*:\s*\{|\{|\}|-+|\++|\*+)(?=\s|$)")
_END = re.compile(r"^(?:Qed|Defined|Admitted|Abort|Save)\b")
# Commands a script may hold between tactics: run, but not steps. Declarations mean the extraction ran on.
_COMMANDS = re.compile(
    r"^(?:Opaque|Transparent|Hint|Local|Global|Set|Unset|Check|Print|Show|Focus|Unfocus|Unshelve|Fail|Arguments)\b"
)
_DECLARATIONS = re.compile(r"^(?:#\[|[A-Z][a-z]+(?:\s|$))")
_SELECTOR = re.compile(r"^\s*(?:(\d+)|all|par|\d+\s*-\s*\d+(?:\s*,\s*\d+(?:\s*-\s*\d+)?)*|\[[^\]]+\])\s*:(?!=)")


@dataclass(frozen=True)
class Script:
    """A human proof as (kind, text) sentences, kind structure, tactic, command or unsupported; its `Proof with`."""

    sentences: list[tuple[str, str]]
    proof_with: str | None = None


@dataclass
class Replay:
    """What replaying one theorem's script gave: its step rows and how far it got."""

    theorem: Theorem
    steps: list[dict] = field(default_factory=list)
    status: str = "complete"  # complete: no goal left; partial: steps, then a failure; failed: no step
    reason: str | None = None
    failed_sentence: str | None = None
    n_sentences: int = 0
    seconds: float = 0.0


def parse_script(proof: str) -> Script:
    """Split a `Theorem.proof` text into structure, tactic and command sentences, stopping at its `Qed`."""
    out: list[tuple[str, str]] = []
    proof_with, last = None, 0
    for match in _SENTENCE.finditer(proof):
        last, text = match.end(), match.group()
        while (m := _STRUCTURE.match(text)) is not None:
            out.append(("structure", m.group()))
            text = text[m.end() :].lstrip()
        if _END.match(text):
            return Script(out, proof_with)  # the extraction may run past a `} Qed.` into the next lemma
        if text in ("", ".", "Proof."):
            continue
        if text.startswith("Proof ") and not out:
            head, _, with_tactic = text[:-1].partition(" with ")
            if with_tactic:
                proof_with = with_tactic.strip()
            elif not head.startswith("Proof using "):
                out.append(("unsupported", f"a proof term: {text}"))
            continue
        kind = "command" if _COMMANDS.match(text) else "unsupported" if _DECLARATIONS.match(text) else "tactic"
        out.append((kind, text))
    out.extend(("structure", token) for token in proof[last:].split() if _STRUCTURE.fullmatch(token))
    return Script(out, proof_with)


def _selected(tactic: str) -> int | None:
    """The goal a sentence acts on: index into the focused goals (0 unless `N:`), None for `all:` and ranges."""
    m = _SELECTOR.match(tactic)
    if m is None:
        return 0
    return int(m.group(1)) - 1 if m.group(1) else None


def _imports(theorem: Theorem) -> tuple[str, ...]:
    """`Import` of the theorem's file and of each module around it, so the script's short names resolve."""
    if not theorem.module or not theorem.name.startswith(theorem.module + "."):
        return ()
    inner = theorem.name[len(theorem.module) + 1 :].split(".")[:-1]
    paths = [".".join([theorem.module, *inner[:i]]) for i in range(len(inner) + 1)]
    return tuple(f"Import {p}." for p in paths)


class HumanReplayEnv(CoqEnv):
    """A Coq session that replays human scripts at the document tip, reusing `CoqEnv`'s opening and recovery."""

    def __init__(self, tactic_timeout: float = 10.0) -> None:
        super().__init__(tactic_timeout, check_dependencies=False)
        self._refused: set[tuple[str, str]] = set()  # (module, context sentence) Coq refused

    def open_script(self, theorem: Theorem, context: LemmaContext, tail: tuple[str, ...]) -> None:
        """Make the tip the theorem's goal in its file's context, then `tail`; CoqError if Coq refuses it.

        A context sentence Coq refuses here (a name relative to a module this session lacks) is dropped,
        remembered per module, and the opening retried without it.
        """
        opening = self._opening(theorem)
        n = 1 if theorem.module else 0
        optional = [*context.imports, *_imports(theorem), *context.locals]
        optional = [s for s in optional if (theorem.module, s) not in self._refused]
        while True:
            try:
                self._goto((*opening[:n], *optional, *opening[n:], *tail))
                return
            except CoqError:
                failed = len(self._doc) - n  # `_goto` runs the path in order and keeps what succeeded
                if not 0 <= failed < len(optional):
                    raise
                self._refused.add((theorem.module, optional.pop(failed)))

    def execute(self, sentence: str, timeout: float) -> None:
        """Run one sentence at the tip (rolled back on failure): CoqError, CoqTimeout or ProverCrashedError."""
        self._exec(sentence, timeout)

    def focused(self) -> tuple[list[str], int]:
        """The focused goals' texts at the tip, and how many goals remain anywhere (background, shelf)."""
        goals = self._coq.goals()
        if goals is None:
            return [], 0
        texts = [g.text() for g in goals.foreground]
        return texts, len(texts) + goals.background + goals.shelved + goals.given_up


def replay_theorem(env: HumanReplayEnv, theorem: Theorem, tactic_timeout: float = 10.0) -> Replay:
    """Replay one theorem's human script and return its steps, or where and why the replay stopped."""
    start = time.perf_counter()
    script = parse_script(theorem.proof)
    replay = Replay(theorem, n_sentences=len(script.sentences))
    forbidden = frozenset({theorem.name, theorem.name.rsplit(".", 1)[-1]})
    context = lemma_context(theorem.name, theorem.source, theorem.module)
    tail = (f"Proof with {script.proof_with}.",) if script.proof_with else ()
    stage = "open"
    try:
        env.open_script(theorem, context, tail)
        for sentence in section_intros(context):
            try:  # a variable the lemma does not use was not closed over
                env.execute(sentence, tactic_timeout)
            except CoqError:
                pass
        if context.binders:
            env.execute(f"intros {' '.join(context.binders)}.", tactic_timeout)
        for kind, text in script.sentences:
            stage = text
            if kind == "unsupported":
                raise _Unsupported(f"unsupported sentence: {text[:80]}")
            if kind in ("structure", "command"):
                env.execute(text, tactic_timeout)
                continue
            before, _ = env.focused()
            index = _selected(text)
            if len(before) <= (index or 0):
                raise _Unsupported("no focused goal for the sentence (the script ended early?)")
            began = time.perf_counter()
            env.execute(f"Timeout {max(1, round(tactic_timeout))} {text}", tactic_timeout)
            after, _ = env.focused()
            if index is None:  # `all:` and ranges act on every focused goal
                goal, left = "\n\n".join(before), after
            else:  # the goals it left sit where its goal was, before the untouched siblings after it
                goal, left = before[index], after[index : index + len(after) - len(before) + 1]
            replay.steps.append(_step_row(theorem, len(replay.steps), goal, text, left, forbidden, began))
        stage = "end"
        _, remaining = env.focused()
        if remaining:
            raise _Unsupported(f"{remaining} goal(s) left after the script")
    except (CoqError, CoqTimeout, ProverCrashedError, _Unsupported) as exc:
        if isinstance(exc, ProverCrashedError):
            env.recover()
        message = " ".join(str(exc).split()) or type(exc).__name__
        if isinstance(exc, CoqTimeout) or message.startswith("Timeout"):
            message = f"timeout after {tactic_timeout:g} s"
        replay.status = "partial" if replay.steps else "failed"
        where = stage if stage in ("open", "end") else "step"
        replay.reason = f"{where}: {message}"[:500]
        replay.failed_sentence = None if where != "step" else stage[:500]
    replay.seconds = time.perf_counter() - start
    return replay


class _Unsupported(Exception):
    """A script the replay cannot run as written (internal: becomes a replay's reason)."""


def _step_row(
    theorem: Theorem, index: int, before: str, tactic: str, after: list[str], forbidden: frozenset[str], began: float
) -> dict:
    try:
        parse_coq_tactic(tactic, forbidden)
        allowlisted = True
    except TacticRejectedError:
        allowlisted = False
    return {
        "theorem": theorem.name,
        "step_index": index,
        "goal_before": before,
        "tactic": tactic[:-1].rstrip() if tactic.endswith(".") and not tactic.endswith("...") else tactic,
        "goals_after": after,
        "n_goals_after": len(after),
        "allowlisted": allowlisted,
        "latency_s": time.perf_counter() - began,
    }


def replay_theorems(
    theorems: Iterable[Theorem],
    tactic_timeout: float = 10.0,
    premises: dict[str, list[str]] | None = None,
    progress: Callable[[Replay], None] | None = None,
) -> list[Replay]:
    """Replay many train theorems in one Coq session; a valid or test theorem is refused, never replayed."""
    chosen = list(theorems)
    leaked = [t.name for t in chosen if split_of(t.name) != "train"]
    if leaked:
        raise UnknownTheoremError(
            f"'{leaked[0]}' is a {split_of(leaked[0])} theorem: human steps come from train theorems only"
        )
    out = []
    with HumanReplayEnv(tactic_timeout) as env:
        if premises:
            env.set_premises(premises)
        for theorem in chosen:
            out.append(replay_theorem(env, theorem, tactic_timeout))
            if progress is not None:
                progress(out[-1])
    return out


def human_step_rows(replays: list[Replay], experiment: str, iteration: int = 0) -> dict[str, list[dict]]:
    """Rows of `human_steps` and `human_replays`; a replay of a non-train theorem is an error, never a row."""
    steps, runs = [], []
    for replay in replays:
        theorem = replay.theorem
        split = split_of(theorem.name)
        if split != "train":
            raise UnknownTheoremError(f"'{theorem.name}' is a {split} theorem: its steps must not reach the lake")
        common = {
            "experiment": experiment,
            "iteration": iteration,
            "theorem_id": f"coq:{theorem.name}",
            "module": theorem.module,
            "split": split,
        }
        steps.extend({**common, **row} for row in replay.steps)
        runs.append(
            {
                **common,
                "theorem": theorem.name,
                "status": replay.status,
                "n_sentences": replay.n_sentences,
                "n_steps": len(replay.steps),
                "n_allowlisted": sum(r["allowlisted"] for r in replay.steps),
                "reason": replay.reason,
                "failed_sentence": replay.failed_sentence,
                "seconds": replay.seconds,
                "human_proof": theorem.proof,
            }
        )
    return {"human_steps": steps, "human_replays": runs}


def write_human_steps(home: str | Path | None, rows: dict[str, list[dict]], experiment: str, shard: str) -> str:
    """Commit both tables (each atomically, the replays last so a listed replay always has its steps)."""
    from aitp.lake import write_partition

    for table in HUMAN_TABLES:
        write_partition(home, table, experiment, 0, rows[table], shard=shard)
    return f"lake tables {', '.join(HUMAN_TABLES)} (experiment={experiment}, iteration=0, shard={shard})"
