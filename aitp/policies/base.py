"""The policy protocol: sample `n` completions for each of a batch of chat prompts.

Every backend returns, per completion, the text, its token ids, one log-prob per generated token
(under the sampling distribution before temperature/top-p are applied: the model's own log-prob),
a finish reason and token counts. Sampling is seeded per prompt, never per worker, so a shard
retried on another worker reproduces the same completions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

FinishReason = Literal["stop", "length"]
Messages = list[dict[str, str]]


@dataclass(frozen=True)
class SamplingParams:
    """How to sample: n completions per prompt, temperature (0 = greedy), nucleus top_p, a token cap, stops."""

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 256
    stop: tuple[str, ...] = ()


@dataclass
class Completion:
    """One sampled completion with what training and audits need."""

    text: str
    token_ids: list[int]
    logprobs: list[float]
    finish_reason: FinishReason
    prompt_tokens: int
    completion_tokens: int
    extra: dict = field(default_factory=dict)


@runtime_checkable
class Policy(Protocol):
    """Anything that samples completions for chat prompts."""

    name: str
    version: str

    def sample(
        self, prompts: list[Messages], params: SamplingParams, seeds: list[int] | None = None
    ) -> list[list[Completion]]:
        """Return, for each prompt, `params.n` completions; `seeds[i]` seeds prompt i's sampling."""
        ...


@runtime_checkable
class Preparable(Protocol):
    """A policy that can get ready for a call's shape ahead of it (build caches, capture steps) without sampling."""

    def prepare(self, prompts: list[Messages], params: SamplingParams, rows: int) -> dict[str, float | int] | None:
        """Get ready for a call of `rows` rows over `prompts`; what was built (None: nothing to build)."""
        ...
