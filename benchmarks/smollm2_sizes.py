"""SmolLM2's architectures (each size's config.json), for benchmarks that train or sample random-weight copies.

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


def llama_config(arch: str):
    """The `transformers.LlamaConfig` of a SmolLM2 size (SDPA attention)."""
    from transformers import LlamaConfig

    return LlamaConfig(**SMOLLM2[arch], attn_implementation="sdpa")
