"""The LeanDojo backend (optional extra `lean`): the same protocol over `Dojo.run_tac`.

Lean states hold all goals at once and tactics act on the first, so each edge has at most one
child: the hypergraph is a graph here, as in ReProver. A goal's handle is the tactic path from
the root; states are cached per path and rebuilt by replay after a Dojo crash. Needs `lean-dojo`
and a Lean toolchain (`lake` on PATH) with network access to trace repositories.
"""

from __future__ import annotations

import importlib.util
import shutil
import time
from typing import Any

from aitp.proving.env import CheckResult, Goal, ProofStep, ProverEnv, TacticResult, Theorem
from aitp.proving.errors import ProverCrashedError, ProverUnavailableError, TacticRejectedError

LEAN_INSTALL_HINT = "install the extra with `pip install 'aitp[lean]'` and a Lean toolchain (elan) so `lake` is on PATH"
_DENIED = ("sorry", "admit", "native_decide", "set_option", "import", "#eval", "#exit")


def leandojo_available() -> tuple[bool, str]:
    """Whether lean-dojo is importable and `lake` is on PATH, and why not."""
    if importlib.util.find_spec("lean_dojo") is None:
        return False, f"lean-dojo is not installed; {LEAN_INSTALL_HINT}"
    if shutil.which("lake") is None:
        return False, f"`lake` is not on PATH; {LEAN_INSTALL_HINT}"
    return True, ""


def parse_lean_tactic(text: str) -> str:
    """One single-line Lean tactic without `sorry`-like escapes."""
    tactic = " ".join(text.split())
    if not tactic or "\n" in text.strip():
        raise TacticRejectedError("a Lean tactic must be one non-empty line")
    if any(word in tactic for word in _DENIED):
        raise TacticRejectedError(f"'{next(w for w in _DENIED if w in tactic)}' is not allowed in a tactic")
    return tactic


class LeanDojoEnv(ProverEnv):
    """Lean 4 through LeanDojo; `Theorem.source` is `<repo url>@<commit>:<file path>`."""

    name = "leandojo"
    install_hint = LEAN_INSTALL_HINT

    def __init__(self, tactic_timeout: float = 5.0, max_goal_chars: int = 4000) -> None:
        super().__init__(tactic_timeout, max_goal_chars)
        ok, why = leandojo_available()
        if not ok:
            raise ProverUnavailableError(f"LeanDojo backend unavailable: {why}")
        import lean_dojo

        self._ld = lean_dojo
        self._dojo_cm: Any = None
        self._dojo: Any = None
        self._theorem: Theorem | None = None
        self._states: dict[tuple[str, ...], Any] = {}

    def _lean_theorem(self, theorem: Theorem) -> Any:
        repo_part, _, path = theorem.source.rpartition(":")
        url, _, commit = repo_part.rpartition("@")
        return self._ld.Theorem(self._ld.LeanGitRepo(url, commit), path, theorem.name)

    def _enter(self, theorem: Theorem) -> Any:
        self.close()
        self._dojo_cm = self._ld.Dojo(self._lean_theorem(theorem), timeout=int(max(self.tactic_timeout * 12, 60)))
        self._dojo, init = self._dojo_cm.__enter__()
        self._theorem, self._states = theorem, {(): init}
        return init

    def open(self, theorem: Theorem) -> Goal:
        init = self._enter(theorem)
        return Goal(init.pp, theorem.name, ())

    def validate_tactic(self, goal: Goal, tactic: str) -> str:
        return parse_lean_tactic(tactic)

    def _state(self, path: tuple[str, ...]) -> Any:
        if path not in self._states:
            parent = self._state(path[:-1])
            result = self._dojo.run_tac(parent, path[-1])
            if not isinstance(result, self._ld.TacticState):
                raise ProverCrashedError(f"replaying {path[-1]!r} gave {type(result).__name__}")
            self._states[path] = result
        return self._states[path]

    def _run(self, goal: Goal, tactic: str, timeout: float) -> TacticResult:
        try:
            result = self._dojo.run_tac(self._state(goal.handle), tactic)
        except Exception as exc:  # DojoCrashError and friends: the REPL is gone
            if "Timeout" in type(exc).__name__:
                return TacticResult("timeout", error=str(exc))
            raise ProverCrashedError(f"{type(exc).__name__}: {exc}") from exc
        if isinstance(result, self._ld.ProofFinished):
            return TacticResult("proved")
        if isinstance(result, self._ld.TacticState):
            path = (*goal.handle, tactic)
            self._states[path] = result
            return TacticResult("goals", [Goal(result.pp, goal.theorem, path)])
        if isinstance(result, self._ld.ProofGivenUp):
            return TacticResult("error", error="proof given up")
        return TacticResult("error", error=str(getattr(result, "error", result)))

    def _replace(self) -> None:
        if self._theorem is not None:
            self._enter(self._theorem)

    def render_proof(self, proof: ProofStep) -> str:
        return "\n".join(proof.tactics())

    def check_proof(self, theorem: Theorem, proof: ProofStep) -> CheckResult:
        start = time.perf_counter()
        state = self._enter(theorem)
        result: Any = state
        for tactic in proof.tactics():
            result = self._dojo.run_tac(result, tactic)
            if not isinstance(result, self._ld.TacticState):
                break
        ok = isinstance(result, self._ld.ProofFinished)
        return CheckResult(
            ok, "Lean accepted the proof" if ok else f"not finished: {result}", time.perf_counter() - start
        )

    def close(self) -> None:
        if self._dojo_cm is not None:
            try:
                self._dojo_cm.__exit__(None, None, None)
            finally:
                self._dojo_cm = self._dojo = None
