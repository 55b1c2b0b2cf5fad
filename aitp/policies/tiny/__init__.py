"""The built-in byte-level transformer: model, KV-cache sampler, checkpoints, and its `Policy`."""

from aitp.policies.tiny.checkpoint import load_checkpoint, save_checkpoint
from aitp.policies.tiny.model import TinyConfig, TinyTransformer
from aitp.policies.tiny.policy import TinyPolicy, chat_example

__all__ = ["TinyConfig", "TinyPolicy", "TinyTransformer", "chat_example", "load_checkpoint", "save_checkpoint"]
