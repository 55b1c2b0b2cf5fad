"""The Llama forward pass written for decoding: weights read out of a Hugging Face `LlamaForCausalLM`.

Two entry points share the layer math: `prefill` runs whole prompts (eager, once per newcomer) and
writes their keys and values into a static cache; `decode` advances one token for each of the
first `b` cache slots, each at its own position, with only static shapes and no host reads, so it
can be captured once in a CUDA graph and replayed. The cache is one tensor (layers, 2, slots,
positions, kv heads, head dim): moving a row between slots is one copy. The arithmetic follows
transformers' Llama (RMSNorm in float32, rotary embeddings from the model's own `inv_freq` and
scaling, grouped-query attention), so greedy tokens agree with the Hugging Face model.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn.attention import SDPBackend, sdpa_kernel

from aitp.policies.fast.attention import rotate, split_heads

ROPE_TYPES = ("default", "linear", "llama3", "yarn")  # those whose frequencies do not change with length
# The attention kernels a prefill pass may use: any but cuDNN's. torch prefers cuDNN's on Hopper, and cuDNN
# builds an execution plan for every new shape (prompts x width) before it runs one, which costs far more
# than running that shape again. A rollout call admits rows again whenever a sixteenth of its slots has
# freed, a few dozen prompts of a new width each time, so a loop's call paid a plan at every refill, and so
# did its shard's first call anywhere (benchmarks/results/history-rollouts-in-loop.md). Flash attention
# sets nothing up per shape.
PREFILL_ATTENTION = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


def supports(model) -> bool:
    """Whether this decoder can run `model`: a Llama-family causal LM with SiLU MLP and static rotary."""
    config = getattr(model, "config", None)
    if config is None or getattr(config, "model_type", None) != "llama":
        return False
    rotary = getattr(getattr(model, "model", None), "rotary_emb", None)
    rope_type = getattr(rotary, "rope_type", "default")
    return config.hidden_act == "silu" and not getattr(config, "mlp_bias", False) and rope_type in ROPE_TYPES


@dataclass
class Layer:
    """One decoder layer: norms, fused q/k/v and gate/up projections, output and down projections."""

    ln_attn: Tensor
    wqkv: Tensor
    bqkv: Tensor | None
    wo: Tensor
    bo: Tensor | None
    ln_mlp: Tensor
    w_gate_up: Tensor
    w_down: Tensor


class LlamaWeights:
    """A Llama model's weights laid out for decoding; `refresh` copies the model's current values in.

    The fused q/k/v and gate/up matrices are copies (one matmul instead of three or two); the other
    tensors are the model's own parameters. Refreshing in place keeps every captured graph valid.
    """

    def __init__(self, model) -> None:
        config = model.config
        self.model = model
        self.n_heads = config.num_attention_heads
        self.n_kv = config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.n_heads
        self.eps = config.rms_norm_eps
        self.vocab = model.lm_head.weight.shape[0]
        self.max_positions = config.max_position_embeddings
        inner = model.model
        self.embed = inner.embed_tokens.weight
        self.norm = inner.norm.weight
        self.lm_head = model.lm_head.weight
        self.layers = [self._layer(block) for block in inner.layers]
        self.dtype = self.embed.dtype
        self.device = self.embed.device
        rotary = inner.rotary_emb
        freqs = torch.outer(torch.arange(self.max_positions, device=self.device).float(), rotary.inv_freq.float())
        angles = torch.cat([freqs, freqs], dim=-1)
        self.cos = (angles.cos() * rotary.attention_scaling).to(self.dtype)
        self.sin = (angles.sin() * rotary.attention_scaling).to(self.dtype)

    @staticmethod
    def _layer(block) -> Layer:
        att, mlp = block.self_attn, block.mlp
        proj = (att.q_proj, att.k_proj, att.v_proj)
        bias = None if att.q_proj.bias is None else torch.cat([p.bias for p in proj]).detach().clone()
        return Layer(
            ln_attn=block.input_layernorm.weight,
            wqkv=torch.cat([p.weight for p in proj]).detach().clone(),
            bqkv=bias,
            wo=att.o_proj.weight,
            bo=att.o_proj.bias,
            ln_mlp=block.post_attention_layernorm.weight,
            w_gate_up=torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]).detach().clone(),
            w_down=mlp.down_proj.weight,
        )

    def refresh(self) -> None:
        """Copy the model's current q/k/v and gate/up weights into the fused copies (after training)."""
        for layer, block in zip(self.layers, self.model.model.layers):
            att, mlp = block.self_attn, block.mlp
            layer.wqkv.copy_(torch.cat([att.q_proj.weight, att.k_proj.weight, att.v_proj.weight]))
            if layer.bqkv is not None:
                layer.bqkv.copy_(torch.cat([att.q_proj.bias, att.k_proj.bias, att.v_proj.bias]))
            layer.w_gate_up.copy_(torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]))

    def kv_bytes_per_row(self, positions: int) -> int:
        """Bytes of cache one row of `positions` positions takes."""
        return len(self.layers) * 2 * positions * self.n_kv * self.head_dim * self.dtype.itemsize

    def new_cache(self, slots: int, positions: int) -> Tensor:
        """A zeroed cache (layers, 2, slots, positions, kv heads, head dim)."""
        shape = (len(self.layers), 2, slots, positions, self.n_kv, self.head_dim)
        return torch.zeros(shape, dtype=self.dtype, device=self.device)


def rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    """RMSNorm as Llama computes it: normalise in float32, round, then scale."""
    normed = x.float()
    normed = normed * torch.rsqrt(normed.pow(2).mean(-1, keepdim=True) + eps)
    return weight * normed.to(x.dtype)


def swiglu(gate_up: Tensor) -> Tensor:
    """SiLU(gate) * up from the fused projection."""
    gate, up = gate_up.chunk(2, dim=-1)
    return F.silu(gate) * up


def eager(fn):
    """The pieces of a pass as they are (the `fuse` that compiles nothing)."""
    return fn


def prefill(
    w: LlamaWeights, cache: Tensor, ids: Tensor, lengths: Tensor, slots: Tensor, source: Tensor, fuse=eager
) -> Tensor:
    """Run right-padded prompts `ids` (N, P) of `lengths`; write their keys/values into cache `slots`.

    Slot `slots[j]` receives prompt `source[j]` (a prompt sampled n times fills n slots from one
    pass). Returns the logits after each prompt's last token, (N, V), in float32. `fuse` may compile
    the pieces around the matmuls, as in `decode` (eager, their elementwise kernels over every
    prompt token were most of a large batch's prefill time).
    """
    n, width = ids.shape
    x = F.embedding(ids, w.embed)
    cos, sin = w.cos[:width, None], w.sin[:width, None]
    # Prompts are right-padded, so a causal mask alone keeps every real query off the padding: the
    # padded queries' outputs and their cache entries are never read (decoding starts at each
    # prompt's length and overwrites from there). Without an explicit mask SDPA can use flash attention.
    with sdpa_kernel(PREFILL_ATTENTION):
        for i, layer in enumerate(w.layers):
            q, k, v = fuse(attention_in)(x, layer.ln_attn, layer.wqkv, layer.bqkv, cos, sin, w.eps, w.n_heads)
            cache[i, 0, slots, :width] = k[source]
            cache[i, 1, slots, :width] = v[source]
            out = F.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True, enable_gqa=True
            )
            x = fuse(attention_out)(
                x, out.transpose(1, 2), layer.wo, layer.bo, layer.ln_mlp, layer.w_gate_up, layer.w_down, w.eps
            )
    return logits_out(x[torch.arange(n, device=ids.device), lengths - 1], w.norm, w.lm_head, w.eps).float()


def project_in(x: Tensor, ln: Tensor, w: Tensor, b: Tensor | None, eps: float) -> Tensor:
    """Norm and projection: the fused q/k/v of a layer, or the logits after the final norm."""
    return F.linear(rms_norm(x, ln, eps), w, b)


def attention_in(
    x: Tensor, ln: Tensor, wqkv: Tensor, bqkv: Tensor | None, cos: Tensor, sin: Tensor, eps: float, n_heads: int
) -> tuple[Tensor, Tensor, Tensor]:
    """Norm, fused q/k/v projection and rotary embedding: q, k, v (prefill)."""
    q, k, v = split_heads(project_in(x, ln, wqkv, bqkv, eps), n_heads, cos.shape[-1])
    return rotate(q, cos, sin), rotate(k, cos, sin), v


def attention_out(
    x: Tensor, o: Tensor, wo: Tensor, bo: Tensor | None, ln: Tensor, w_gate_up: Tensor, w_down: Tensor, eps: float
) -> Tensor:
    """Output projection, residual, norm, SwiGLU MLP and residual."""
    x = x + F.linear(o.flatten(-2), wo, bo)
    return x + F.linear(swiglu(F.linear(rms_norm(x, ln, eps), w_gate_up)), w_down)


def out_then_in(x: Tensor, o: Tensor, out_weights: tuple, ln_next: Tensor, w_next: Tensor, b_next, eps: float):
    """A layer's output half, then the next projection (next layer's q/k/v, or the logits): (x, projection).

    Compiled together, the last residual add and the next norm become one kernel.
    """
    x = attention_out(x, o, *out_weights, eps)
    return x, project_in(x, ln_next, w_next, b_next, eps)


def logits_out(x: Tensor, norm: Tensor, lm_head: Tensor, eps: float) -> Tensor:
    """Final norm and the vocabulary projection."""
    return project_in(x, norm, lm_head, None, eps)


def decode(w: LlamaWeights, tokens: Tensor, positions: Tensor, attend, fuse=eager) -> Tensor:
    """One token for each of the first b slots (b = len(tokens)) at its own position; (b, V) logits.

    `attend(layer, qkv, positions)` rotates, writes that layer's cache for the first b slots and
    attends up to each position; `fuse` may compile the pieces around the matmuls (the cache writes
    and the attention stay outside, so a compiled piece never copies the cache).
    """
    x = F.embedding(tokens, w.embed)
    first = w.layers[0]
    qkv = fuse(project_in)(x, first.ln_attn, first.wqkv, first.bqkv, w.eps)
    step = fuse(out_then_in)
    for i, layer in enumerate(w.layers):
        o = attend(i, qkv, positions)
        out_weights = (layer.wo, layer.bo, layer.ln_mlp, layer.w_gate_up, layer.w_down)
        if i + 1 < len(w.layers):
            nxt = w.layers[i + 1]
            x, qkv = step(x, o, out_weights, nxt.ln_attn, nxt.wqkv, nxt.bqkv, w.eps)
        else:
            x, qkv = step(x, o, out_weights, w.norm, w.lm_head, None, w.eps)
    return qkv
