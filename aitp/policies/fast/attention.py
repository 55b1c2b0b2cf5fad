"""Decode attention over the static cache: one query token per row against that row's filled positions.

On CUDA in half precision a Triton kernel reads each row's keys and values once per kv head and
only up to the row's length (the query heads that share a kv head are handled together), which is
where a large-batch decode step spends its time. Elsewhere (CPU, float32, no Triton) SDPA with a
mask of the filled positions gives the same result. Both take the cache of one layer as
(slots, positions, kv heads, head dim) and queries as (rows, heads, head dim).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only installs: the masked path serves
    triton = None

BLOCK_N = 64  # keys per step of the kernel's loop


def attention(cache: Tensor, scale: float):
    """The attention function `decode` calls: `attend(layer, q, lengths) -> (rows, heads, head dim)`."""
    half = cache.dtype in (torch.float16, torch.bfloat16)
    dim = cache.shape[-1]
    if triton is not None and cache.is_cuda and half and dim == triton.next_power_of_2(dim):
        return _triton_attention(cache, scale)
    return masked_attention(cache, scale)


def masked_attention(cache: Tensor, scale: float):
    """SDPA over the whole cache width with a mask of the filled positions (any device, any dtype)."""

    def attend(layer: int, q: Tensor, lengths: Tensor) -> Tensor:
        b, heads, dim = q.shape
        k, v = cache[layer, 0, :b], cache[layer, 1, :b]  # (b, S, kv, D)
        n_kv = k.shape[2]
        filled = torch.arange(k.shape[1], device=q.device)[None, :] < lengths[:, None]
        # Fold each kv head's query group into the query axis: every key is read once per kv head.
        qg = q.view(b, n_kv, heads // n_kv, dim)
        out = F.scaled_dot_product_attention(
            qg, k.transpose(1, 2), v.transpose(1, 2), attn_mask=filled[:, None, None], scale=scale
        )
        return out.reshape(b, heads, dim)

    return attend


def _triton_attention(cache: Tensor, scale: float):
    n_kv, dim = cache.shape[-2], cache.shape[-1]

    def attend(layer: int, q: Tensor, lengths: Tensor) -> Tensor:
        b, heads, _ = q.shape
        group = heads // n_kv
        k, v = cache[layer, 0], cache[layer, 1]
        out = torch.empty_like(q)
        _decode_kernel[(b, n_kv)](
            q,
            k,
            v,
            out,
            lengths,
            scale,
            q.stride(0),
            q.stride(1),
            k.stride(0),
            k.stride(1),
            k.stride(2),
            out.stride(0),
            out.stride(1),
            GROUP=group,
            GROUP_PAD=max(16, triton.next_power_of_2(group)),
            DIM=dim,
            BLOCK_N=BLOCK_N,
            num_warps=4,
            num_stages=2,
        )
        return out

    return attend


if triton is not None:

    @triton.jit
    def _decode_kernel(
        Q,
        K,
        V,
        Out,
        Lengths,
        scale,
        stride_qb,
        stride_qh,
        stride_kb,
        stride_ks,
        stride_kh,
        stride_ob,
        stride_oh,
        GROUP: tl.constexpr,
        GROUP_PAD: tl.constexpr,
        DIM: tl.constexpr,
        BLOCK_N: tl.constexpr,
    ):
        # One program per (row, kv head): its GROUP query heads against keys [0, length), online softmax.
        row = tl.program_id(0)
        kv_head = tl.program_id(1)
        length = tl.load(Lengths + row).to(tl.int32)
        g = tl.arange(0, GROUP_PAD)
        d = tl.arange(0, DIM)
        heads = kv_head * GROUP + g
        q = tl.load(Q + row * stride_qb + heads[:, None] * stride_qh + d[None, :], mask=(g < GROUP)[:, None], other=0.0)
        best = tl.full((GROUP_PAD,), float("-inf"), tl.float32)
        total = tl.zeros((GROUP_PAD,), tl.float32)
        acc = tl.zeros((GROUP_PAD, DIM), tl.float32)
        base = row * stride_kb + kv_head * stride_kh
        for start in range(0, length, BLOCK_N):
            n = start + tl.arange(0, BLOCK_N)
            inside = n < length
            offsets = base + n[:, None] * stride_ks + d[None, :]
            k = tl.load(K + offsets, mask=inside[:, None], other=0.0)
            scores = tl.dot(q, tl.trans(k)) * scale
            scores = tl.where(inside[None, :], scores, float("-inf"))
            new_best = tl.maximum(best, tl.max(scores, axis=1))
            p = tl.exp(scores - new_best[:, None])
            shrink = tl.exp(best - new_best)
            v = tl.load(V + offsets, mask=inside[:, None], other=0.0)
            acc = acc * shrink[:, None] + tl.dot(p.to(v.dtype), v)
            total = total * shrink + tl.sum(p, axis=1)
            best = new_best
        out = acc / total[:, None]
        tl.store(
            Out + row * stride_ob + heads[:, None] * stride_oh + d[None, :],
            out.to(Out.dtype.element_ty),
            mask=(g < GROUP)[:, None],
        )
