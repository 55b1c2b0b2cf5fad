"""Continuous batching over the engine's slots: a finished row's slot takes the next waiting row.

Rows (prompt i, sample j) wait in order; newcomers are prefilled once per distinct prompt and copied
into their slots; then the engine advances the live slots a block of tokens at a time with no host
read between tokens. After each block the host reads the finished flags (end-of-sequence or token
limit, set on the GPU). Without stop strings the GPU also finds where each flagged row ended, and
the host builds those completions while the GPU already decodes the next block; with stop strings
the host decodes each row's new tail, and flagged rows are replayed token by token through the
eager sampler's own finish rule, so stop strings, finish reasons, texts and log-probs mean what
they mean there. A row's randomness is its prompt's seeded uniforms, drawn as the eager sampler
draws them, so no row depends on its neighbours.

Blocks are short while rows are ending: rollout answers are often a few tokens long, and a
finished row keeps its slot (and its share of every step) until the host looks. A check costs
about as much as `CHECK_ROW_STEPS` row-steps of decoding, so a block is at least that long; after
a check that ended no row the next block is twice as long (up to `CHECK_EVERY`), so rows that
all run to their limit are checked about as rarely as with fixed blocks of `CHECK_EVERY`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field

import numpy as np
import torch
from torch import Tensor

from aitp.collector import collector_paused
from aitp.policies.base import Completion, SamplingParams
from aitp.policies.fast.engine import Engine, GpuMemoryError, buckets, rows_for_memory
from aitp.policies.fast.llama import LlamaWeights, eager, prefill
from aitp.policies.fast.sampling import pick
from aitp.policies.fast.settle import Ended, completions, ended_rows, replay, replayed_completions
from aitp.policies.tiny.sampler import _completion, _limit, _Row, draw_uniforms

CHECK_EVERY = 16  # most tokens per row between host checks (and always, with stop strings)
MIN_BLOCK = 2  # fewest tokens per row between host checks
CHECK_ROW_STEPS = 8192  # a host check costs about as much as decoding this many row-steps
PREFILL_TOKENS = 65536  # prompt tokens per prefill pass (bounds its activations)
PREFILL_SCORES = 1 << 28  # attention scores per prefill pass (prompts x heads x width^2, float32: 1 GiB)
FIRST_TOKEN_ROWS = 1024  # rows whose first token is sampled together (bounds the vocabulary-wide buffers)
# Prompt tokens from which a prefill pass runs its compiled pieces. Each compiled call checks its
# guards on the host, and a pass makes two such calls a layer; below this a pass is too short for the
# fused kernels to win that back, and rows admitted a few hundred at a time (continuous batching of
# short answers) would wait on the host at every refill.
FUSED_PREFILL_TOKENS = 16384
# The cache is built this many positions at a time. A rollout call's width is its longest prompt plus
# the token limit, and fresh items move the longest prompt by a few tokens from call to call: an
# exact width would rebuild the engine and capture every bucket's step again in about every other
# call. Rounding costs at most this many positions a row.
POSITION_QUANTUM = 32
# The padding pass that compiles the prefill pieces (see `compile_prefill`): prompts this wide. A
# prime, so that it equals no dimension of the model (head size, width) nor the pass's prompt count:
# torch.compile gives equal sizes one symbol, and a real pass would then compile the pieces again.
WARM_PREFILL_WIDTH = 61
_PREFILL_COMPILED: set[tuple[str, torch.dtype]] = set()  # (device, dtype) whose prefill pieces are compiled


def cache_positions(needed: int, max_len: int) -> int:
    """The cache width to build for calls needing `needed` positions: rounded up, within the rotary table."""
    return min(max_len, -(-needed // POSITION_QUANTUM) * POSITION_QUANTUM)


@dataclass
class CallStats:
    """Where one call's wall time went, timed on the host.

    The GPU runs ahead of the host, so its decoding shows up where the host waits for it: reading the
    rows' finished flags (`wait_s`). Kept beside the rows a call made, so that a slow call in the
    loop can be told apart (an engine built, more admissions for fewer slots, a host stall) with SQL.
    """

    rows: int
    slots: int = 0
    admissions: int = 0
    engine_s: float = 0.0  # building the engine, compiling and capturing its steps
    admit_s: float = 0.0  # prefill passes and first tokens of the rows admitted into free slots
    wait_s: float = 0.0  # reading the finished flags: mostly waiting for the GPU (stop strings: replays too)
    completions_s: float = 0.0  # building finished rows' completions, texts decoded
    seconds: float = 0.0  # the whole call
    cpu_s: float = 0.0  # the calling thread's CPU time: well under `seconds` when it was switched out or blocked
    new_segments: int = 0  # memory the CUDA allocator asked the driver for inside the call (each a cudaMalloc)
    # Each admission's rows and seconds, in order: tells the first fill of the slots from the refills after it.
    admitted_rows: list[int] = field(default_factory=list)
    admit_each_s: list[float] = field(default_factory=list)

    @contextmanager
    def timing(self, phase: str) -> Iterator[None]:
        """Add the wall time of the block to the seconds field `phase`."""
        start = time.perf_counter()
        try:
            yield
        finally:
            setattr(self, phase, getattr(self, phase) + time.perf_counter() - start)

    def as_dict(self) -> dict[str, float | int | list]:
        """The fields, seconds rounded to the millisecond."""

        def rounded(value):
            if isinstance(value, list):
                return [rounded(v) for v in value]
            return round(value, 3) if isinstance(value, float) else value

        return {k: rounded(v) for k, v in asdict(self).items()}


def compile_prefill(weights: LlamaWeights, engine: Engine, fuse: Callable | None = None) -> bool:
    """Compile the prefill pieces now, once per process and dtype, by a padding pass into a new engine's slot 0.

    A process's first prefill pass of `FUSED_PREFILL_TOKENS` prompt tokens or more compiles its pieces,
    which takes longer than a whole shard's decoding. The loop's GPU worker warms its decoder on a few
    short prompts while the first model trains, which never reaches that size, so its first shard paid
    the compile (`benchmarks/results/history-rollouts-in-loop.md`). Run from the engine's first build in
    a process (that warm-up), the compile moves off the shards. The pass writes only slot 0 of an engine
    no row holds yet; a row admitted there overwrites its prompt's positions and never reads past them.
    Returns whether it ran.
    """
    key = (str(weights.device), weights.dtype)
    if key in _PREFILL_COMPILED:
        return False
    width = min(WARM_PREFILL_WIDTH, engine.positions)
    count = -(-FUSED_PREFILL_TOKENS // width)
    ids = torch.zeros(count, width, dtype=torch.long, device=weights.device)
    lengths = torch.full((count,), width, dtype=torch.long, device=weights.device)
    first = torch.zeros(1, dtype=torch.long, device=weights.device)
    prefill(weights, engine.cache, ids, lengths, first, first, engine.fuse if fuse is None else fuse)
    _PREFILL_COMPILED.add(key)
    return True


def to_device(host: Tensor, device: torch.device) -> Tensor:
    """A host tensor copied to `device` without making the host wait for the GPU's queued work.

    A copy from pageable memory waits until every kernel already queued on the stream has run, so an
    admission (a prefill pass, then the first tokens of its rows 1,024 at a time, four such copies each)
    alternated host and GPU instead of overlapping them. From pinned memory, non-blocking, the host
    goes on queueing; the pinned block is a fresh copy, held by PyTorch until the transfer has run.
    """
    if device.type != "cuda":
        return host.to(device)
    return host.pin_memory().to(device, non_blocking=True)


def block_steps(b: int) -> int:
    """Tokens per row before the next host check when `b` slots step together."""
    return min(CHECK_EVERY, max(MIN_BLOCK, -(-CHECK_ROW_STEPS // b)))


Decode = Callable[[list[int]], str]


class FastSampler:
    """Samples from a Llama-family model with the engine; keeps the engine (and its graphs) between calls."""

    def __init__(self, model, *, graphs: bool = True, fuse: bool = True, max_slots: int | None = None) -> None:
        self.weights = LlamaWeights(model)
        self.graphs, self.fuse = graphs, fuse
        self.max_slots = max_slots
        self.engine: Engine | None = None
        self.last_call: CallStats | None = None  # the latest call's timings

    def slots_for(self, rows: int, positions: int, max_tokens: int, top_p: float) -> int:
        """Slots to hold: every row if memory allows, else as many as free GPU memory holds."""
        cap = rows if self.max_slots is None else min(rows, self.max_slots)
        if self.weights.device.type != "cuda":
            return cap
        return min(cap, rows_for_memory(self.weights, positions, max_tokens, top_p))

    def _segments(self) -> int:
        """Segments the CUDA caching allocator of this sampler's device has ever taken from the driver (0 off CUDA)."""
        if self.weights.device.type != "cuda":
            return 0
        return torch.cuda.memory_stats(self.weights.device).get("segment.all.allocated", 0)

    def release(self) -> None:
        """Drop the engine (slots, cache, captured steps) and hand its GPU memory back to the driver.

        A process that samples now and then (the loop's flow evaluates once an iteration) would keep
        its engine's GiBs in between, beside a GPU worker that sizes its slots to the memory it finds
        free. The next call builds an engine again and captures its steps; nothing compiles again (the
        compiled pieces take the engine's tensors as arguments).
        """
        self.engine = None
        if self.weights.device.type == "cuda":
            torch.cuda.empty_cache()

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
        eng = None  # with the local reference gone, releasing frees the old cache before memory is measured
        self.release()
        slots = self.slots_for(rows, positions, max_tokens, top_p)
        self.engine = Engine(self.weights, slots, positions, max_tokens, eos_ids, self.graphs, self.fuse)
        if self.engine.fuse is not eager:
            compile_prefill(self.weights, self.engine)
        return self.engine

    def _shape(self, prompt_ids: list[list[int]], params: SamplingParams, max_len: int | None) -> tuple[list[int], int]:
        """Each prompt's token limit, and the cache width a call over these prompts needs."""
        if any(not p for p in prompt_ids):
            raise ValueError("every prompt needs at least one token")
        max_len = min(max_len or self.weights.max_positions, self.weights.max_positions)  # the rotary table's end
        limits = [_limit(len(p), params.max_tokens, max_len) for p in prompt_ids]
        needed = max((len(p) + lim for p, lim in zip(prompt_ids, limits)), default=0)
        return limits, cache_positions(needed, max_len)

    def _ready(self, rows: int, positions: int, steps: int, params: SamplingParams, eos_ids: set[int]) -> Engine:
        """The engine for a call of this shape, its steps captured for these sampling settings."""
        engine = self._engine(rows, positions, steps, params.top_p, eos_ids)
        engine.capture_all(params.temperature, params.top_p)
        return engine

    def prepare(
        self,
        prompt_ids: list[list[int]],
        params: SamplingParams,
        rows: int,
        *,
        eos_ids: set[int],
        max_len: int | None = None,
    ) -> Engine | None:
        """Build the engine a call of `rows` rows over these prompts would run on, now, sampling nothing.

        Building it sizes the slots to the memory free at that moment and captures every bucket's step
        (`benchmarks/results/history-rollouts-in-loop.md` has the cost). A GPU worker does this for the
        loop's next iteration while the loop closes the current one, so that the iteration's first call
        finds its engine ready. None when the prompts leave no token to sample.
        """
        limits, positions = self._shape(prompt_ids, params, max_len)
        steps = max(limits, default=0)
        if rows <= 0 or steps <= 0:
            return None
        return self._ready(rows, positions, steps, params, eos_ids)

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
        n = params.n
        limits, positions = self._shape(prompt_ids, params, max_len)
        steps = max(limits, default=0)
        # Thousands of token lists would trigger full collections over and over (many times the work of
        # building completions); nothing made here forms cycles, so collect once at the end instead.
        with collector_paused():
            start, cpu_start, segments = time.perf_counter(), time.thread_time(), self._segments()
            stats = self.last_call = CallStats(rows=len(prompt_ids) * n)
            try:
                if not prompt_ids or steps <= 0:
                    return [[_completion(_Row(limit=0), len(p), decode) for _ in range(n)] for p in prompt_ids]
                self.weights.refresh()
                engine = self._ready(len(prompt_ids) * n, positions, steps, params, eos_ids)
                stats.slots, stats.engine_s = engine.slots, time.perf_counter() - start
                uniforms = draw_uniforms(seeds, n, steps)
                batch = _Batch(
                    engine, self.weights, prompt_ids, params, uniforms, limits, eos_ids, decode, decode_batch
                )
                batch.run(stats)
                return [batch.out[i * n : (i + 1) * n] for i in range(len(prompt_ids))]
            finally:
                stats.seconds = time.perf_counter() - start
                stats.cpu_s, stats.new_segments = time.thread_time() - cpu_start, self._segments() - segments


