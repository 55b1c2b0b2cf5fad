"""Scoring a group: each distinct completion is judged once, and every sample keeps its own verdict."""

from __future__ import annotations

import aitp.reasoning.groups as groups
from aitp.reasoning.items import generate_items
from aitp.reasoning.scoring import score_completion


def test_repeated_completions_are_judged_once_with_the_same_verdicts(monkeypatch):
    item = generate_items("basic_arithmetic", 1, 0)[0]
    right, wrong = f"<answer>{item.answer}</answer>", "<answer>-1</answer>"
    completions = [right, wrong, right, "no tags", right, wrong]
    judged: list[str] = []

    def counting(item_, text, verifier=None):
        judged.append(text)
        return score_completion(item_, text, verifier)

    monkeypatch.setattr(groups, "score_completion", counting)
    scored = groups.score_group(item, completions, 64, len)
    assert sorted(judged) == sorted({right, wrong, "no tags"})
    each = [score_completion(item, c) for c in completions]
    assert scored.raw_scores == [s.raw for s in each] == [1.0, 0.0, 1.0, 0.0, 1.0, 0.0]
    assert scored.lenient_scores == [s.lenient for s in each]
    assert scored.format_errors == [s.format_error for s in each]
    assert scored.extracted_answers == [s.extracted for s in each]
