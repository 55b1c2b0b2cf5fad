"""The search loop every algorithm shares: select a batch of goals, ask the policy once for the
whole batch, run the tactics, record edges, update statistics, until proved or out of budget.

Budgets are counted the same way for every algorithm: expansions (goals expanded), prover
seconds (time inside the prover) and wall seconds, so searches can be compared.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar, Protocol

from aitp.proving.env import CheckResult, Goal, ProofStep, ProverEnv, TacticResult, Theorem
from aitp.proving.search.tree import ProofTree, Status

MAX_WIDTH = 256  # tactics per goal a widening search asks for at most


@dataclass(frozen=True)
class TacticSuggestion:
    """A tactic proposed for a goal, with the policy's log-probability of it."""

    tactic: str
    logprob: float = 0.0
    timeout: float | None = None  # seconds it may run; None: the search's tactic_timeout


@dataclass(frozen=True)
class ClosingTactic:
    """A tactic the search tries on a goal before the policy's, as Draft-Sketch-Prove calls a hammer on every
    open goal: automation that closes a goal outright (`sauto`, `hammer`) is cheap to try and decisive when it
    works, and the policy's tactics then only have to break a goal into pieces the automation can close."""

    tactic: str
    timeout: float
    max_depth: int | None = None  # tried on goals at most this deep (the theorem's goal is depth 0); None: all

    @classmethod
    def parse(cls, spec: str) -> ClosingTactic:
        """`TACTIC:SECONDS[:MAX_DEPTH]` (`sauto:2`, `hammer:10:0`), the numbers read from the right since a tactic may
        hold colons (`sauto use: x`); ValueError naming the form where the text is not one."""
        tactic, seconds_text, depth_text = spec, "", ""
        head, _, last = spec.rpartition(":")
        before, _, middle = head.rpartition(":")
        if before and _is_seconds(middle) and last.strip().isdigit():
            tactic, seconds_text, depth_text = before, middle, last
        elif head:
            tactic, seconds_text = head, last
        if not tactic.strip() or not _is_seconds(seconds_text):
            raise ValueError(f"{spec!r}: write TACTIC:SECONDS[:MAX_DEPTH], e.g. sauto:2 or hammer:10:0")
        if float(seconds_text) <= 0:
            raise ValueError(f"{spec!r}: SECONDS must be > 0")
        return cls(tactic.strip(), float(seconds_text), int(depth_text) if depth_text else None)

    def spec(self) -> str:
        """The `TACTIC:SECONDS[:MAX_DEPTH]` text `parse` reads back."""
        depth = "" if self.max_depth is None else f":{self.max_depth}"
        return f"{self.tactic}:{self.timeout:g}{depth}"


def _is_seconds(text: str) -> bool:
    try:
        return float(text) >= 0
    except ValueError:
        return False


class TacticPolicy(Protocol):
    """Proposes tactics for a batch of goals in one call."""

    def suggest(self, goals: list[Goal], n: int) -> list[list[TacticSuggestion]]:
        """For each goal, up to `n` tactics, best first."""
        ...


Critic = Callable[[list[Goal]], list[float]]


@dataclass(frozen=True)
class Budget:
    """How much one proof attempt may spend."""

    expansions: int = 64
    prover_seconds: float = 60.0
    wall_seconds: float = 300.0


@dataclass(frozen=True)
class SearchConfig:
    """Knobs shared by all algorithms (the exploration constant and virtual loss are HTPS's)."""

    budget: Budget = field(default_factory=Budget)
    tactics_per_goal: int = 16
    batch_size: int = 4
    tactic_timeout: float = 5.0
    max_depth: int = 32
    exploration: float = 1.0
    virtual_loss: float = 1.0
    check_proofs: bool = True
    closing_tactics: tuple[ClosingTactic, ...] = ()
    widen: bool = False  # out of goals with budget left: start again with twice the tactics per goal (see run)


@dataclass
class _Spent:
    """What one run of a search has spent so far, across its widening attempts, and the tactic results it may
    reuse (`seen`, by goal text and tactic; None when the search does not widen)."""

    start: float
    prover_start: float
    seen: dict[tuple[str, str], TacticResult] | None
    steps: int = 0
    calls: int = 0


