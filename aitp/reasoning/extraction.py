"""Answer extraction with the seed's exact rules, recording which rule fired.

1. `<think>...</think>` blocks are dropped (case-insensitive, across lines) to count answer pairs.
2. More than one `<answer>...</answer>` pair outside them (counted case-insensitively): no answer.
3. Otherwise the last `<answer>...</answer>` match anywhere in the text, stripped, as
   `reasoning_gym.utils.extract_answer` finds it (case-sensitive tags, one optional space inside).
4. No match: no answer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

NO_ANSWER_TAG = "no_answer_tag"
MULTIPLE_ANSWER_TAGS = "multiple_answer_tags"
FORMAT_ERRORS: tuple[str, ...] = (NO_ANSWER_TAG, MULTIPLE_ANSWER_TAGS)

_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_ANSWER_PAIR = re.compile(r"<answer>.*?</answer>", re.DOTALL | re.IGNORECASE)


@dataclass(frozen=True)
class Extraction:
    """The extracted answer, or None with the format rule that refused it."""

    answer: str | None
    format_error: str | None


def extract(completion: str) -> Extraction:
    """Apply the strict rules: exactly one answer pair outside think blocks, else a format error."""
    outside_think = _THINK_BLOCK.sub("", completion)
    if len(_ANSWER_PAIR.findall(outside_think)) > 1:
        return Extraction(None, MULTIPLE_ANSWER_TAGS)
    from reasoning_gym.utils import extract_answer as rg_extract_answer  # imports every task: on first use

    answer = rg_extract_answer(completion, tag_name="answer", strip=True)
    if answer is None:
        return Extraction(None, NO_ANSWER_TAG)
    return Extraction(answer, None)


_LENIENT_PAIR = re.compile(r"<answer>\s*(.*?)\s*</answer>", re.DOTALL | re.IGNORECASE)
_LENIENT_OPEN = re.compile(r"<answer>\s*(.*)$", re.DOTALL | re.IGNORECASE)


def extract_lenient(completion: str) -> str | None:
    """A forgiving reading for audits: any tag case, the last pair wins, an unclosed tag runs to the end."""
    text = _THINK_BLOCK.sub("", completion)
    pairs = _LENIENT_PAIR.findall(text) or _LENIENT_PAIR.findall(completion)
    if pairs:
        return pairs[-1].strip()
    tail = _LENIENT_OPEN.search(text)
    return tail.group(1).strip() if tail else None
