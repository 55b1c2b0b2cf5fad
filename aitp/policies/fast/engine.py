"""Static decode state for a fixed number of slots, and one decode step captured per batch-size bucket.

Every per-row quantity lives in a preallocated tensor indexed by slot (last token, position, tokens
generated, token limit, finished flag, the row's uniforms, its sampled tokens and log-probs), and
one step reads and advances them in place: replaying the captured step k times samples k tokens
per row with no host involvement. A step serves the first `b` slots, `b` a bucket (powers of two
up to the slot count); the scheduler keeps live rows packed low so small tails replay small graphs.
"""

from __future__ import annotations

import torch
from torch import Tensor

from aitp.errors import AitpError
from aitp.policies.fast.attention import attention
from aitp.policies.fast.llama import LlamaWeights, decode, eager
from aitp.policies.fast.sampling import pick

# Bytes of working memory per row and vocabulary entry while sampling: bf16 logits, their float32
# copy, log-softmax, tempered probabilities in float32 and float64 and their float64 cumulative sum.
SAMPLE_BYTES_PER_LOGIT = 40
TOP_P_BYTES_PER_LOGIT = 32  # nucleus sampling sorts the float64 probabilities and keeps the order
# Room kept free beside the slots: prefill of newcomers, first-token sampling, the graph pool's slack.
RESERVE_BYTES = 3 << 30
MEMORY_FRACTION = 0.9
FINE_FROM = 512  # batch sizes from here on get captured steps at 1.25, 1.5 and 1.75 times each power of two


_COMPILED: dict = {}
_MEMORY_SHARE: list[float | None] = [None]  # this process's cap, as a share of each card (None: no cap)


def limit_memory_share(share: float | None) -> None:
    """Let engines built from now on in this process hold at most this share of their card (None: no cap).

    A rollout worker sampling while a training shares its card (the loop's `rollouts.overlap`) must leave
    that training its room; without a cap an engine takes nearly all the memory free when it is built.
    """
    _MEMORY_SHARE[0] = share


def compiled(fn):
    """`fn` compiled once per process (shapes dynamic: one compile serves every bucket)."""
    if fn not in _COMPILED:
        _COMPILED[fn] = torch.compile(fn, dynamic=True)
    return _COMPILED[fn]


_WARM_UP_STREAMS: dict[torch.device, torch.cuda.Stream] = {}


def warm_up_stream(device: torch.device) -> torch.cuda.Stream:
    """The one stream per device that every engine's captures warm up on.

    An engine is rebuilt whenever its process releases it (the loop's flow: every evaluation). What a
    stream keeps for as long as the process lives (library workspaces such as cuBLAS's) is then kept
    once, not once for each stream torch's pool hands out.
    """
    if device not in _WARM_UP_STREAMS:
        _WARM_UP_STREAMS[device] = torch.cuda.Stream(device)
    return _WARM_UP_STREAMS[device]


class GpuMemoryError(AitpError):
    """Not even one row fits in the GPU memory that is free."""