@dataclass
class SearchResult:
    """One proof attempt: the tree, the proof if any, its check, and what it cost.

    `prover_seconds` and `wall_seconds` are the search's own: the re-check of the proof it found comes after and is
    not counted, as no peer prover's time counts the check of its proof (so a budget compares like with like).
    """

    theorem: Theorem
    algorithm: str
    tree: ProofTree
    proof: ProofStep | None
    proof_text: str
    check: CheckResult | None
    expansions: int
    prover_seconds: float
    wall_seconds: float
    policy_calls: int
    stop_reason: str
    restarts: int = 0  # times the prover died or hung and a fresh session took over, during the search or its check

    @property
    def proved(self) -> bool:
        """Found a proof that the prover re-checked (or checking was off and the tree says proved)."""
        return self.proof is not None and (self.check is None or self.check.ok)

    @property
    def outcome(self) -> str:
        """`proved`, or why not in words: the re-check's refusal, or how the search stopped (every per-theorem
        report, `aitp prove`'s lines and the benchmarks' outcome files alike, says it this way)."""
        if self.proved:
            return "proved"
        if self.check is not None:
            return f"refused by the re-check: {' '.join(self.check.message.split())[:300]}"
        stops = {
            "failed": "every tactic tried failed (or was refused) on a goal the proof needs",
            "no goals left": "no open goal left to expand with the tactics offered",
        }
        return stops.get(self.stop_reason, self.stop_reason or "not proved")


def constant_critic(goals: list[Goal]) -> list[float]:
    """No knowledge: every goal is a coin flip."""
    return [0.5] * len(goals)


def length_critic(goals: list[Goal]) -> list[float]:
    """An untrained prior: shorter goals are likelier to be provable."""
    return [1.0 / (1.0 + len(g.text.split()) / 32.0) for g in goals]


