"""The prover environment protocol: open a theorem, run tactic strings on goals, re-check proofs.

Every backend (Coq, HOL Light, LeanDojo) implements `ProverEnv`. A goal carries an opaque,
backend-private handle from which the backend can always reach that goal again (a replayable
path of tactics), so tree search may extend any earlier state in any order, and a crashed prover
can be replaced without losing the tree.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from aitp.proving.errors import ProverCrashedError, TacticRejectedError

Outcome = Literal["goals", "proved", "error", "timeout"]


@dataclass(frozen=True)
class Theorem:
    """A named statement of a library, with its human proof kept for supervised warm starts."""

    name: str
    statement: str
    backend: str
    proof: str = ""
    source: str = ""
    position: int = 0
    module: str = ""


@dataclass(frozen=True)
class Goal:
    """One goal: its printed text (hypotheses, then the conclusion after ⊢) and how to reach it."""

    text: str
    theorem: str
    handle: Any = field(default=None, compare=False, hash=False, repr=False)


@dataclass
class TacticResult:
    """What one tactic did to one goal."""

    outcome: Outcome
    goals: list[Goal] = field(default_factory=list)
    error: str = ""
    seconds: float = 0.0
    replay: str = ""
    """The tactic a proof records instead of the one run ('' for the same): CoqHammer's `hammer` proves a goal by
    calling external provers, and what replays without them is the tactic it reconstructed."""


@dataclass
class ProofStep:
    """A proof as a tree: a tactic and the proofs of the goals it left, in order."""

    tactic: str
    children: list[ProofStep] = field(default_factory=list)

    def size(self) -> int:
        """Number of tactic applications in the proof."""
        return 1 + sum(child.size() for child in self.children)

    def tactics(self) -> list[str]:
        """The tactics in pre-order."""
        out = [self.tactic]
        for child in self.children:
            out.extend(child.tactics())
        return out


@dataclass
class CheckResult:
    """The prover's verdict on a complete proof, rebuilt from scratch against the original statement."""

    ok: bool
    message: str = ""
    seconds: float = 0.0


class ProverEnv(ABC):
    """A prover session: context-managed, so the prover process is always cleaned up."""

    name: ClassVar[str]
    install_hint: ClassVar[str] = ""

    def __init__(self, tactic_timeout: float = 5.0, max_goal_chars: int = 4000) -> None:
        self.tactic_timeout = tactic_timeout
        self.max_goal_chars = max_goal_chars
        self.prover_seconds = 0.0
        self.crashes = 0
        self._premises: dict[str, list[str]] = {}

    def __enter__(self) -> ProverEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @abstractmethod
    def open(self, theorem: Theorem) -> Goal:
        """Start a proof of `theorem` and return its root goal."""

    @abstractmethod
    def validate_tactic(self, goal: Goal, tactic: str) -> str:
        """Return the normalised tactic, or raise TacticRejectedError if it is outside the allowlist."""

    @abstractmethod
    def _run(self, goal: Goal, tactic: str, timeout: float) -> TacticResult:
        """Run an already validated tactic; raise ProverCrashedError if the prover died."""

    @abstractmethod
    def _replace(self) -> None:
        """Replace a crashed prover session with a fresh one."""

    def recover(self) -> None:
        """Count a crash outside a tactic (opening a theorem, re-checking a proof) and replace the session."""
        self.crashes += 1
        self._replace()

    @abstractmethod
    def check_proof(self, theorem: Theorem, proof: ProofStep) -> CheckResult:
        """Rebuild the theorem from `proof` in a fresh state and check it against the original statement."""

    @abstractmethod
    def render_proof(self, proof: ProofStep) -> str:
        """The proof as a script in the prover's own language."""

    def close(self) -> None:  # noqa: B027 - a backend without a process has nothing to stop
        """Stop the prover process(es)."""

    def kill_prover(self) -> None:  # noqa: B027 - a backend without a process cannot crash
        """Kill the prover process as a crash would (it is replaced on next use); for tests and stuck sessions."""

    def set_premises(self, premises: dict[str, list[str]]) -> None:
        """Tell the env which library names each theorem may use (earlier theorems of its library)."""
        self._premises = premises

    def premises(self, goal: Goal) -> list[str]:
        """Names of the library facts this goal's theorem may use."""
        return self._premises.get(goal.theorem, [])

    def run_tactic(self, goal: Goal, tactic: str, timeout: float | None = None) -> TacticResult:
        """Run `tactic` on `goal`: new goals, proved, error or timeout; a rejected tactic never runs.

        No failure of one tactic escapes: a search must survive whatever a model writes, so every
        failure (rejection, a parser's recursion, a crashed or confused prover) is an error edge.
        """
        if not isinstance(tactic, str):
            return TacticResult("error", error=f"rejected: a tactic is a string, not {type(tactic).__name__}")
        try:
            normalised = self.validate_tactic(goal, tactic)
        except TacticRejectedError as exc:
            return TacticResult("error", error=f"rejected: {exc}")
        except RecursionError:
            return TacticResult("error", error="rejected: tactic nested too deeply to parse")
        except Exception as exc:  # noqa: BLE001 - a validator bug refuses the tactic; it never reaches the prover
            return TacticResult("error", error=f"rejected: validator failed ({type(exc).__name__})")
        start = time.perf_counter()
        try:
            result = self._run(goal, normalised, timeout or self.tactic_timeout)
        except TacticRejectedError as exc:
            result = TacticResult("error", error=f"rejected: {exc}")
        except ProverCrashedError as exc:
            self.crashes += 1
            self._replace()
            outcome = "timeout" if exc.timed_out else "error"
            result = TacticResult(outcome, error=f"prover {'hung' if exc.timed_out else 'crashed'}: {exc}")
        except Exception as exc:  # noqa: BLE001 - the session's state is unknown after any other failure
            self.crashes += 1
            self._replace()
            message = " ".join(str(exc).split())[:200]
            result = TacticResult("error", error=f"prover failed: {type(exc).__name__}: {message}")
        if any(len(g.text) > self.max_goal_chars for g in result.goals):
            # Rewriting loops blow goals up exponentially; such goals are never worth searching.
            result = TacticResult("error", error=f"goal longer than {self.max_goal_chars} characters")
        result.seconds = time.perf_counter() - start
        self.prover_seconds += result.seconds
        return result
