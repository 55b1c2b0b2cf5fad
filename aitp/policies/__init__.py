"""Policies: one sampling protocol over the built-in model, Hugging Face checkpoints and OpenAI-compatible servers."""

from aitp.policies.base import Completion, Policy, SamplingParams

__all__ = ["Completion", "Policy", "SamplingParams"]
