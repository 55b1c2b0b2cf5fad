"""Batched sampling with a KV cache, shared by the built-in and the Hugging Face backends.

The loop drives a `Decoder` (a model plus its cache): prompts are left-padded and prefilled once
each, the cache is repeated `n` times, then one token per live row per step. Randomness never
comes from a shared stream: prompt i's generator, seeded with `seeds[i]`, draws the uniforms of its
`n` samples up front, and tokens are picked by inverse-CDF from them, so a prompt's completions do
not depend on what else is in the batch or which worker runs it. (In float32 they match token for
token; in bfloat16, kernels that differ with the batch shape move logits enough to flip near-ties.)
Rows that finish are dropped from the batch once half of it is done.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import torch
from torch import Tensor

from aitp.errors import AitpError
from aitp.policies.base import Completion, SamplingParams
from aitp.policies.tiny.model import KVCache, TinyTransformer


class PromptTooLongError(AitpError):
    """A prompt leaves no room to generate within the model's context."""


class Decoder(Protocol):
    """A model and its cache, stepped by `sample_tokens`."""

    def prefill(self, ids: Tensor, valid: Tensor, steps: int) -> Tensor:
        """Run left-padded prompts `ids` (B, P) (`valid` marks real tokens); return last logits (B, V)."""
        ...

    def repeat(self, n: int) -> None:
        """Repeat every row `n` times, each copy next to its original."""
        ...

    def step(self, tokens: Tensor) -> Tensor:
        """Append one token per row (B,) and return the next logits (B, V)."""
        ...

    def keep(self, rows: Tensor) -> None:
        """Keep only these batch rows, in this order."""
        ...


def left_pad(seqs: list[list[int]], pad_id: int, device=None) -> tuple[Tensor, Tensor]:
    """Left-pad token lists to one length: ids (B, P) and a bool mask of the real tokens."""
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    valid = torch.zeros((len(seqs), width), dtype=torch.bool)
    for i, s in enumerate(seqs):
        if s:
            ids[i, width - len(s) :] = torch.tensor(s, dtype=torch.long)
            valid[i, width - len(s) :] = True
    return ids.to(device), valid.to(device)


def draw_uniforms(seeds: list[int], n: int, steps: int) -> Tensor:
    """Uniforms (len(seeds) * n, steps): prompt i's rows come from a generator seeded with seeds[i]."""
    out = torch.empty((len(seeds) * n, steps), dtype=torch.float64)
    for i, seed in enumerate(seeds):
        gen = torch.Generator().manual_seed(int(seed))
        out[i * n : (i + 1) * n] = torch.rand((n, steps), generator=gen, dtype=torch.float64)
    return out


def pick_tokens(logits: Tensor, temperature: float, top_p: float, u: Tensor) -> tuple[Tensor, Tensor]:
    """Choose one token per row (greedy at temperature 0, else nucleus by inverse CDF at uniform `u`).

    Returns the tokens and their log-probs under the model's own (untempered, untruncated) distribution.
    """
    logits = logits.float()
    logp = torch.log_softmax(logits, dim=-1)
    if temperature <= 0:
        tokens = logits.argmax(dim=-1)
    else:
        probs = torch.softmax(logits / temperature, dim=-1).double()
        order = None
        if top_p < 1.0:
            probs, order = probs.sort(dim=-1, descending=True)
            # Keep the smallest head whose mass reaches top_p (the first token always stays).
            probs = probs * ((probs.cumsum(-1) - probs) < top_p)
        cdf = probs.cumsum(-1)
        target = (u.to(cdf.device) * cdf[:, -1]).unsqueeze(-1)
        last = (probs > 0).sum(-1, keepdim=True) - 1 if order is not None else cdf.shape[-1] - 1
        idx = torch.searchsorted(cdf, target, right=True).clamp(max=last)
        tokens = (order.gather(-1, idx) if order is not None else idx).squeeze(-1)
    return tokens, logp.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)


@dataclass
class _Row:
    """One sequence being sampled: its tokens so far and, once done, why it ended."""

    limit: int
    ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish: str | None = None
    stop: str | None = None
    text: str | None = None