class _Batch:
    """One call's rows streaming through the engine's slots (host bookkeeping in arrays indexed by slot)."""

    def __init__(self, engine, weights, prompt_ids, params, uniforms, limits, eos_ids, decode, decode_batch) -> None:
        self.engine, self.weights, self.prompt_ids, self.params = engine, weights, prompt_ids, params
        self.uniforms, self.eos_ids, self.decode = uniforms, eos_ids, decode
        self.decode_batch = decode_batch or (lambda seqs: [decode(s) for s in seqs])
        n = params.n
        self.total = len(prompt_ids) * n
        self.limit = np.repeat(np.asarray(limits, dtype=np.int64), n)  # row -> token limit
        self.prompt_lens = np.repeat(np.fromiter(map(len, prompt_ids), np.int64, len(prompt_ids)), n)  # row -> tokens
        self.out: list[Completion | None] = [None] * self.total
        self.next_row = 0  # rows are admitted in order
        self.row_of = np.full(engine.slots, -1, dtype=np.int64)  # slot -> row, -1 when free
        self.gen = np.zeros(engine.slots, dtype=np.int64)  # slot -> tokens generated (host's count)
        self.checked = np.zeros(engine.slots, dtype=np.int64)  # slot -> tokens already checked for a stop
        self.live = 0
        self.replaying: dict[int, _Row] = {}  # row -> its tokens so far (stop strings only)
        self.device = weights.device
        self.buckets = buckets(engine.slots)
        stops = params.stop
        self.tail = 4 * max(map(len, stops)) + 8 if stops else 0

    def run(self, stats: CallStats) -> None:
        eng, refill_at = self.engine, max(1, self.engine.slots // 16)
        self._admit_timed(stats)
        pending, block = None, MIN_BLOCK
        while self.live:
            top = int(np.flatnonzero(self.row_of >= 0)[-1]) + 1
            b = next(x for x in self.buckets if x >= top)
            live = self.row_of[:b] >= 0
            left = int((self.limit[self.row_of[:b][live]] - self.gen[:b][live]).max())
            steps = max(1, min(CHECK_EVERY if self.tail else block, left))
            eng.run(b, steps, self.params.temperature, self.params.top_p)
            self.gen[:b][live] += steps
            if pending is not None:  # the last check's rows: built while the GPU decodes this block
                self._keep_timed(pending, stats)
            with stats.timing("wait_s"):
                pending = self._check_stops(b) if self.tail else self._check(b)
            # Rows are ending: check again soon. None ended: they are long, so check half as often.
            block = block_steps(b) if pending is not None else min(CHECK_EVERY, 2 * block)
            free, waiting = eng.slots - self.live, self.total - self.next_row
            if waiting and (free >= refill_at or not self.live or free >= waiting):
                self._admit_timed(stats)
            elif not waiting:
                self._pack()
        if pending is not None:
            self._keep_timed(pending, stats)

    def _admit_timed(self, stats: CallStats) -> None:
        first_row, spent = self.next_row, stats.admit_s
        with stats.timing("admit_s"):
            self._admit()
        stats.admissions += 1
        stats.admitted_rows.append(self.next_row - first_row)
        stats.admit_each_s.append(stats.admit_s - spent)

    def _keep_timed(self, pending: Ended, stats: CallStats) -> None:
        with stats.timing("completions_s"):
            self._keep(completions(pending, self.prompt_lens, self.decode_batch))

    def _keep(self, done: list[tuple[int, Completion]]) -> None:
        for r, c in done:
            self.out[r] = c

    def _admit(self) -> None:
        """Prefill waiting rows into the lowest free slots and sample their first tokens."""
        eng, n = self.engine, self.params.n
        count = min(eng.slots - self.live, self.total - self.next_row)
        if count <= 0:
            return
        new_rows = list(range(self.next_row, self.next_row + count))
        self.next_row += count
        slots = np.flatnonzero(self.row_of < 0)[:count].tolist()
        prompts = list(range(new_rows[0] // n, new_rows[-1] // n + 1))
        width = max(len(self.prompt_ids[p]) for p in prompts)
        per_pass = max(1, min(PREFILL_TOKENS // width, PREFILL_SCORES // (self.weights.n_heads * width * width)))
        for start in range(0, len(prompts), per_pass):
            group = prompts[start : start + per_pass]
            first = group[0]
            mine = [(s, r) for s, r in zip(slots, new_rows) if first <= r // n <= group[-1]]
            ids, lengths = _right_pad([self.prompt_ids[p] for p in group], self.device)
            slot_t = to_device(torch.tensor([s for s, _ in mine]), self.device)
            source = to_device(torch.tensor([r // n - first for _, r in mine]), self.device)
            fuse = eng.fuse if ids.numel() >= FUSED_PREFILL_TOKENS else eager
            logits = prefill(self.weights, eng.cache, ids, lengths, slot_t, source, fuse)
            for lo in range(0, len(mine), FIRST_TOKEN_ROWS):
                self._start(mine[lo : lo + FIRST_TOKEN_ROWS], logits, source[lo : lo + FIRST_TOKEN_ROWS])

    def _start(self, mine: list[tuple[int, int]], logits: Tensor, source: Tensor) -> None:
        eng, dev = self.engine, self.device
        slot_np = np.fromiter((s for s, _ in mine), dtype=np.int64, count=len(mine))
        row_np = np.fromiter((r for _, r in mine), dtype=np.int64, count=len(mine))
        slots = to_device(torch.from_numpy(slot_np), dev)
        u = to_device(self.uniforms[torch.from_numpy(row_np)], dev)
        tokens, logprobs = pick(logits[source], self.params.temperature, self.params.top_p, u[:, 0])
        limits = to_device(torch.from_numpy(self.limit[row_np]), dev)
        eng.tok[slots] = tokens
        eng.pos[slots] = to_device(torch.from_numpy(self.prompt_lens[row_np]), dev)
        eng.gen[slots] = 1
        eng.limit[slots] = limits
        eng.done[slots] = torch.isin(tokens, eng.eos) | (limits <= 1)
        eng.uniform[slots, : u.shape[1]] = u
        eng.out_tok[slots, 0] = tokens
        eng.out_lp[slots, 0] = logprobs
        self.row_of[slot_np], self.gen[slot_np], self.checked[slot_np] = row_np, 1, 0
        self.live += len(mine)

    def _flagged(self, b: int) -> np.ndarray:
        """Occupied slots below `b` whose row the GPU marked finished (end-of-sequence or limit)."""
        return np.flatnonzero(self.engine.done[:b].cpu().numpy() & (self.row_of[:b] >= 0))

    def _release(self, slots) -> None:
        self.row_of[slots] = -1
        self.live -= len(slots)

    def _check(self, b: int) -> Ended | None:
        """Copy off the rows that ended (no stop strings: the GPU knows where) and free their slots."""
        eng = self.engine
        flagged = self._flagged(b)
        if not flagged.size:
            return None
        index = torch.from_numpy(flagged).to(self.device)
        width = min(eng.max_tokens, int(self.gen[flagged].max()))
        rows = self.row_of[flagged].tolist()
        ended = ended_rows(
            rows, eng.out_tok[index, :width], eng.out_lp[index, :width], eng.gen[index], eng.limit[index], eng.eos
        )
        self._release(flagged)
        return ended

    def _check_stops(self, b: int) -> None:
        """Flagged rows and rows whose new tail holds a stop string, replayed through the eager finish rule."""
        eng = self.engine
        flagged = sorted(set(self._flagged(b).tolist()) | self._stop_candidates(b))
        if not flagged:
            return None
        index = torch.tensor(flagged, device=self.device)
        width = min(eng.max_tokens, int(self.gen[flagged].max()))
        ids_all, lps_all = eng.out_tok[index, :width].tolist(), eng.out_lp[index, :width].tolist()
        ended, rows, stops = [], [], self.params.stop
        for s, ids, lps in zip(flagged, ids_all, lps_all):
            r = int(self.row_of[s])
            row = self.replaying.setdefault(r, _Row(limit=int(self.limit[r])))
            end = min(int(self.gen[s]), row.limit, len(ids))
            if replay(row, ids, lps, int(self.checked[s]), end, stops, self.eos_ids, self.decode):
                ended.append(s)
                rows.append((r, self.replaying.pop(r)))
            else:
                self.checked[s] = end
        self._keep(replayed_completions(rows, self.prompt_lens, self.decode, self.decode_batch))
        self._release(ended)
        return None

    def _stop_candidates(self, b: int) -> set[int]:
        """Slots whose newest tokens (with enough context for the longest stop) contain a stop string."""
        eng = self.engine
        slots = np.flatnonzero(self.row_of >= 0)
        index = torch.from_numpy(slots).to(self.device)
        gen = torch.from_numpy(self.gen[slots]).to(self.device).clamp(max=eng.max_tokens)
        width = self.tail + CHECK_EVERY
        cols = gen[:, None] - width + torch.arange(width, device=self.device)[None, :]
        window = eng.out_tok[index[:, None], cols.clamp(min=0)].tolist()
        starts = (cols[:, 0].clamp(min=0) - cols[:, 0]).tolist()  # leading columns before token 0
        texts = self.decode_batch([w[st:] for w, st in zip(window, starts)])
        return {int(s) for s, text in zip(slots, texts) if any(stop in text for stop in self.params.stop)}

    def _pack(self) -> None:
        """Once nothing waits, move live rows into low slots when that lets a smaller graph serve them."""
        live = np.flatnonzero(self.row_of >= 0)
        if not live.size:
            return
        target = next(x for x in self.buckets if x >= live.size)
        if live[-1] < target:
            return
        movers = live[live >= target]
        holes = np.flatnonzero(self.row_of[:target] < 0)[: movers.size]
        self.engine.move(torch.from_numpy(movers).to(self.device), torch.from_numpy(holes).to(self.device))
        for table in (self.row_of, self.gen, self.checked):
            table[holes] = table[movers]
        self.row_of[movers] = -1


def _right_pad(seqs: list[list[int]], device) -> tuple[Tensor, Tensor]:
    width = max(len(s) for s in seqs)
    ids = np.zeros((len(seqs), width), dtype=np.int64)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = s
    lengths = np.fromiter((len(s) for s in seqs), dtype=np.int64, count=len(seqs))
    return to_device(torch.from_numpy(ids), device), to_device(torch.from_numpy(lengths), device)
