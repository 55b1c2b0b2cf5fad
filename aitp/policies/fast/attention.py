"""Decode attention over the static cache: one new token per row, written into the cache and attended.

`attend(layer, qkv, positions)` takes the fused q/k/v projection of one token per row (before the
rotary embedding), rotates q and k at each row's position, writes k and v into that layer's cache
at that position and attends over positions [0, position]. On CUDA in half precision one Triton
kernel does all of it, reading each row's keys and values once per kv head and only up to the
row's length (the query heads that share a kv head are handled together): a large-batch decode
step spends most of its time here, and a small one in kernel launches, which the fusion saves (no
separate rotary or cache-write kernels). Elsewhere (CPU, float32, no Triton) the same steps run in
PyTorch with SDPA over a mask of the filled positions. The cache of one layer is
(slots, positions, kv heads, head dim).
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
NUM_WARPS = 2  # with BLOCK_N 64, the fastest of 32/64/128 x 2/4/8 (benchmarks/results/history-rollouts.md)


def split_heads(qkv: Tensor, n_heads: int, head_dim: int) -> tuple[Tensor, Tensor, Tensor]:
    """q (…, heads, D), k and v (…, kv heads, D) out of the fused projection's last axis."""
    n_kv = (qkv.shape[-1] // head_dim - n_heads) // 2
    return qkv.unflatten(-1, (n_heads + 2 * n_kv, head_dim)).split([n_heads, n_kv, n_kv], dim=-2)


def rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotary embedding on (..., heads, head dim) with cos/sin broadcast over heads."""
    half = x.shape[-1] // 2
    return x * cos + torch.cat([-x[..., half:], x[..., :half]], dim=-1) * sin


def attention(cache: Tensor, scale: float, cos: Tensor, sin: Tensor, n_heads: int):
    """The attention function `decode` calls: `attend(layer, qkv, positions) -> (rows, heads, head dim)`.

    `cache` is (layers, 2, slots, positions, kv heads, head dim); `cos`/`sin` the rotary tables
    (max positions, head dim).
    """
    half = cache.dtype in (torch.float16, torch.bfloat16)
    dim = cache.shape[-1]
    if triton is not None and cache.is_cuda and half and dim == triton.next_power_of_2(dim):
        return _triton_attention(cache, scale, cos, sin, n_heads)
    return masked_attention(cache, scale, cos, sin, n_heads)


def masked_attention(cache: Tensor, scale: float, cos: Tensor, sin: Tensor, n_heads: int):
    """PyTorch steps and SDPA over the whole cache width with a mask of the filled positions (any device)."""
    dim = cache.shape[-1]

    def attend(layer: int, qkv: Tensor, positions: Tensor) -> Tensor:
        b = qkv.shape[0]
        q, k, v = split_heads(qkv, n_heads, dim)
        c, s = cos[positions, None], sin[positions, None]
        q, k = rotate(q, c, s), rotate(k, c, s)
        rows = torch.arange(b, device=qkv.device)
        cache[layer, 0, rows, positions] = k.to(cache.dtype)
        cache[layer, 1, rows, positions] = v.to(cache.dtype)
        keys, values = cache[layer, 0, :b], cache[layer, 1, :b]  # (b, S, kv, D)
        n_kv = keys.shape[2]
        filled = torch.arange(keys.shape[1], device=qkv.device)[None, :] <= positions[:, None]
        # Fold each kv head's query group into the query axis: every key is read once per kv head.
        qg = q.reshape(b, n_kv, n_heads // n_kv, dim).to(cache.dtype)
        out = F.scaled_dot_product_attention(
            qg, keys.transpose(1, 2), values.transpose(1, 2), attn_mask=filled[:, None, None], scale=scale
        )
        return out.reshape(b, n_heads, dim)

    return attend


def _triton_attention(cache: Tensor, scale: float, cos: Tensor, sin: Tensor, n_heads: int):
    n_kv, dim = cache.shape[-2], cache.shape[-1]
    group = n_heads // n_kv
    cos, sin = cos.contiguous(), sin.contiguous()

    def attend(layer: int, qkv: Tensor, positions: Tensor) -> Tensor:
        b = qkv.shape[0]
        qkv = qkv.contiguous()
        k, v = cache[layer, 0], cache[layer, 1]
        out = torch.empty(b, n_heads, dim, dtype=cache.dtype, device=qkv.device)
        _decode_kernel[(b, n_kv)](
            qkv,
            k,
            v,
            out,
            positions,
            cos,
            sin,
            scale,
            qkv.stride(0),
            k.stride(0),
            k.stride(1),
            k.stride(2),
            out.stride(0),
            out.stride(1),
            N_HEADS=n_heads,
            N_KV=n_kv,
            GROUP=group,
            GROUP_PAD=max(16, triton.next_power_of_2(group)),
            DIM=dim,
            BLOCK_N=BLOCK_N,
            num_warps=NUM_WARPS,
            num_stages=2,
        )
        return out

    return attend


if triton is not None:

    @triton.jit
    def _rotated(Ptr, offs, dd, mask, cos, sin, DIM: tl.constexpr):
        # x * cos + rotate_half(x) * sin; `dd` is each offset's index along the head dim.
        partner = offs - dd + (dd + DIM // 2) % DIM
        sign = tl.where(dd < DIM // 2, -1.0, 1.0)
        x = tl.load(Ptr + offs, mask=mask, other=0.0).to(tl.float32)
        x_half = tl.load(Ptr + partner, mask=mask, other=0.0).to(tl.float32)
        return (x * cos + x_half * sign * sin).to(Ptr.dtype.element_ty)

    @triton.jit
    def _decode_kernel(
        QKV,
        K,
        V,
        Out,
        Positions,
        Cos,
        Sin,
        scale,
        stride_xb,
        stride_kb,
        stride_ks,
        stride_kh,
        stride_ob,
        stride_oh,
        N_HEADS: tl.constexpr,
        N_KV: tl.constexpr,
        GROUP: tl.constexpr,
        GROUP_PAD: tl.constexpr,
        DIM: tl.constexpr,
        BLOCK_N: tl.constexpr,
    ):
        # One program per (row, kv head): rotate its GROUP query heads and its key, store the key and
        # value at the row's position, then online softmax over the new key and keys [0, position).
        row = tl.program_id(0)
        kv_head = tl.program_id(1)
        pos = tl.load(Positions + row).to(tl.int32)
        g = tl.arange(0, GROUP_PAD)
        d = tl.arange(0, DIM)
        heads = kv_head * GROUP + g
        x = QKV + row * stride_xb
        cos = tl.load(Cos + pos * DIM + d).to(tl.float32)
        sin = tl.load(Sin + pos * DIM + d).to(tl.float32)
        q_offs = heads[:, None] * DIM + d[None, :]
        dd = q_offs % DIM
        q = _rotated(x, q_offs, dd, (g < GROUP)[:, None], cos[None, :], sin[None, :], DIM)
        k_new = _rotated(x, (N_HEADS + kv_head) * DIM + d, d, d < DIM, cos, sin, DIM)
        v_new = tl.load(x + (N_HEADS + N_KV + kv_head) * DIM + d)
        base = row * stride_kb + kv_head * stride_kh
        tl.store(K + base + pos * stride_ks + d, k_new)
        tl.store(V + base + pos * stride_ks + d, v_new)
        # The new key's score starts the running maximum; its value starts the accumulator.
        best = tl.sum(q.to(tl.float32) * k_new.to(tl.float32)[None, :], axis=1) * scale
        total = tl.full((GROUP_PAD,), 1.0, tl.float32)
        acc = tl.zeros((GROUP_PAD, DIM), tl.float32) + v_new.to(tl.float32)[None, :]
        for start in range(0, pos, BLOCK_N):
            n = start + tl.arange(0, BLOCK_N)
            inside = n < pos
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
