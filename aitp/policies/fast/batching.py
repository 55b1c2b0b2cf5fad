"""Continuous batching over the engine's slots: a finished row's slot takes the next waiting row.

Rows (prompt i, sample j) wait in order; newcomers are prefilled once per distinct prompt and copied
into their slots; then the engine advances all slots `CHECK_EVERY` tokens at a time with no host
read between tokens. After each block the host reads the finished flags (end-of-sequence or token
limit, set on the GPU) and, when stop strings are asked for, decodes each row's new tail; flagged
rows are replayed token by token through the eager sampler's own finish rule, so stop strings,
finish reasons, texts and log-probs mean what they mean there. A row's randomness is its prompt's
seeded uniforms, drawn as the eager sampler draws them, so no row depends on its neighbours.
"""

from __future__ import annotations

import gc
from collections import deque
from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from aitp.policies.base import Completion, SamplingParams
from aitp.policies.fast.engine import Engine, GpuMemoryError, buckets, rows_for_memory
from aitp.policies.fast.llama import LlamaWeights, prefill
from aitp.policies.fast.sampling import pick
from aitp.policies.tiny.sampler import _check_finished, _completion, _limit, _Row, completion_body, draw_uniforms

CHECK_EVERY = 16  # tokens per row between host checks: a finished row idles at most this long
PREFILL_TOKENS = 32768  # prompt tokens per prefill pass (bounds its activations)
PREFILL_SCORES = 1 << 28  # attention scores per prefill pass (prompts x heads x width^2, float32: 1 GiB)
FIRST_TOKEN_ROWS = 1024  # rows whose first token is sampled together (bounds the vocabulary-wide buffers)

Decode = Callable[[list[int]], str]