def buckets(slots: int) -> list[int]:
    """Batch sizes a step is captured for: powers of two below `slots` (quarter steps from FINE_FROM), and `slots`.

    A step costs about its batch size once the batch is large, so a live count just above a power of
    two would otherwise pay for up to twice the rows it has; below FINE_FROM the step is launch-bound.
    """
    out, b = set(), 1
    while b < slots:
        out.add(b)
        if b >= FINE_FROM:
            out.update(b * k // 4 for k in (5, 6, 7) if b * k // 4 < slots)
        b *= 2
    return [*sorted(out), slots]


def bytes_per_row(weights: LlamaWeights, positions: int, max_tokens: int, top_p: float = 1.0) -> int:
    """GPU memory one slot costs: its cache, its per-token buffers and its share of sampling."""
    per_logit = SAMPLE_BYTES_PER_LOGIT + (TOP_P_BYTES_PER_LOGIT if top_p < 1.0 else 0)
    return weights.kv_bytes_per_row(positions) + (max_tokens + 1) * 20 + weights.vocab * per_logit


def rows_for_memory(
    weights: LlamaWeights, positions: int, max_tokens: int, top_p: float = 1.0, free_bytes: int | None = None
) -> int:
    """How many rows fit in the free GPU memory (all of `free_bytes` if given), after the reserve."""
    if free_bytes is None:
        free_bytes = torch.cuda.mem_get_info(weights.device)[0]
        share = _MEMORY_SHARE[0]
        if share is not None:
            card = torch.cuda.get_device_properties(weights.device).total_memory
            free_bytes = min(free_bytes, int(card * share) - torch.cuda.memory_reserved(weights.device))
    budget = int(free_bytes * MEMORY_FRACTION) - RESERVE_BYTES
    rows = budget // bytes_per_row(weights, positions, max_tokens, top_p)
    if rows < 1:
        raise GpuMemoryError(
            f"{free_bytes / 2**30:.1f} GiB of GPU memory is free, too little for one row of {positions} "
            "positions: free the GPU, lower max_tokens, or run the policy on CPU"
        )
    return int(rows)


class Engine:
    """Slots, their cache and the captured decode steps of one model at one cache width."""

    def __init__(
        self,
        weights: LlamaWeights,
        slots: int,
        positions: int,
        max_tokens: int,
        eos_ids: set[int],
        graphs: bool,
        fuse: bool = False,
    ) -> None:
        dev = weights.device
        self.weights, self.slots, self.positions, self.max_tokens = weights, slots, positions, max_tokens
        self.eos_ids = set(eos_ids)
        self.eos = torch.tensor(sorted(eos_ids), dtype=torch.long, device=dev)
        self.graphs = graphs and dev.type == "cuda"
        # Compiling fuses the norms, rotary embedding, SwiGLU and sampling into few kernels: on CUDA
        # a decode step is otherwise hundreds of tiny launches, each a few microseconds even replayed.
        self.fuse = compiled if fuse and dev.type == "cuda" else eager
        self.cache = weights.new_cache(slots, positions)
        self.tok = torch.zeros(slots, dtype=torch.long, device=dev)
        self.pos = torch.zeros(slots, dtype=torch.long, device=dev)
        self.gen = torch.zeros(slots, dtype=torch.long, device=dev)
        self.limit = torch.zeros(slots, dtype=torch.long, device=dev)
        self.done = torch.ones(slots, dtype=torch.bool, device=dev)
        # One spare column: a finished row still steps until the host looks, and writes there.
        self.uniform = torch.zeros(slots, max_tokens + 1, dtype=torch.float64, device=dev)
        self.out_tok = torch.zeros(slots, max_tokens + 1, dtype=torch.long, device=dev)
        self.out_lp = torch.zeros(slots, max_tokens + 1, dtype=torch.float32, device=dev)
        self.state = [self.tok, self.pos, self.gen, self.limit, self.done, self.uniform, self.out_tok, self.out_lp]
        self.attend = attention(self.cache, weights.head_dim**-0.5, weights.cos, weights.sin, weights.n_heads)
        self.captured: dict[tuple[int, float, float], torch.cuda.CUDAGraph] = {}
        self.pool = None

    def fits(self, positions: int, max_tokens: int, eos_ids: set[int]) -> bool:
        """Whether this engine's cache and buffers are wide enough for a call (and it stops on the same ids)."""
        return self.positions >= positions and self.max_tokens >= max_tokens and self.eos_ids == set(eos_ids)

    def step(self, b: int, temperature: float, top_p: float) -> None:
        """Advance the first `b` slots by one token: attend, sample at the row's uniform, record, flag."""
        gen = self.gen[:b]
        logits = decode(self.weights, self.tok[:b], self.pos[:b], self.attend, self.fuse)
        col = gen.clamp(max=self.max_tokens)[:, None]
        tokens, logprobs = self.fuse(pick)(logits, temperature, top_p, self.uniform[:b].gather(1, col)[:, 0])
        self.out_tok[:b].scatter_(1, col, tokens[:, None])
        self.out_lp[:b].scatter_(1, col, logprobs[:, None])
        self.done[:b] |= torch.isin(tokens, self.eos) | (gen + 1 >= self.limit[:b])
        self.tok[:b] = tokens
        self.pos[:b] = (self.pos[:b] + 1).clamp(max=self.positions - 1)
        self.gen[:b] += 1

    def run(self, b: int, steps: int, temperature: float, top_p: float) -> None:
        """`steps` decode steps of the first `b` slots (graph replays on CUDA, eager elsewhere)."""
        if not self.graphs:
            for _ in range(steps):
                self.step(b, temperature, top_p)
            return
        key = (b, temperature, top_p)
        graph = self.captured.get(key) or self._capture(key)
        for _ in range(steps):
            graph.replay()

    def capture_all(self, temperature: float, top_p: float) -> None:
        """Capture every bucket's step for these sampling settings, largest first (one memory pool).

        The warm-up steps' memory is freed into the caching allocator's blocks for the side stream,
        which no later allocation of this process reuses; they go back to the driver at the end, so
        that another process on the card (the loop's training, its evaluation) and this engine's own
        sizing see them as free.
        """
        missing = [b for b in reversed(buckets(self.slots)) if (b, temperature, top_p) not in self.captured]
        if not self.graphs or not missing:
            return
        for b in missing:
            self._capture((b, temperature, top_p))
        torch.cuda.synchronize(self.weights.device)
        torch.cuda.empty_cache()

    def _capture(self, key: tuple[int, float, float]) -> torch.cuda.CUDAGraph:
        b, temperature, top_p = key
        saved = [t[:b].clone() for t in self.state]
        side = warm_up_stream(self.weights.device)
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up outside the graph: library handles, kernel choices
            self.step(b, temperature, top_p)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            self.step(b, temperature, top_p)
        self.pool = graph.pool()
        for t, s in zip(self.state, saved):  # the warm-up advanced live rows; put them back
            t[:b] = s
        self.captured[key] = graph
        return graph

    def move(self, src: Tensor, dst: Tensor) -> None:
        """Copy rows from slots `src` into slots `dst` (packing live rows low)."""
        for t in self.state:
            t[dst] = t[src]
        self.cache[:, :, dst] = self.cache[:, :, src]
