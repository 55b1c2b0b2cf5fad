"""The built-in policy network: a small decoder-only transformer over the byte tokenizer.

Pre-norm blocks (RMSNorm), rotary positions, causal attention through
`scaled_dot_product_attention`, a GELU MLP and an untied output head. The same `forward` serves
training (a plain causal pass over right-padded batches) and sampling (left-padded prompts with
per-row positions, a key-validity mask and a KV cache that the sampler owns).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from aitp.errors import AitpError
from aitp.tokenizer import ByteTokenizer


class TinyConfigError(AitpError):
    """A tiny-model configuration that cannot build a model."""


@dataclass
class TinyConfig:
    """Sizes of the built-in transformer; the defaults give ~2.9M parameters that train on a laptop CPU."""

    vocab_size: int = ByteTokenizer().vocab_size
    """Number of token ids: 256 bytes plus the byte tokenizer's special tokens."""
    n_layer: int = 4
    """Number of transformer blocks."""
    n_head: int = 4
    """Attention heads per block; `d_model` must be divisible by it (and the head size even, for rotary)."""
    n_kv_head: int = 1
    """Key/value heads (grouped-query attention; must divide `n_head`): fewer shrink the KV cache that
    sampling reads every token, which bounds its speed on a CPU."""
    d_model: int = 256
    """Width of the residual stream."""
    max_seq_len: int = 1024
    """Longest sequence (prompt plus completion) the model is used on; sizes the rotary tables."""
    mlp_ratio: int = 4
    """Hidden width of the MLP as a multiple of `d_model`."""
    rope_base: float = 10000.0
    """Base of the rotary position frequencies."""
    dropout: float = 0.0
    """Dropout on attention outputs and MLP outputs during training (0 turns it off)."""
    init_std: float = 0.02
    """Standard deviation of the normal initialisation of linear and embedding weights."""

    def __post_init__(self) -> None:
        if self.n_layer < 1 or self.n_head < 1 or self.d_model < 2 or self.max_seq_len < 2:
            raise TinyConfigError("tiny model sizes must be positive: set n_layer, n_head, d_model, max_seq_len >= 1")
        if self.n_kv_head < 1 or self.n_head % self.n_kv_head:
            raise TinyConfigError(f"n_kv_head={self.n_kv_head} must divide n_head={self.n_head}: pick a divisor")
        if self.d_model % self.n_head or (self.d_model // self.n_head) % 2:
            raise TinyConfigError(
                f"d_model={self.d_model} must split into {self.n_head} heads of even size: "
                "pick d_model divisible by 2 * n_head"
            )

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_head

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> TinyConfig:
        """Build from a dict, naming any unknown key instead of ignoring it."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise TinyConfigError(f"unknown tiny model config keys {unknown}: use only {sorted(known)}")
        return cls(**data)


class KVCache:
    """Preallocated keys and values for every layer: (layer, batch, head, position, head_dim)."""

    def __init__(self, config: TinyConfig, batch: int, capacity: int, device, dtype) -> None:
        shape = (config.n_layer, batch, config.n_kv_head, capacity, config.head_dim)
        self.k = torch.zeros(shape, device=device, dtype=dtype)
        self.v = torch.zeros(shape, device=device, dtype=dtype)
        self.length = 0

    def write(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Store this step's keys/values of `layer` and return all of them so far."""
        end = self.length + k.shape[2]
        self.k[layer, :, :, self.length : end] = k
        self.v[layer, :, :, self.length : end] = v
        return self.k[layer, :, :, :end], self.v[layer, :, :, :end]

    def select(self, rows: Tensor) -> None:
        """Keep only batch rows `rows` (in that order): drops finished or duplicates prompt rows."""
        self.k = self.k.index_select(1, rows)
        self.v = self.v.index_select(1, rows)


def rope_tables(config: TinyConfig, device=None) -> tuple[Tensor, Tensor]:
    """cos and sin of the rotary angles, (max_seq_len, head_dim / 2)."""
    half = config.head_dim // 2
    freqs = config.rope_base ** (-torch.arange(half, dtype=torch.float64, device=device) / half)
    angles = torch.outer(torch.arange(config.max_seq_len, dtype=torch.float64, device=device), freqs)
    return angles.cos().float(), angles.sin().float()


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate pairs (first half, second half) of the head dimension; cos/sin are (B, T, hd/2)."""
    a, b = x.chunk(2, dim=-1)
    cos, sin = cos.unsqueeze(1).to(x.dtype), sin.unsqueeze(1).to(x.dtype)
    return torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1)


class Attention(nn.Module):
    def __init__(self, config: TinyConfig) -> None:
        super().__init__()
        self.n_head, self.n_kv_head, self.head_dim = config.n_head, config.n_kv_head, config.head_dim
        self.qkv = nn.Linear(config.d_model, (config.n_head + 2 * config.n_kv_head) * config.head_dim, bias=False)
        self.proj = nn.Linear(config.d_model, config.d_model, bias=False)
        self.dropout = config.dropout

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, mask: Tensor | None, cache: KVCache | None, layer: int):
        B, T, D = x.shape
        H, KV, hd = self.n_head, self.n_kv_head, self.head_dim
        q, k, v = self.qkv(x).split([H * hd, KV * hd, KV * hd], dim=-1)
        q = apply_rope(q.view(B, T, H, hd).transpose(1, 2), cos, sin)
        k = apply_rope(k.view(B, T, KV, hd).transpose(1, 2), cos, sin)
        v = v.view(B, T, KV, hd).transpose(1, 2)
        if cache is not None:
            k, v = cache.write(layer, k, v)
        drop = self.dropout if self.training else 0.0
        if KV < H and T == 1 and mask is not None:
            # One new token: the query heads sharing a KV head become that head's queries, so the
            # cache is read once per KV head and never copied.
            y = F.scaled_dot_product_attention(q.reshape(B, KV, H // KV, hd), k, v, attn_mask=mask).reshape(B, H, 1, hd)
        else:
            if KV < H:
                k, v = k.repeat_interleave(H // KV, dim=1), v.repeat_interleave(H // KV, dim=1)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None, dropout_p=drop)
        return self.proj(y.transpose(1, 2).reshape(B, T, D))


class Block(nn.Module):
    def __init__(self, config: TinyConfig) -> None:
        super().__init__()
        self.attn_norm = nn.RMSNorm(config.d_model)
        self.attn = Attention(config)
        self.mlp_norm = nn.RMSNorm(config.d_model)
        hidden = config.mlp_ratio * config.d_model
        self.mlp = nn.Sequential(
            nn.Linear(config.d_model, hidden, bias=False),
            nn.GELU(approximate="tanh"),
            nn.Linear(hidden, config.d_model, bias=False),
            nn.Dropout(config.dropout),
        )

    def forward(self, x, cos, sin, mask, cache, layer):
        x = x + self.attn(self.attn_norm(x), cos, sin, mask, cache, layer)
        return x + self.mlp(self.mlp_norm(x))


class TinyTransformer(nn.Module):
    """Decoder-only transformer: `model(input_ids) -> logits`, `model.loss(input_ids, target_mask)`."""

    def __init__(self, config: TinyConfig | None = None) -> None:
        super().__init__()
        # Denormal floats, which appear as training goes on, made CPU training several times slower;
        # flushing them to zero costs nothing here (process-wide, and a no-op where unsupported).
        torch.set_flush_denormal(True)
        self.config = config = config or TinyConfig()
        self.embed = nn.Embedding(config.vocab_size, config.d_model)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.norm = nn.RMSNorm(config.d_model)
        self.head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        cos, sin = rope_tables(config)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Normal init; output projections of each block scaled down by depth (GPT-2's residual rule)."""
        std = self.config.init_std
        for name, p in self.named_parameters():
            if p.dim() < 2:
                continue
            scale = 1 / math.sqrt(2 * self.config.n_layer) if name.endswith(("proj.weight", "mlp.2.weight")) else 1
            nn.init.normal_(p, std=std * scale)

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    @property
    def device(self) -> torch.device:
        return self.embed.weight.device

    def forward(
        self,
        input_ids: Tensor,
        positions: Tensor | None = None,
        key_valid: Tensor | None = None,
        cache: KVCache | None = None,
    ) -> Tensor:
        """Logits (B, T, vocab) for `input_ids` (B, T).

        Training calls it with `input_ids` alone: positions 0..T-1 and plain causal attention, so
        right padding needs no mask. Sampling passes per-row `positions` (B, T), `key_valid` (B, K):
        which of the K keys (cached plus new) are real tokens rather than left padding, and a cache.
        """
        B, T = input_ids.shape
        past = cache.length if cache is not None else 0
        if positions is None:
            if past + T > self.config.max_seq_len:
                raise TinyConfigError(
                    f"sequence of {past + T} tokens exceeds the model's max_seq_len "
                    f"{self.config.max_seq_len}: shorten it or use a model with a longer context"
                )
            positions = torch.arange(past, past + T, device=input_ids.device).expand(B, T)
        mask = None
        if key_valid is not None or past:
            mask = attention_mask(T, past, key_valid, B, input_ids.device)
        cos, sin = self.rope_cos[positions], self.rope_sin[positions]
        x = self.embed(input_ids)
        for layer, block in enumerate(self.blocks):
            x = block(x, cos, sin, mask, cache, layer)
        if cache is not None:
            cache.length += T
        return self.head(self.norm(x))

    def token_logprobs(self, input_ids: Tensor) -> Tensor:
        """log p(input_ids[:, t] | input_ids[:, :t]) for t >= 1: shape (B, T - 1); sum under a mask for DPO."""
        logits = self(input_ids[:, :-1]).float()
        return -F.cross_entropy(logits.transpose(1, 2), input_ids[:, 1:], reduction="none")

    def loss(self, input_ids: Tensor, target_mask: Tensor) -> Tensor:
        """Mean next-token cross-entropy over the tokens where `target_mask` (B, T) is true.

        `target_mask[b, t]` marks token t as one to learn (a completion token, not prompt or
        padding); the first position is never a target since nothing precedes it.
        """
        weights = target_mask[:, 1:].to(torch.float32)
        nll = -self.token_logprobs(input_ids)
        return (nll * weights).sum() / weights.sum().clamp(min=1.0)


def attention_mask(T: int, past: int, key_valid: Tensor | None, B: int, device) -> Tensor:
    """Boolean (B, 1, T, past + T) mask: causal, over valid keys; a pad query sees itself (no empty row)."""
    K = past + T
    q_idx = torch.arange(past, K, device=device)[:, None]
    k_idx = torch.arange(K, device=device)[None, :]
    causal = k_idx <= q_idx
    if key_valid is None:
        return causal.expand(B, 1, T, K)
    return (causal & key_valid[:, None, None, :]) | (k_idx == q_idx)
