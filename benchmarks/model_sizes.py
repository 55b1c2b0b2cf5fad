"""The Llama architectures that benchmarks train or sample as random-weight copies: SmolLM2's sizes (each size's
config.json) and Llama-2-13B's, a model whose plain AdamW state (16 bytes a parameter) does not fit one card.

Imports nothing beyond the standard library at module level, so a script that needs only torch and transformers
(`train_profile.py` on a bare GPU image) can use it.
"""

from __future__ import annotations

SMOLLM2_135M = dict(
    vocab_size=49152,
    hidden_size=576,
    intermediate_size=1536,
    num_hidden_layers=30,
    num_attention_heads=9,
    num_key_value_heads=3,
    max_position_embeddings=8192,
    rms_norm_eps=1e-5,
    rope_theta=100000.0,
    tie_word_embeddings=True,
)

# All sizes share the 135M's vocabulary, norm epsilon and tied embeddings.
SMOLLM2 = {
    "135M": SMOLLM2_135M,
    "360M": {
        **SMOLLM2_135M,
        "hidden_size": 960,
        "intermediate_size": 2560,
        "num_hidden_layers": 32,
        "num_attention_heads": 15,
        "num_key_value_heads": 5,
    },
    "1.7B": {
        **SMOLLM2_135M,
        "hidden_size": 2048,
        "intermediate_size": 8192,
        "num_hidden_layers": 24,
        "num_attention_heads": 32,
        "num_key_value_heads": 32,
        "rope_theta": 130000.0,
    },
}


LLAMA2_13B = dict(
    vocab_size=32000,
    hidden_size=5120,
    intermediate_size=13824,
    num_hidden_layers=40,
    num_attention_heads=40,
    num_key_value_heads=40,
    max_position_embeddings=4096,
    rms_norm_eps=1e-5,
    rope_theta=10000.0,
    tie_word_embeddings=False,
)

ARCHITECTURES = {
    **{size: (f"SmolLM2-{size}", shape) for size, shape in SMOLLM2.items()},
    "13B": ("Llama-2-13B", LLAMA2_13B),
}
"""`--arch` name -> (the model whose architecture it is, its LlamaConfig keywords)."""


def llama_config(arch: str):
    """The `transformers.LlamaConfig` of an architecture of `ARCHITECTURES` (SDPA attention)."""
    from transformers import LlamaConfig

    return LlamaConfig(**ARCHITECTURES[arch][1], attn_implementation="sdpa")
