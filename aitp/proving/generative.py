"""The generative tactic policy: any backend of the policy protocol proposes tactic text.

This is the one place that knows the policy protocol. It accepts an object whose `sample` takes
either `(prompts, params: SamplingParams, seeds=None)` (aitp.policies) or keyword arguments
`(prompts, n, temperature, max_tokens, stop)`, and whose completions have `.text` and
`.logprobs`. Every sampled tactic is validated against the backend's allowlist grammar; invalid
ones are dropped (counted in `rejected`), duplicates merged keeping the best log-prob.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from aitp.proving.coq_tactics import parse_coq_tactic
from aitp.proving.env import Goal
from aitp.proving.errors import TacticRejectedError
from aitp.proving.hol_tactics import parse_hol_tactic
from aitp.proving.search.base import TacticSuggestion

SYSTEM_PROMPT = {
    "coq": "You are a Coq prover. Reply with one Coq tactic for the goal, without goal selectors.",
    "hol-light": "You are a HOL Light prover. Reply with one HOL Light tactic for the goal.",
    "leandojo": "You are a Lean 4 prover. Reply with one Lean tactic for the goal.",
}
_VALIDATORS: dict[str, Callable[[str], str]] = {
    "coq": lambda t: parse_coq_tactic(t),
    "hol-light": lambda t: parse_hol_tactic(t).text,
    "leandojo": lambda t: t if t.strip() and "\n" not in t.strip() else _reject("empty or multi-line tactic"),
}


def _reject(why: str) -> str:
    raise TacticRejectedError(why)


def goal_prompt(goal: Goal, backend: str) -> list[dict[str, str]]:
    """Chat messages asking for one tactic for this goal."""
    return [
        {"role": "system", "content": SYSTEM_PROMPT.get(backend, SYSTEM_PROMPT["coq"])},
        {"role": "user", "content": goal.text},
    ]


class GenerativeTacticPolicy:
    """Samples tactics from a language-model policy, one `sample` call per batch of goals."""

    def __init__(self, policy: Any, backend: str, temperature: float = 1.0, max_tokens: int = 128) -> None:
        self.policy = policy
        self.backend = backend
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.rejected = 0
        self._uses_params = "params" in inspect.signature(policy.sample).parameters

    def _sample(self, prompts: list[list[dict[str, str]]], n: int) -> list[list[Any]]:
        stop = ["\n"]
        if self._uses_params:
            from aitp.policies.base import SamplingParams

            params = SamplingParams(n=n, temperature=self.temperature, max_tokens=self.max_tokens, stop=tuple(stop))
            return self.policy.sample(prompts, params)
        return self.policy.sample(prompts, n=n, temperature=self.temperature, max_tokens=self.max_tokens, stop=stop)

    def suggest(self, goals: list[Goal], n: int) -> list[list[TacticSuggestion]]:
        """For each goal, the distinct valid sampled tactics, best log-prob first."""
        completions = self._sample([goal_prompt(g, self.backend) for g in goals], n)
        validate = _VALIDATORS.get(self.backend, _VALIDATORS["coq"])
        out = []
        for samples in completions:
            best: dict[str, float] = {}
            for completion in samples:
                try:
                    tactic = validate(completion.text.strip().split("\n")[0])
                except TacticRejectedError:
                    self.rejected += 1
                    continue
                logprob = float(sum(completion.logprobs or []))
                best[tactic] = max(best.get(tactic, float("-inf")), logprob)
            ranked = sorted(best.items(), key=lambda kv: -kv[1])
            out.append([TacticSuggestion(t, lp) for t, lp in ranked])
        return out