class Search(ABC):
    """Shared loop; subclasses choose goals (`select`) and learn from expansions (`update`)."""

    name: ClassVar[str]
    uses_critic: bool = False  # whether goals get critic values (a class's default; BestFS: when given a critic)

    def __init__(self, config: SearchConfig | None = None, critic: Critic | None = None) -> None:
        self.config = config or SearchConfig()
        self.critic = critic or length_critic

    @abstractmethod
    def select(self, tree: ProofTree, k: int) -> list[int]:
        """Up to `k` distinct unexpanded OPEN goals to expand next."""

    def update(self, tree: ProofTree, expanded: list[int]) -> None:  # noqa: B027 - optional hook
        """Learn from the goals just expanded (backups, fringes); default: nothing."""

    def reset(self, tree: ProofTree) -> None:  # noqa: B027 - optional hook
        """Start a new attempt."""

    def run(self, env: ProverEnv, theorem: Theorem, policy: TacticPolicy) -> SearchResult:
        """Search for a proof of `theorem` within the budget; the proof is re-checked by the prover.

        With `widen`, a search that runs out of goals while budget is left starts again on a fresh tree asking for
        twice as many tactics per goal (the budget spent so far counts), until it proves the theorem, spends the
        budget, or the policy offers no more tactics for a goal than the attempt before; the result is the last
        attempt's tree. A widening search runs a tactic on a goal text once: a later attempt (or another node with
        the same goal) reuses the result, since a goal's handle reaches it again whatever path found it, so the
        budget goes to the tactics not tried yet rather than to repeating the closing tactics' failures.
        """
        cfg = self.config
        spent = _Spent(time.perf_counter(), env.prover_seconds, {} if cfg.widen else None)
        crashes_before = env.crashes
        width, offered = cfg.tactics_per_goal, 0
        while True:
            tree, stop, widest = self._attempt(env, theorem, policy, width, spent)
            done = stop == "proved" or stop.startswith("budget")
            if not cfg.widen or done or widest <= offered or width >= MAX_WIDTH:
                break
            width, offered = 2 * width, widest
        proof = tree.extract_proof()
        prover_seconds, wall_seconds = env.prover_seconds - spent.prover_start, time.perf_counter() - spent.start
        check = env.check_proof(theorem, proof) if proof is not None and cfg.check_proofs else None
        return SearchResult(
            theorem=theorem,
            algorithm=self.name,
            tree=tree,
            proof=proof,
            proof_text=env.render_proof(proof) if proof is not None else "",
            check=check,
            expansions=spent.steps,
            prover_seconds=prover_seconds,
            wall_seconds=wall_seconds,
            policy_calls=spent.calls,
            stop_reason=stop,
            restarts=env.crashes - crashes_before,
        )

    def _attempt(
        self, env: ProverEnv, theorem: Theorem, policy: TacticPolicy, width: int, spent: _Spent
    ) -> tuple[ProofTree, str, int]:
        """One tree searched at `width` tactics per goal from the budget left (counted into `spent`): the tree, why
        it stopped, and the most tactics the policy offered for one goal."""
        budget = self.config.budget
        tree = ProofTree(env.open(theorem))
        self._evaluate(tree)
        self.reset(tree)
        stop, widest = "", 0
        while not stop:
            if tree.proved:
                stop = "proved"
                break
            stop = self._out_of_budget(env, spent)
            if stop:
                break
            batch = self.select(tree, min(self.config.batch_size, budget.expansions - spent.steps))
            if not batch:
                tree.resolve_cycles()
                stop = "failed" if tree.failed else "no goals left"
                break
            suggestions = policy.suggest([tree.nodes[i].goal for i in batch], width)
            spent.calls += 1
            widest = max([widest, *(len(s) for s in suggestions)])
            expanded = []
            for node_id, suggested in zip(batch, suggestions):
                if tree.proved or self._out_of_budget(env, spent):
                    break
                self._expand(env, tree, node_id, suggested, spent)
                expanded.append(node_id)
                spent.steps += 1
            self._evaluate(tree)
            self.update(tree, expanded)
        return tree, stop, widest

    def _out_of_budget(self, env: ProverEnv, spent: _Spent) -> str:
        if spent.steps >= self.config.budget.expansions:
            return "budget: expansions"
        return self._out_of_time(env, spent)

    def _out_of_time(self, env: ProverEnv, spent: _Spent) -> str:
        budget = self.config.budget
        if env.prover_seconds - spent.prover_start >= budget.prover_seconds:
            return "budget: prover seconds"
        if time.perf_counter() - spent.start >= budget.wall_seconds:
            return "budget: wall seconds"
        return ""

    def _expand(
        self, env: ProverEnv, tree: ProofTree, node_id: int, suggested: list[TacticSuggestion], spent: _Spent
    ) -> None:
        node = tree.nodes[node_id]
        step = spent.steps
        if node.depth >= self.config.max_depth:
            tree.mark_exhausted(node_id, step)
            return
        closing = [
            TacticSuggestion(c.tactic, timeout=c.timeout)
            for c in self.config.closing_tactics
            if c.max_depth is None or node.depth <= c.max_depth
        ]
        tried: set[str] = set()
        for suggestion in (*closing, *suggested):
            if suggestion.tactic in tried or node.status is not Status.OPEN:
                continue
            if self._out_of_time(env, spent):
                break
            tried.add(suggestion.tactic)
            key = (node.goal.text, suggestion.tactic)
            result = spent.seen.get(key) if spent.seen is not None else None
            if result is None:
                wall_left = self.config.budget.wall_seconds - (time.perf_counter() - spent.start)
                timeout = min(suggestion.timeout or self.config.tactic_timeout, wall_left)
                result = env.run_tactic(node.goal, suggestion.tactic, timeout)
                if spent.seen is not None:
                    spent.seen[key] = result
            tree.add_edge(node_id, result.replay or suggestion.tactic, result, suggestion.logprob, step)
        tree.mark_exhausted(node_id, step)

    def _evaluate(self, tree: ProofTree) -> None:
        if not self.uses_critic:
            return
        fresh = [n for n in tree.nodes if n.critic is None]
        if fresh:
            for node, value in zip(fresh, self.critic([n.goal for n in fresh])):
                node.critic = min(max(float(value), 1e-6), 1.0)
