"""A toy prover for fast, deterministic search and tree tests: goals are numbers.

`close` proves goals <= 1; `split` turns n into two goals n-1 and n-2 (for n >= 2); `half`
turns an even n into n/2; `loop` leaves the goal unchanged (a self-cycle); `up` turns n into
n+1 (cycles with `down`); anything else is an error.
"""

from __future__ import annotations

from aitp.proving.env import CheckResult, Goal, ProofStep, ProverEnv, TacticResult, Theorem
from aitp.proving.errors import TacticRejectedError
from aitp.proving.search.base import TacticSuggestion

TOY_TACTICS = ("close", "split", "half", "loop", "up", "down")


def toy_goal(n: int, theorem: str = "toy") -> Goal:
    return Goal(f"⊢ {n}", theorem, n)


class ToyEnv(ProverEnv):
    name = "toy"

    def __init__(self) -> None:
        super().__init__(tactic_timeout=1.0)
        self.calls = 0

    def open(self, theorem: Theorem) -> Goal:
        return toy_goal(int(theorem.statement), theorem.name)

    def validate_tactic(self, goal: Goal, tactic: str) -> str:
        if tactic not in TOY_TACTICS:
            raise TacticRejectedError(f"unknown toy tactic {tactic}")
        return tactic

    def _run(self, goal: Goal, tactic: str, timeout: float) -> TacticResult:
        self.calls += 1
        n = goal.handle
        if tactic == "close":
            return TacticResult("proved") if n <= 1 else TacticResult("error", error="too big")
        if tactic == "split" and n >= 2:
            return TacticResult("goals", [toy_goal(n - 1, goal.theorem), toy_goal(n - 2, goal.theorem)])
        if tactic == "half" and n % 2 == 0 and n > 0:
            return TacticResult("goals", [toy_goal(n // 2, goal.theorem)])
        if tactic == "loop":
            return TacticResult("goals", [toy_goal(n, goal.theorem)])
        if tactic in ("up", "down"):
            return TacticResult("goals", [toy_goal(n + (1 if tactic == "up" else -1), goal.theorem)])
        return TacticResult("error", error="does not apply")

    def _replace(self) -> None:
        pass

    def check_proof(self, theorem: Theorem, proof: ProofStep) -> CheckResult:
        def proves(n: int, step: ProofStep) -> bool:
            result = self._run(toy_goal(n), step.tactic, 1.0)
            if result.outcome == "proved":
                return not step.children
            if result.outcome != "goals" or len(result.goals) != len(step.children):
                return False
            return all(proves(g.handle, c) for g, c in zip(result.goals, step.children))

        return CheckResult(proves(int(theorem.statement), proof))

    def render_proof(self, proof: ProofStep) -> str:
        kids = ", ".join(self.render_proof(c) for c in proof.children)
        return f"{proof.tactic}[{kids}]" if kids else proof.tactic


class ToyPolicy:
    """Suggests every toy tactic in a fixed order; counts its calls and the goals per call."""

    def __init__(self, order: tuple[str, ...] = ("loop", "up", "half", "split", "close", "down")) -> None:
        self.order = order
        self.batches: list[int] = []

    def suggest(self, goals: list[Goal], n: int) -> list[list[TacticSuggestion]]:
        self.batches.append(len(goals))
        return [[TacticSuggestion(t, -0.1 * (i + 1)) for i, t in enumerate(self.order[:n])] for _ in goals]
