"""The generative tactic policy: any backend of the policy protocol proposes tactic text.

This is the one place that knows the policy protocol. It accepts an object whose `sample` takes
either `(prompts, params: SamplingParams, seeds=None)` (aitp.policies) or keyword arguments
`(prompts, n, temperature, max_tokens, stop)`, and whose completions have `.text` and
`.logprobs`. Every sampled tactic is validated against the backend's allowlist grammar (its
record's `validate_tactic`, as the system prompt is its record's); invalid ones are dropped
(counted in `rejected`), duplicates merged keeping the best log-prob. The prompt is the same
in training (`aitp.proving.models.tactic_generator`) and in search: `goal_prompt`, whose goal
text keeps its last `max_goal_chars` characters (the conclusion and the nearest hypotheses) so a
small model's context is never exceeded.
"""

from __future__ import annotations

import hashlib
import inspect
from itertools import zip_longest
from typing import Any

from aitp.proving.backend import Backend
from aitp.proving.backends import BACKENDS, DEFAULT_BACKEND
from aitp.proving.env import Goal
from aitp.proving.errors import TacticRejectedError
from aitp.proving.search.base import TacticSuggestion


def _backend(name: str) -> Backend:
    """The backend whose prompt and grammar a policy uses: an unregistered name gets the default backend's."""
    return BACKENDS.get(name) or BACKENDS[DEFAULT_BACKEND]


def goal_tail(text: str, max_chars: int | None) -> str:
    """The goal's last `max_chars` characters, cut at a line start when one is near: the conclusion comes last."""
    if max_chars is None or len(text) <= max_chars:
        return text
    tail = text[-max_chars:]
    newline = tail.find("\n")
    return tail[newline + 1 :] if 0 <= newline < len(tail) // 2 else tail


def goal_prompt(goal: Goal, backend: str, max_goal_chars: int | None = None) -> list[dict[str, str]]:
    """Chat messages asking for one tactic for this goal."""
    return [
        {"role": "system", "content": _backend(backend).system_prompt},
        {"role": "user", "content": goal_tail(goal.text, max_goal_chars)},
    ]


def goal_seed(goal: Goal) -> int:
    """A sampling seed of the goal alone, so a goal's samples do not depend on its batch."""
    return int.from_bytes(hashlib.sha256(goal.text.encode()).digest()[:4], "big")


class GenerativeTacticPolicy:
    """Samples tactics from a language-model policy, one `sample` call per batch of goals.

    `samples_per_tactic` draws that many completions per tactic asked for and keeps the `n` best distinct
    valid ones, so a search's budget (tactics tried per goal) stays what it asked for.
    """

    def __init__(
        self,
        policy: Any,
        backend: str,
        temperature: float = 1.0,
        max_tokens: int = 128,
        max_goal_chars: int | None = None,
        samples_per_tactic: int = 1,
        automation: bool = False,
    ) -> None:
        if samples_per_tactic < 1:
            raise ValueError("samples_per_tactic must be at least 1")
        self.policy = policy
        self.backend = backend
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.max_goal_chars = max_goal_chars
        self.samples_per_tactic = samples_per_tactic
        self.automation = automation  # the sessions load CoqHammer: its tactics pass the grammar
        self.rejected = 0
        self._uses_params = "params" in inspect.signature(policy.sample).parameters

    def _sample(self, prompts: list[list[dict[str, str]]], n: int, seeds: list[int]) -> list[list[Any]]:
        stop = ["\n"]
        if self._uses_params:
            from aitp.policies.base import SamplingParams

            params = SamplingParams(n=n, temperature=self.temperature, max_tokens=self.max_tokens, stop=tuple(stop))
            return self.policy.sample(prompts, params, seeds)
        return self.policy.sample(prompts, n=n, temperature=self.temperature, max_tokens=self.max_tokens, stop=stop)

    def suggest(self, goals: list[Goal], n: int) -> list[list[TacticSuggestion]]:
        """For each goal, at most `n` distinct valid sampled tactics, best log-prob first."""
        prompts = [goal_prompt(g, self.backend, self.max_goal_chars) for g in goals]
        completions = self._sample(prompts, n * self.samples_per_tactic, [goal_seed(g) for g in goals])
        validate = _backend(self.backend).validate_tactic
        out = []
        for samples in completions:
            best: dict[str, float] = {}
            for completion in samples:
                try:
                    tactic = validate(completion.text.strip().split("\n")[0], self.automation)
                except TacticRejectedError:
                    self.rejected += 1
                    continue
                logprob = float(sum(completion.logprobs or []))
                best[tactic] = max(best.get(tactic, float("-inf")), logprob)
            ranked = sorted(best.items(), key=lambda kv: -kv[1])[:n]
            out.append([TacticSuggestion(t, lp) for t, lp in ranked])
        return out


class InterleavedPolicy:
    """Two tactic policies taking turns per goal (distinct tactics, at most `n`): on the train split the
    generative model's samples beside the ranked fixed set's exploration, so an untrained generator (whose
    samples the grammar rejects) still finds proofs to learn from, and a trained one explores on its own."""

    def __init__(self, first: Any, second: Any) -> None:
        self.first = first
        self.second = second

    def suggest(self, goals: list[Goal], n: int) -> list[list[TacticSuggestion]]:
        """Alternately the next suggestion of each policy, skipping tactics already taken."""
        out = []
        for a, b in zip(self.first.suggest(goals, n), self.second.suggest(goals, n), strict=True):
            taken: dict[str, TacticSuggestion] = {}
            for pair in zip_longest(a, b):
                for s in pair:
                    if s is not None and s.tactic not in taken and len(taken) < n:
                        taken[s.tactic] = s
            out.append(list(taken.values()))
        return out