class FastSampler:
    """Samples from a Llama-family model with the engine; keeps the engine (and its graphs) between calls."""

    def __init__(self, model, *, graphs: bool = True, fuse: bool = True, max_slots: int | None = None) -> None:
        self.weights = LlamaWeights(model)
        self.graphs, self.fuse = graphs, fuse
        self.max_slots = max_slots
        self.engine: Engine | None = None

    def slots_for(self, rows: int, positions: int, max_tokens: int, top_p: float) -> int:
        """Slots to hold: every row if memory allows, else as many as free GPU memory holds."""
        cap = rows if self.max_slots is None else min(rows, self.max_slots)
        if self.weights.device.type != "cuda":
            return cap
        return min(cap, rows_for_memory(self.weights, positions, max_tokens, top_p))

    def _engine(self, rows: int, positions: int, max_tokens: int, top_p: float, eos_ids: set[int]) -> Engine:
        eng = self.engine
        if eng is not None and eng.fits(positions, max_tokens, eos_ids):
            if eng.slots >= rows:
                return eng
            # Memory this engine holds reads as used: rebuild only if more rows fit beside it than it has.
            try:
                if eng.slots >= self.slots_for(rows, positions, max_tokens, top_p):
                    return eng
            except GpuMemoryError:
                return eng
        self.engine = eng = None  # free the old cache before measuring what memory is free
        if self.weights.device.type == "cuda":
            torch.cuda.empty_cache()
        slots = self.slots_for(rows, positions, max_tokens, top_p)
        self.engine = Engine(self.weights, slots, positions, max_tokens, eos_ids, self.graphs, self.fuse)
        return self.engine

    def sample(
        self,
        prompt_ids: list[list[int]],
        params: SamplingParams,
        seeds: Sequence[int] | None,
        *,
        eos_ids: set[int],
        decode: Decode,
        decode_batch: Callable[[list[list[int]]], list[str]] | None = None,
        max_len: int | None = None,
    ) -> list[list[Completion]]:
        """`params.n` completions per tokenised prompt, as `aitp.policies.tiny.sampler.sample_tokens` gives."""
        seeds = [0] * len(prompt_ids) if seeds is None else list(seeds)
        if len(seeds) != len(prompt_ids):
            raise ValueError(f"got {len(seeds)} seeds for {len(prompt_ids)} prompts")
        if any(not p for p in prompt_ids):
            raise ValueError("every prompt needs at least one token")
        n = params.n
        max_len = min(max_len or self.weights.max_positions, self.weights.max_positions)  # the rotary table's end
        limits = [_limit(len(p), params.max_tokens, max_len) for p in prompt_ids]
        rows = [_Row(limit=limits[r // n]) for r in range(len(prompt_ids) * n)]
        steps = max(limits, default=0)
        # Thousands of token lists would trigger full collections over and over (~10x the time spent
        # building completions); nothing made here forms cycles, so collect once at the end instead.
        collecting = gc.isenabled()
        gc.disable()
        try:
            if rows and steps > 0:
                positions = max(len(p) + lim for p, lim in zip(prompt_ids, limits))
                self.weights.refresh()
                engine = self._engine(len(rows), positions, steps, params.top_p, eos_ids)
                engine.capture_all(params.temperature, params.top_p)
                uniforms = draw_uniforms(seeds, n, steps)
                _Batch(engine, self.weights, prompt_ids, params, uniforms, rows, eos_ids, decode, decode_batch).run()
            if decode_batch is not None:  # one call for every text (a tokenizer decodes a batch in parallel)
                pending = [row for row in rows if row.text is None]
                for row, text in zip(pending, decode_batch([completion_body(row) for row in pending])):
                    row.text = text
            return [[_completion(rows[i * n + j], len(p), decode) for j in range(n)] for i, p in enumerate(prompt_ids)]
        finally:
            if collecting:
                gc.enable()


class _Batch:
    """One call's rows streaming through the engine's slots."""

    def __init__(self, engine, weights, prompt_ids, params, uniforms, rows, eos_ids, decode, decode_batch) -> None:
        self.engine, self.weights, self.prompt_ids, self.params = engine, weights, prompt_ids, params
        self.uniforms, self.rows, self.eos_ids, self.decode = uniforms, rows, eos_ids, decode
        self.decode_batch = decode_batch or (lambda seqs: [decode(s) for s in seqs])
        self.waiting = deque(range(len(rows)))
        self.slot_row: dict[int, int] = {}  # occupied slot -> row
        self.checked: dict[int, int] = {}  # slot -> tokens already checked for a finish
        self.gen: dict[int, int] = {}  # slot -> tokens generated (host's count)
        self.device = weights.device
        stops = params.stop
        self.tail = 4 * max(map(len, stops)) + 8 if stops else 0

    def run(self) -> None:
        eng, refill_at = self.engine, max(1, self.engine.slots // 16)
        self._admit()
        while self.slot_row:
            b = next(x for x in buckets(eng.slots) if x > max(self.slot_row))
            block = min(CHECK_EVERY, max(self.rows[r].limit - self.gen[s] for s, r in self.slot_row.items()))
            eng.run(b, max(1, block), self.params.temperature, self.params.top_p)
            for s in self.slot_row:
                self.gen[s] += max(1, block)
            self._check(b)
            free = eng.slots - len(self.slot_row)
            if self.waiting and (free >= refill_at or not self.slot_row or free >= len(self.waiting)):
                self._admit()
            elif not self.waiting:
                self._pack()

    def _free_slots(self, count: int) -> list[int]:
        out, s = [], 0
        while len(out) < count:
            if s not in self.slot_row:
                out.append(s)
            s += 1
        return out

    def _admit(self) -> None:
        """Prefill waiting rows into the lowest free slots and sample their first tokens."""
        eng, n = self.engine, self.params.n
        count = min(eng.slots - len(self.slot_row), len(self.waiting))
        if count <= 0:
            return
        new_rows = [self.waiting.popleft() for _ in range(count)]
        slots = self._free_slots(count)
        prompts = sorted({r // n for r in new_rows})
        width = max(len(self.prompt_ids[p]) for p in prompts)
        per_pass = max(1, min(PREFILL_TOKENS // width, PREFILL_SCORES // (self.weights.n_heads * width * width)))
        for start in range(0, len(prompts), per_pass):
            group = prompts[start : start + per_pass]
            where = {p: i for i, p in enumerate(group)}
            mine = [(s, r) for s, r in zip(slots, new_rows) if r // n in where]
            ids, lengths = _right_pad([self.prompt_ids[p] for p in group], self.device)
            slot_t = torch.tensor([s for s, _ in mine], device=self.device)
            source = torch.tensor([where[r // n] for _, r in mine], device=self.device)
            logits = prefill(self.weights, eng.cache, ids, lengths, slot_t, source, eng.fuse)
            for lo in range(0, len(mine), FIRST_TOKEN_ROWS):
                self._start(mine[lo : lo + FIRST_TOKEN_ROWS], logits, source[lo : lo + FIRST_TOKEN_ROWS])

    def _start(self, mine: list[tuple[int, int]], logits: Tensor, source: Tensor) -> None:
        eng, dev = self.engine, self.device
        slots = torch.tensor([s for s, _ in mine], device=dev)
        row_idx = [r for _, r in mine]
        u = self.uniforms[row_idx].to(dev)
        tokens, logprobs = pick(logits[source], self.params.temperature, self.params.top_p, u[:, 0])
        limits = torch.tensor([self.rows[r].limit for r in row_idx], device=dev)
        eng.tok[slots] = tokens
        eng.pos[slots] = torch.tensor([len(self.prompt_ids[r // self.params.n]) for r in row_idx], device=dev)
        eng.gen[slots] = 1
        eng.limit[slots] = limits
        eng.done[slots] = torch.isin(tokens, eng.eos) | (limits <= 1)
        eng.uniform[slots, : u.shape[1]] = u
        eng.out_tok[slots, 0] = tokens
        eng.out_lp[slots, 0] = logprobs
        for s, r in mine:
            self.slot_row[s], self.gen[s], self.checked[s] = r, 1, 0

    def _check(self, b: int) -> None:
        """Read finished flags (and new tails when stops are set); settle the rows that ended."""
        eng = self.engine
        flagged = set(torch.nonzero(eng.done[:b]).flatten().tolist()) & self.slot_row.keys()
        if self.tail:
            flagged |= self._stop_candidates(b)
        if not flagged:
            return
        order = sorted(flagged)
        index = torch.tensor(order, device=self.device)
        width = min(eng.max_tokens, max(self.gen[s] for s in order))
        tokens = eng.out_tok[index, :width]
        if not self.params.stop:  # only end-of-sequence or the limit can end these: find where on the GPU
            ends = torch.minimum(eng.gen[index], eng.limit[index]).clamp(max=width)
            hit = torch.isin(tokens, eng.eos) & (torch.arange(width, device=self.device) < ends[:, None])
            firsts = torch.where(hit.any(1), hit.int().argmax(1), ends - 1).tolist()
        else:
            firsts = [None] * len(order)
        ids_all, lps_all = tokens.tolist(), eng.out_lp[index, :width].tolist()
        for s, ids, lps, first in zip(order, ids_all, lps_all, firsts):
            if self._settle(s, ids, lps, first):
                del self.slot_row[s], self.gen[s], self.checked[s]

    def _stop_candidates(self, b: int) -> set[int]:
        """Slots whose newest tokens (with enough context for the longest stop) contain a stop string."""
        eng = self.engine
        slots = sorted(self.slot_row)
        index = torch.tensor(slots, device=self.device)
        gen = torch.tensor([self.gen[s] for s in slots], device=self.device).clamp(max=eng.max_tokens)
        width = self.tail + CHECK_EVERY
        cols = gen[:, None] - width + torch.arange(width, device=self.device)[None, :]
        window = eng.out_tok[index[:, None], cols.clamp(min=0)].tolist()
        starts = (cols[:, 0].clamp(min=0) - cols[:, 0]).tolist()  # leading columns before token 0
        texts = self.decode_batch([w[st:] for w, st in zip(window, starts)])
        return {s for s, text in zip(slots, texts) if any(stop in text for stop in self.params.stop)}

    def _settle(self, slot: int, ids: list[int], lps: list[float], first: int | None) -> bool:
        """Replay a flagged row's unchecked tokens through the eager finish rule; True if it ended.

        `first` (without stop strings) is the first end-of-sequence token or the last allowed one:
        nothing before it can end the row, so the replay starts there.
        """
        row = self.rows[self.slot_row[slot]]
        start, end = self.checked[slot], min(self.gen[slot], row.limit, len(ids))
        if first is not None:
            start = max(start, first)
        row.ids, row.logprobs = ids[:start], lps[:start]
        for t in range(start, end):
            row.ids.append(ids[t])
            row.logprobs.append(lps[t])
            _check_finished(row, ids[t], self.params.stop, self.eos_ids, self.decode)
            if row.finish is not None:
                return True
        self.checked[slot] = end
        return False

    def _pack(self) -> None:
        """Once nothing waits, move live rows into low slots when that lets a smaller graph serve them."""
        live = sorted(self.slot_row)
        if not live:
            return
        target = next(x for x in buckets(self.engine.slots) if x >= len(live))
        if max(live) < target:
            return
        movers = [s for s in live if s >= target]
        holes = [s for s in range(target) if s not in self.slot_row][: len(movers)]
        self.engine.move(torch.tensor(movers, device=self.device), torch.tensor(holes, device=self.device))
        for src, dst in zip(movers, holes):
            for table in (self.slot_row, self.gen, self.checked):
                table[dst] = table.pop(src)


def _right_pad(seqs: list[list[int]], device) -> tuple[Tensor, Tensor]:
    width = max(len(s) for s in seqs)
    ids = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s, dtype=torch.long)
    return ids.to(device), torch.tensor([len(s) for s in seqs], device=device)
