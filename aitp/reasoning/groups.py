"""Group rules: score a group of completions of one item, then apply the length penalty.

The penalty follows the seed, with one deliberate change: the length L is the completion's token
count (the reference counts the prompt too). It applies only when every score in the group is at
least 0.5; with T = 0.75 * max_token_length and L > T, a score s becomes
s * (1 - min(1, (L - T) / (max_token_length - T))). It never raises a score.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from aitp.errors import BadInputError
from aitp.reasoning.items import Item
from aitp.reasoning.scoring import score_completion, verifier_entry

CORRECT = 0.5


def length_penalty(scores: list[float], lengths: list[int], max_token_length: int) -> list[float]:
    """Penalise over-long completions, only in groups where every score is at least 0.5."""
    if len(scores) != len(lengths):
        raise ValueError("scores and lengths differ in length")
    if max_token_length <= 0:
        raise BadInputError(f"--max-token-length must be positive, got {max_token_length}")
    if not scores or any(s < CORRECT for s in scores):
        return list(scores)
    threshold = 0.75 * max_token_length
    out = []
    for score, length in zip(scores, lengths):
        if length <= threshold:
            out.append(score)
        else:
            over = min(1.0, (length - threshold) / (max_token_length - threshold))
            out.append(score * (1.0 - over))
    return out


@dataclass(frozen=True)
class ScoredGroup:
    """Every verdict on a group; `uniform` marks groups with no signal for preference/RL losses."""

    scores: list[float]
    raw_scores: list[float]
    lenient_scores: list[float]
    format_errors: list[str | None]
    extracted_answers: list[str | None]
    completion_tokens: list[int]

    @property
    def uniform(self) -> bool:
        return len(set(self.scores)) <= 1


def score_group(
    item: Item,
    completions: list[str],
    max_token_length: int,
    count_tokens: Callable[[str], int],
    completion_tokens: list[int] | None = None,
) -> ScoredGroup:
    """Score each completion strictly and leniently, then apply the group's length penalty."""
    verifier = verifier_entry(item)
    # A group's samples often repeat (short answers at any temperature): a verdict is a function of the
    # text alone, so each distinct text is scored once.
    verdicts = {text: score_completion(item, text, verifier) for text in dict.fromkeys(completions)}
    scored = [verdicts[c] for c in completions]
    lengths = completion_tokens if completion_tokens is not None else [count_tokens(c) for c in completions]
    raw = [s.raw for s in scored]
    return ScoredGroup(
        scores=length_penalty(raw, lengths, max_token_length),
        raw_scores=raw,
        lenient_scores=[s.lenient for s in scored],
        format_errors=[s.format_error for s in scored],
        extracted_answers=[s.extracted for s in scored],
        completion_tokens=list(lengths),
    )
