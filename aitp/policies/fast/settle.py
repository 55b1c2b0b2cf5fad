"""Turning finished slots into completions: where each row ended, found on the GPU, then whole batches on the host.

Without stop strings a row ends at its first end-of-sequence token or at its token limit, both of
which the GPU can find for every flagged slot at once (`ended_rows`). The host then needs one
transfer per check and one tokenizer call for the texts (`completions`), and that work can run while
the GPU already decodes the next block. With stop strings a row's end depends on its decoded text,
so such rows go through the eager sampler's own finish rule token by token (`replay`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from aitp.policies.base import Completion
from aitp.policies.tiny.sampler import _check_finished, _completion, _Row, completion_body


@dataclass
class Ended:
    """Rows that ended, copied off the GPU: tokens and log-probs (rows, width), lengths, end-of-sequence flags."""

    rows: list[int]
    tokens: Tensor
    logprobs: Tensor
    lengths: Tensor
    eos: Tensor


def ended_rows(rows: list[int], tokens: Tensor, logprobs: Tensor, gen: Tensor, limit: Tensor, eos: Tensor) -> Ended:
    """Where each flagged row ends (its first end-of-sequence token, else its limit), for `rows` in slot order."""
    width = tokens.shape[1]
    ends = torch.minimum(gen, limit).clamp(max=width)
    hit = torch.isin(tokens, eos) & (torch.arange(width, device=tokens.device) < ends[:, None])
    stopped = hit.any(1)
    lengths = torch.where(stopped, hit.int().argmax(1) + 1, ends)
    return Ended(rows, tokens.cpu(), logprobs.cpu(), lengths.cpu(), stopped.cpu())


def completions(ended: Ended, prompt_lens: np.ndarray, decode_batch: Callable[[list[list[int]]], list[str]]):
    """(row, completion) for each ended row; one tokenizer call decodes every text (an ending EOS is not text)."""
    lengths, eos, plens = ended.lengths.tolist(), ended.eos.tolist(), prompt_lens[ended.rows].tolist()
    ids = [t[:n] for t, n in zip(ended.tokens.tolist(), lengths)]
    lps = [lp[:n] for lp, n in zip(ended.logprobs.tolist(), lengths)]
    texts = decode_batch([i[:-1] if e else i for i, e in zip(ids, eos)])
    return [
        (r, Completion(text, i, lp, "stop" if e else "length", p, len(i), {}))
        for r, i, lp, e, p, text in zip(ended.rows, ids, lps, eos, plens, texts)
    ]


def replay(row: _Row, ids: list[int], lps: list[float], start: int, end: int, stops, eos_ids, decode) -> bool:
    """Replay a row's unchecked tokens [start, end) through the eager finish rule; True if it ended."""
    row.ids, row.logprobs = ids[:start], lps[:start]
    for t in range(start, end):
        row.ids.append(ids[t])
        row.logprobs.append(lps[t])
        _check_finished(row, ids[t], stops, eos_ids, decode)
        if row.finish is not None:
            return True
    return False


def replayed_completions(rows: list[tuple[int, _Row]], prompt_lens: np.ndarray, decode, decode_batch):
    """(row, completion) for rows that ended by the eager rule; texts not cut at a stop decoded in one call."""
    pending = [row for _, row in rows if row.text is None]
    for row, text in zip(pending, decode_batch([completion_body(row) for row in pending])):
        row.text = text
    return [(r, _completion(row, int(prompt_lens[r]), decode)) for r, row in rows]