def sample_tokens(
    decoder: Decoder,
    prompt_ids: list[list[int]],
    params: SamplingParams,
    seeds: list[int] | None,
    *,
    eos_ids: set[int],
    pad_id: int,
    decode: Callable[[list[int]], str],
    max_len: int | None = None,
    max_rows: int = 64,
    device=None,
) -> list[list[Completion]]:
    """Sample `params.n` completions per tokenised prompt; see the module docstring.

    Prompts run in chunks of at most `max_rows` sequences (a prompt's `n` samples stay together),
    which bounds the KV cache's memory; chunking changes no completion. Seeds default to 0.
    """
    seeds = [0] * len(prompt_ids) if seeds is None else list(seeds)
    if len(seeds) != len(prompt_ids):
        raise ValueError(f"got {len(seeds)} seeds for {len(prompt_ids)} prompts")
    per_chunk = max(1, max_rows // max(1, params.n))
    out: list[list[Completion]] = []
    for start in range(0, len(prompt_ids), per_chunk):
        chunk = slice(start, start + per_chunk)
        out += _sample_chunk(decoder, prompt_ids[chunk], params, seeds[chunk], eos_ids, pad_id, decode, max_len, device)
    return out


def _sample_chunk(decoder, prompt_ids, params, seeds, eos_ids, pad_id, decode, max_len, device):
    n = params.n
    limits = [_limit(len(p), params.max_tokens, max_len) for p in prompt_ids]
    rows = [_Row(limit=limits[i // n]) for i in range(len(prompt_ids) * n)]
    steps = max(limits)
    if steps > 0:
        ids, valid = left_pad(prompt_ids, pad_id, device)
        logits = decoder.prefill(ids, valid, steps)
        if n > 1:
            decoder.repeat(n)
            logits = logits.repeat_interleave(n, dim=0)
        uniforms = draw_uniforms(seeds, n, steps)
        _decode_loop(decoder, logits, rows, uniforms, params, eos_ids, decode)
    return [[_completion(rows[i * n + j], len(p), decode) for j in range(n)] for i, p in enumerate(prompt_ids)]


def _limit(prompt_len: int, max_tokens: int, max_len: int | None) -> int:
    if max_len is None or max_tokens == 0:
        return max_tokens
    room = max_len - prompt_len
    if room <= 0:
        raise PromptTooLongError(
            f"a prompt of {prompt_len} tokens fills the model's context of {max_len}: "
            "shorten the prompt or use a model with a longer context"
        )
    return min(max_tokens, room)


def _decode_loop(decoder, logits, rows, uniforms, params, eos_ids, decode) -> None:
    live = list(range(len(rows)))  # batch position -> row index
    for t in range(uniforms.shape[1]):
        tokens, logprobs = pick_tokens(logits, params.temperature, params.top_p, uniforms[live, t])
        for r, tok, lp in zip(live, tokens.tolist(), logprobs.tolist()):
            row = rows[r]
            if row.finish is None:
                row.ids.append(tok)
                row.logprobs.append(lp)
                _check_finished(row, tok, params.stop, eos_ids, decode)
        running = [pos for pos, r in enumerate(live) if rows[r].finish is None]
        if not running:
            return
        # Drop finished rows only once half the batch is done: each drop copies the whole cache.
        if len(running) <= len(live) // 2:
            keep = torch.tensor(running, dtype=torch.long, device=tokens.device)
            decoder.keep(keep)
            tokens = tokens.index_select(0, keep)
            live = [live[pos] for pos in running]
        logits = decoder.step(tokens)


def _check_finished(row: _Row, tok: int, stops: tuple[str, ...], eos_ids: set[int], decode) -> None:
    if tok in eos_ids:
        row.finish = "stop"
        return
    # A stop can only have appeared at the end: decode a tail wide enough for the longest stop even
    # at 4 tokens per character (split UTF-8), and the whole text only once the tail holds a stop.
    if stops and any(s in decode(row.ids[-(4 * max(map(len, stops)) + 8) :]) for s in stops):
        text = decode(row.ids)
        hits = [(text.find(s), s) for s in stops if s in text]
        if hits:
            pos, stop = min(hits)
            row.finish, row.stop, row.text = "stop", stop, text[:pos]
            return
    if len(row.ids) >= row.limit:
        row.finish = "length"


def completion_body(row: _Row) -> list[int]:
    """The tokens a finished row's text is decoded from: an ending end-of-sequence token is not text."""
    return row.ids[:-1] if row.finish == "stop" and row.stop is None else row.ids


def _completion(row: _Row, prompt_len: int, decode) -> Completion:
    if row.text is None:
        row.text = decode(completion_body(row))
    extra = {"stop": row.stop} if row.stop is not None else {}
    return Completion(
        text=row.text,
        token_ids=list(row.ids),
        logprobs=list(row.logprobs),
        finish_reason=row.finish or "length",
        prompt_tokens=prompt_len,
        completion_tokens=len(row.ids),
        extra=extra,
    )


class TinyDecoder:
    """Drives a `TinyTransformer` with a preallocated KV cache, or (use_cache=False) by recomputing
    the whole sequence every step: the reference the cache is tested and benchmarked against."""

    def __init__(self, model: TinyTransformer, use_cache: bool = True) -> None:
        self.model = model
        self.use_cache = use_cache

    def prefill(self, ids: Tensor, valid: Tensor, steps: int) -> Tensor:
        self.valid = valid
        self.positions = (valid.long().cumsum(1) - 1).clamp(min=0)
        self.next_pos = self.positions[:, -1] + 1
        self.ids = ids
        self.cache = None
        if self.use_cache:
            p = next(self.model.parameters())
            self.cache = KVCache(self.model.config, ids.shape[0], ids.shape[1] + steps, p.device, p.dtype)
        return self.model(ids, self.positions, valid, self.cache)[:, -1]

    def repeat(self, n: int) -> None:
        self.keep(torch.arange(self.valid.shape[0], device=self.valid.device).repeat_interleave(n))

    def keep(self, rows: Tensor) -> None:
        self.valid, self.next_pos = self.valid[rows], self.next_pos[rows]
        self.ids, self.positions = self.ids[rows], self.positions[rows]
        if self.cache is not None:
            self.cache.select(rows)

    def step(self, tokens: Tensor) -> Tensor:
        one = torch.ones_like(self.valid[:, :1])
        self.valid = torch.cat([self.valid, one], dim=1)
        pos = self.next_pos[:, None]
        self.next_pos = self.next_pos + 1
        if self.cache is not None:
            return self.model(tokens[:, None], pos, self.valid, self.cache)[:, -1]
        self.ids = torch.cat([self.ids, tokens[:, None]], dim=1)
        self.positions = torch.cat([self.positions, pos], dim=1)
        return self.model(self.ids, self.positions, self.valid)[:, -1]
