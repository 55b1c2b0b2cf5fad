"""A throughput decoder for Llama-family Hugging Face models: static cache, captured steps, continuous batching."""

from aitp.policies.fast.batching import FastSampler
from aitp.policies.fast.llama import supports

__all__ = ["FastSampler", "supports"]
