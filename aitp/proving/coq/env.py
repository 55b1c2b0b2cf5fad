"""The Coq backend: proof search over `coqidetop`, one goal at a time.

A goal's handle is the sentence path that reaches its proof state plus the goal's index there.
Running a tactic focuses that one goal (`N: {`) and runs `Timeout T tactic.`; the goals then in
focus are exactly the goals the tactic left, so edges are per goal, as the proof tree needs. The
document is moved with `Edit_at` and the missing sentences replayed, so any earlier state can be
extended again, and a replaced (crashed) coqidetop rebuilds states lazily from the same paths.

The final check starts a fresh theorem with the original statement, replays the extracted proof
with braces, and must pass `Qed`; a proof that gives up or shelves goals never counts. With
`check_dependencies` (on by default) it then lists the proof's dependencies, once per found
proof: a proof that depends on the theorem itself, even through a library lemma proved from it
(`lia` on `n + m = m + n` uses `Nat.add_comm`), is refused. The listing is slow for a `lia` proof
(it pulls in the micromega library) and quick for most others (`benchmarks/results/history-prove.md`);
`CoqEnv(check_dependencies=False)` skips it, for speed benchmarks only.

The theorem is a loaded stdlib lemma, so the premise rule (`hints`: what precedes T, never T nor a lemma stated
after it) is applied for every tactic alike: before its goal is stated, T and the hinted library lemmas after it
are removed from the hint databases, in a session with CoqHammer they go on the `Search Blacklist` its premise
selection honours, and a tactic citing one of them is refused with the name, in search and at the re-check.

`CoqEnv(automation=True)` also loads CoqHammer (`hammer`), whose tactics (`sauto`, `hammer`...)
the allowlist then accepts; without it they are refused in one line naming the fix. The external provers
`hammer` calls get half of the session's `hammer_timeout` (`hammer.session_sentences`), and a goal it
proves records its reconstruction (`TacticResult.replay`), refused like any tactic when it cites a forbidden name.
It is opt-in: loading CoqHammer slows every session's start and pulls ZArith and
Program into every state, which would change what the existing searches see.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass

from aitp.proving.coq.hammer import coqhammer_available, reconstruction, session_sentences
from aitp.proving.coq.hints import (
    blacklist_sentence,
    dependency_names,
    forbidden_citations,
    hidden_hints,
    located_constant,
    parse_about,
    parse_hint_dump,
    remove_hints_sentence,
)
from aitp.proving.coq.protocol import COQ_INSTALL_HINT, CoqError, CoqIdeTop, CoqTimeout, coq_available
from aitp.proving.coq.tactics import cited_names, parse_coq_tactic
from aitp.proving.env import CheckResult, Goal, ProofStep, ProverEnv, TacticResult, Theorem
from aitp.proving.errors import (
    ProverCrashedError,
    ProverUnavailableError,
    TacticRejectedError,
    UnknownTheoremError,
)

HEADER = (
    "Require Import Coq.Arith.Arith.",
    "Require Import Coq.Lists.List.",
    "Require Import Coq.Bool.Bool.",
    "Require Import Coq.micromega.Lia.",
    "Import ListNotations.",
)
GOAL_NAME = "aitp_goal"


@dataclass(frozen=True)
class CoqHandle:
    """Sentences from the base state to the goal's proof state, and the goal's index there."""

    path: tuple[str, ...]
    index: int


def _require(theorem: Theorem) -> tuple[str, ...]:
    return (f"Require {theorem.module}.",) if theorem.module else ()


def _statement(theorem: Theorem, name: str) -> str:
    return f"Theorem {name} : ltac:(let T := type of @{theorem.name} in exact T)."


class CoqEnv(ProverEnv):
    """Coq through coqidetop's XML protocol: the fast backend.

    `check_dependencies` (default True) refuses found proofs that depend on the theorem being
    proved; turn it off only for speed benchmarks. `automation` loads CoqHammer (see the module).
    """

    name = "coq"
    install_hint = COQ_INSTALL_HINT

    def __init__(
        self,
        tactic_timeout: float = 5.0,
        max_goal_chars: int = 4000,
        check_dependencies: bool = True,
        automation: bool = False,
        hammer_timeout: float | None = None,
    ) -> None:
        super().__init__(tactic_timeout, max_goal_chars)
        self.check_dependencies = check_dependencies
        self.automation = automation
        self.hammer_timeout = hammer_timeout or tactic_timeout  # what `hammer` is given (its provers get half)
        self.printed: list[str] = []  # what Coq printed while running the last tactic (hammer's reconstruction)
        ok, why = coq_available()
        if not ok:
            raise ProverUnavailableError(f"Coq backend unavailable: {why}")
        if automation and not (hammer := coqhammer_available())[0]:
            raise ProverUnavailableError(f"Coq backend without automation: {hammer[1]}")
        self._coq: CoqIdeTop | None = None
        self._hint_dbs: dict[str, dict[str, frozenset[str]]] = {}  # module -> database -> printed names
        self._located: dict[tuple[str, str], str | None] = {}  # (module, printed name) -> full name
        self._library: frozenset[str] = frozenset()
        self._about: dict[str, tuple[str, bool]] = {}  # theorem -> (printed name, transparent)
        self._rule: tuple[str, frozenset[str], frozenset[str]] = ("", frozenset(), frozenset())
        self._start()

    # --- session -----------------------------------------------------------------------------
    def _start(self) -> None:
        self._coq = CoqIdeTop()
        state = self._coq.init_state
        for sentence in (*HEADER, *(session_sentences(self.hammer_timeout) if self.automation else ())):
            state = self._coq.add(sentence, state)
        self._coq.goals()
        self._base = state
        self._doc: list[tuple[str, int]] = []

    def _replace(self) -> None:
        if self._coq is not None:
            self._coq.kill()
        self._start()

    def close(self) -> None:
        if self._coq is not None:
            self._coq.kill()
            self._coq = None

    def kill_prover(self) -> None:
        if self._coq is not None and self._coq.proc.poll() is None:
            os.killpg(self._coq.proc.pid, signal.SIGKILL)
            self._coq.proc.wait()

    def _goto(self, path: tuple[str, ...]) -> None:
        """Make the document tip the state after `path`, reusing the longest common prefix."""
        keep = 0
        while keep < min(len(self._doc), len(path)) and self._doc[keep][0] == path[keep]:
            keep += 1
        if keep < len(self._doc):
            self._coq.edit_at(self._doc[keep - 1][1] if keep else self._base)
            del self._doc[keep:]
        for sentence in path[keep:]:
            self._exec(sentence, timeout=max(self.tactic_timeout * 4, 30.0))

    def _exec(self, sentence: str, timeout: float) -> None:
        """Add and execute one sentence at the tip; on failure roll the document back and re-raise."""
        tip = self._doc[-1][1] if self._doc else self._base
        try:
            state = self._coq.add(sentence, tip)
            self._doc.append((sentence, state))
            self._coq.goals(deadline=timeout + 5.0)
        except (CoqError, CoqTimeout):
            if self._doc and self._doc[-1][0] == sentence:
                self._doc.pop()
            self._coq.edit_at(tip)
            raise

    # --- hints -------------------------------------------------------------------------------
    def set_premises(self, premises: dict[str, list[str]]) -> None:
        super().set_premises(premises)
        self._library = frozenset(premises).union(*premises.values()) if premises else frozenset()

    def _premise_rule(self, theorem: str) -> tuple[frozenset[str], frozenset[str]]:
        """The names a proof of `theorem` may not cite (itself and the library after it) and those it may."""
        if self._rule[0] != theorem:
            allowed = frozenset(self._premises.get(theorem, ()))
            self._rule = (theorem, (self._library - allowed) | {theorem}, allowed)
        return self._rule[1], self._rule[2]

    def refuse_forbidden(self, theorem: str, tactic: str) -> None:
        """Raise TacticRejectedError naming what `tactic` cites against the premise rule (see `hints`)."""
        forbidden, allowed = self._premise_rule(theorem)
        cited = forbidden_citations(cited_names(tactic), forbidden, allowed)
        if cited:
            raise TacticRejectedError(f"cites what is not stated before the theorem: {', '.join(cited)}")

    def _opening(self, theorem: Theorem, name: str = GOAL_NAME) -> tuple[str, ...]:
        """Require the theorem's module, hide it (and later library lemmas) from hints and premise search, state it."""
        require = _require(theorem)
        self._goto(require)
        state = self._doc[-1][1] if self._doc else self._base
        module = theorem.module
        if module not in self._hint_dbs:  # hint databases change only with the modules loaded
            self._hint_dbs[module] = parse_hint_dump(self._coq.query("Print Hint *.", state))

        def resolve(printed: str) -> str | None:
            if (module, printed) not in self._located:
                self._located[module, printed] = located_constant(self._coq.query(f"Locate {printed}.", state))
            return self._located[module, printed]

        premises = frozenset(self._premises.get(theorem.name, ()))
        hidden = hidden_hints(theorem.name, self._hint_dbs[module], resolve, self._library, premises)
        hide = [remove_hints_sentence(hidden)]
        if self.automation:  # only CoqHammer's `hammer` searches premises: sessions without it skip the sentence
            hide.append(blacklist_sentence(sorted(self._premise_rule(theorem.name)[0])))
        return (*require, *(s for s in hide if s), _statement(theorem, name))

    # --- protocol ------------------------------------------------------------------------------
    def open(self, theorem: Theorem) -> Goal:
        try:
            path = self._opening(theorem)
            self._goto(path)
        except CoqError as exc:
            raise UnknownTheoremError(f"Coq cannot open theorem '{theorem.name}': {exc}") from exc
        goals = self._coq.goals()
        return Goal(goals.foreground[0].text(), theorem.name, CoqHandle(path, 0))

    def validate_tactic(self, goal: Goal, tactic: str) -> str:
        return self._allowed(goal.theorem, tactic)

    def _allowed(self, theorem: str, tactic: str) -> str:
        """The tactic normalised through the allowlist and the premise rule, for search and re-check alike."""
        short = theorem.rsplit(".", 1)[-1]
        normalised = parse_coq_tactic(tactic, frozenset({theorem, short, GOAL_NAME, "aitp_check"}), self.automation)
        self.refuse_forbidden(theorem, normalised)
        return normalised

    def _run(self, goal: Goal, tactic: str, timeout: float) -> TacticResult:
        handle: CoqHandle = goal.handle
        focus = f"{handle.index + 1}: {{"
        self.printed = []
        hammer = tactic == "hammer"
        try:
            self._goto((*handle.path, focus))
            before = self._coq.goals()
            sentence = f"Timeout {max(1, round(timeout))} {tactic}."
            self._exec(sentence, timeout)
            self.printed = list(self._coq.texts)
            after = self._coq.goals()
        except CoqTimeout as exc:
            return TacticResult("timeout", error=str(exc) or "interrupted")
        except CoqError as exc:
            message = str(exc)
            outcome = "timeout" if message.startswith("Timeout") else "error"
            return TacticResult(outcome, error=message)
        if after.shelved > before.shelved or after.given_up > before.given_up:
            return TacticResult("error", error="tactic shelved or gave up goals")
        if not after.foreground:
            return self._hammer_proof(goal) if hammer else TacticResult("proved")
        path = (*handle.path, focus, sentence)
        children = [Goal(g.text(), goal.theorem, CoqHandle(path, i)) for i, g in enumerate(after.foreground)]
        return TacticResult("goals", children)

    def _hammer_proof(self, goal: Goal) -> TacticResult:
        """`hammer` closed the goal: the proof records the tactic it reconstructed, if that cites only premises."""
        printed = reconstruction(self.printed)
        if printed is None:
            return TacticResult("error", error="hammer printed no reconstruction to record")
        try:  # its own allowlisted, normalised text (hammer prints a closing period), under the premise rule
            replay = self.validate_tactic(goal, printed)
        except TacticRejectedError as exc:
            return TacticResult("error", error=f"hammer's reconstruction is refused: {exc}")
        return TacticResult("proved", replay=replay)

    def render_proof(self, proof: ProofStep) -> str:
        return " ".join(_proof_sentences(proof, timeout=None))

    def check_proof(self, theorem: Theorem, proof: ProofStep) -> CheckResult:
        start = time.perf_counter()
        try:  # a proof may come from anywhere: its tactics pass the same allowlist as search
            for tactic in proof.tactics():
                self._allowed(theorem.name, tactic)
        except TacticRejectedError as exc:
            return CheckResult(False, f"rejected: {exc}", time.perf_counter() - start)
        check = "aitp_check"
        body = _proof_sentences(proof, timeout=max(10, round(self.tactic_timeout * 4)))
        same = (
            "Example aitp_same_statement : True := ltac:(let A := type of "
            f"{check} in let B := type of @{theorem.name} in constr_eq A B; exact I)."
        )
        try:
            path = (*self._opening(theorem, check), "Proof.", *body, "Qed.", same)
            self._goto(path)
            ok, message = True, "Qed accepted; statement matches"
            if self.check_dependencies:
                circular = self._depends_on(theorem, check)
                if circular:
                    ok, message = False, f"proof depends on the theorem being proved: {', '.join(circular)}"
                else:
                    message += "; does not depend on the theorem"
        except CoqError as exc:
            ok, message = False, str(exc)
        except CoqTimeout:
            ok, message = False, "timeout while checking"
        except ProverCrashedError as exc:
            self._replace()
            ok, message = False, f"prover crashed: {exc}"
        finally:
            if self._coq is not None and self._doc:
                self._coq.edit_at(self._base)
                self._doc = []
        return CheckResult(ok, message, time.perf_counter() - start)

    def _depends_on(self, theorem: Theorem, proved: str) -> list[str]:
        """The names by which the constant `proved` (at the tip) depends on `theorem`: none, or its own.

        The listing follows every body, opaque proofs included, so a lemma proved from the theorem
        brings the theorem in; a transparent theorem is listed only among all dependencies.
        """
        state = self._doc[-1][1]
        if theorem.name not in self._about:
            try:
                self._about[theorem.name] = parse_about(self._coq.query(f"About {theorem.name}.", state))
            except ValueError as exc:  # fail closed: an unreadable answer never lets a proof through
                raise CoqError(str(exc), None) from exc
        printed, transparent = self._about[theorem.name]
        kind = "All" if transparent else "Opaque"
        deadline = max(self.tactic_timeout * 4, 30.0)
        listing = self._coq.query(f"Print {kind} Dependencies {proved}.", state, deadline, lines=True)
        return [printed] if printed in dependency_names(listing) else []


def _proof_sentences(proof: ProofStep, timeout: int | None) -> list[str]:
    """The proof as sentences: the tactic, then each child's proof inside its own braces."""
    tactic = f"Timeout {timeout} {proof.tactic}." if timeout else f"{proof.tactic}."
    out = [tactic]
    for child in proof.children:
        out.extend(["{", *_proof_sentences(child, timeout), "}"])
    return out
