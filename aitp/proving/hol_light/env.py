"""The HOL Light backend: proof search in forked sessions of one loaded toplevel.

A `HolLightEnv` holds one session of the shared `HolLightServer` (see `session`). A goal's
handle is its theorem plus the path of (tactic, child index) from the root; goal ids of the
current session are cached per path, so a replaced session (after a crash or a hung tactic)
rebuilds any goal by replaying its path, and any earlier state can be extended again. Tactics
are parsed against the allowlist (`tactics`) and sent as s-expressions the server interprets.
"""

from __future__ import annotations

import os
import re
import signal
import time
from dataclasses import dataclass

from aitp.proving.env import CheckResult, Goal, ProofStep, ProverEnv, TacticResult, Theorem
from aitp.proving.errors import ProverCrashedError, TacticRejectedError, UnknownTheoremError
from aitp.proving.hol_light.session import (  # noqa: F401 - re-exported: the backend's public names
    HOL_DIR,
    HOL_INSTALL_HINT,
    HolLightServer,
    HolLightSession,
    hol_light_available,
)
from aitp.proving.hol_light.tactics import parse_hol_tactic


@dataclass(frozen=True)
class HolHandle:
    """The theorem's target and the (tactic s-expression, child index) path from the root."""

    target: str
    path: tuple[tuple[str, int], ...] = ()


def _goal_text(hyps: str, concl: str) -> str:
    lines = [" ".join(h.split()) for h in hyps.split("\t") if h.strip()]
    return "\n".join([*lines, "⊢ " + " ".join(concl.split())])


class HolLightEnv(ProverEnv):
    """HOL Light through forked sessions of one loaded toplevel."""

    name = "hol-light"
    install_hint = HOL_INSTALL_HINT

    def __init__(
        self, tactic_timeout: float = 5.0, server: HolLightServer | None = None, max_goal_chars: int = 4000
    ) -> None:
        super().__init__(tactic_timeout, max_goal_chars)
        self.server = server or HolLightServer.shared()
        self._session = self.server.connect()
        self._ids: dict[HolHandle, int] = {}
        self._texts: dict[HolHandle, str] = {}
        names = self._session.request("(tactics)", 30.0)
        self.tactics = frozenset(names[1].split()) if names[0] == "ok" and len(names) > 1 else frozenset()

    def _replace(self) -> None:
        self._session.kill()
        self._session = self.server.connect()
        self._ids.clear()

    def close(self) -> None:
        self._session.kill()

    def kill_prover(self) -> None:
        try:
            os.kill(self._session.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    # --- goals ---------------------------------------------------------------------------------
    def _goal_id(self, handle: HolHandle) -> int:
        if handle in self._ids:
            return self._ids[handle]
        if not handle.path:
            reply = self._session.request(f"(open {handle.target})", 60.0)
            if reply[0] != "ok":
                raise UnknownTheoremError(f"HOL Light cannot open {handle.target}: {' '.join(reply[1:])}")
            self._ids[handle] = int(reply[1])
            return self._ids[handle]
        tactic, _ = handle.path[-1]
        parent = HolHandle(handle.target, handle.path[:-1])
        reply = self._request_run(self._goal_id(parent), tactic, max(self.tactic_timeout * 4, 30.0))
        if not reply[0].startswith("ok"):
            raise ProverCrashedError(f"replaying a goal failed: {' '.join(reply)}")
        self._store_children(parent, tactic, reply)
        return self._ids[handle]

    def _request_run(self, goal_id: int, sexp: str, timeout: float) -> list[str]:
        return self._session.request(f"(run {goal_id} {timeout:.3f} {sexp})", timeout + 10.0)

    def _store_children(self, parent: HolHandle, sexp: str, reply: list[str]) -> list[tuple[HolHandle, str]]:
        count = int(reply[0].split()[1])
        out = []
        for i in range(count):
            gid, hyps, concl = reply[1 + 3 * i : 4 + 3 * i]
            child = HolHandle(parent.target, (*parent.path, (sexp, i)))
            self._ids[child] = int(gid)
            out.append((child, _goal_text(hyps, concl)))
        return out

    # --- protocol --------------------------------------------------------------------------------
    def _target(self, theorem: Theorem) -> str:
        if re.fullmatch(r"[A-Z][A-Z0-9_']*", theorem.name):
            if self._session.request(f"(open (name {theorem.name}))", 30.0)[0] == "ok":
                return f"(name {theorem.name})"
        if theorem.statement:
            return f'(term "{_escape(theorem.statement)}")'
        raise UnknownTheoremError(f"unknown HOL Light theorem '{theorem.name}': not in the library database")

    def open(self, theorem: Theorem) -> Goal:
        handle = HolHandle(self._target(theorem))
        reply = self._session.request(f"(open {handle.target})", 60.0)
        if reply[0] != "ok":
            raise UnknownTheoremError(f"HOL Light cannot open theorem '{theorem.name}': {' '.join(reply[1:])}")
        self._ids[handle] = int(reply[1])
        return Goal(_goal_text(reply[2], reply[3]), theorem.name, handle)

    def _parse(self, theorem: str, tactic: str):
        # Known premises: only theorems before this one. Unknown: any library theorem but itself.
        allowed = frozenset(self._premises.get(theorem, [])) if self._premises else None
        return parse_hol_tactic(tactic, allowed, self.tactics or None, frozenset({theorem}))

    def validate_tactic(self, goal: Goal, tactic: str) -> str:
        return self._parse(goal.theorem, tactic).text

    def _run(self, goal: Goal, tactic: str, timeout: float) -> TacticResult:
        sexp = self._parse(goal.theorem, tactic).sexp
        reply = self._request_run(self._goal_id(goal.handle), sexp, timeout)
        if reply[0] == "timeout":
            return TacticResult("timeout", error=f"timeout after {timeout:.1f} s")
        if reply[0] == "err":
            return TacticResult("error", error=" ".join(reply[1:]) or "tactic failed")
        children = self._store_children(goal.handle, sexp, reply)
        if not children:
            return TacticResult("proved")
        return TacticResult("goals", [Goal(text, goal.theorem, h) for h, text in children])

    def render_proof(self, proof: ProofStep) -> str:
        if not proof.children:
            return proof.tactic
        kids = "; ".join(self.render_proof(c) for c in proof.children)
        return f"({proof.tactic}) THENL [{kids}]"

    def _proof_sexp(self, theorem: str, proof: ProofStep) -> str:
        sexp = self._parse(theorem, proof.tactic).sexp
        return f"(step {sexp} ({' '.join(self._proof_sexp(theorem, c) for c in proof.children)}))"

    def check_proof(self, theorem: Theorem, proof: ProofStep) -> CheckResult:
        start = time.perf_counter()
        target = self._target(theorem)
        secs = max(30.0, self.tactic_timeout * 10)
        try:
            proof_sexp = self._proof_sexp(theorem.name, proof)
        except TacticRejectedError as exc:
            return CheckResult(False, f"rejected: {exc}", time.perf_counter() - start)
        session = self.server.connect()  # a fresh fork: nothing from the search can leak in
        try:
            reply = session.request(f"(check {target} {secs:.3f} {proof_sexp})", secs + 10)
            ok = reply[0] == "ok"
            message = "theorem rebuilt and matches the statement" if ok else " ".join(reply)
        except ProverCrashedError as exc:
            ok, message = False, f"prover crashed: {exc}"
        finally:
            session.kill()
        return CheckResult(ok, message, time.perf_counter() - start)


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')
