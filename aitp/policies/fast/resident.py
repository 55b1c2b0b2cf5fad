"""One decoder per process and architecture, whose engine and captured graphs outlive a checkpoint.

The loop loads a new checkpoint every iteration (and a champion beside a challenger). Building a
decoder for each would capture its decode steps again (seconds per bucket) and, in a fresh process,
compile them (tens of seconds): more than a shard of rollouts takes to decode. Instead a process
keeps one private copy of the model per architecture; before every call the calling policy's
weights are copied into it (a device-side copy, small beside a call), so the graphs, which
read the private copy's tensors, stay valid and no policy's own weights are ever written. Calls in one
process take turns (a GPU worker runs one shard at a time anyway). The cost is one more copy of the
weights on the card.
"""

from __future__ import annotations

import copy
import hashlib
import threading
from typing import Any

import torch

from aitp.policies.fast.batching import CallStats, FastSampler
from aitp.policies.fast.engine import Engine

_RESIDENT: dict[tuple, tuple[FastSampler, torch.nn.Module]] = {}
_LOCK = threading.Lock()


def architecture(model: torch.nn.Module) -> tuple:
    """What must match for two models to share a decoder: parameter layout, rotary table, norms, device."""
    params = tuple((name, tuple(p.shape), str(p.dtype)) for name, p in model.named_parameters())
    rotary = model.model.rotary_emb
    table = hashlib.sha256(rotary.inv_freq.float().cpu().numpy().tobytes()).hexdigest()
    config = model.config
    heads = (config.num_attention_heads, config.num_key_value_heads, config.max_position_embeddings)
    numerics = (config.rms_norm_eps, float(getattr(rotary, "attention_scaling", 1.0)), table)
    return params, heads, numerics, str(next(model.parameters()).device)


def _resident(model: torch.nn.Module, max_slots: int | None) -> FastSampler:
    """The process's decoder for `model`'s architecture (made on first use, from a private copy); hold `_LOCK`."""
    key = (architecture(model), max_slots)
    if key not in _RESIDENT:
        private = copy.deepcopy(model).eval()
        _RESIDENT[key] = (FastSampler(private, max_slots=max_slots), private)
    return _RESIDENT[key][0]


def sample_resident(model: torch.nn.Module, max_slots: int | None, *args: Any, **kwargs: Any) -> tuple[Any, CallStats]:
    """`FastSampler.sample(*args, **kwargs)` with `model`'s current weights, on the process's decoder; its timings."""
    with _LOCK:
        sampler = _resident(model, max_slots)
        with torch.no_grad():
            mine = dict(sampler.weights.model.named_parameters())
            for name, p in model.named_parameters():
                mine[name].copy_(p)
        return sampler.sample(*args, **kwargs), sampler.last_call


def prepare_resident(model: torch.nn.Module, max_slots: int | None, *args: Any, **kwargs: Any) -> Engine | None:
    """`FastSampler.prepare(*args, **kwargs)` on the decoder of `model`'s architecture (no weights are copied)."""
    with _LOCK:
        return _resident(model, max_slots).prepare(*args, **kwargs)


def resident_engines() -> list[Engine]:
    """The engines of this process's resident decoders (slots, cache width): what a call ran on."""
    with _LOCK:
        return [sampler.engine for sampler, _ in _RESIDENT.values() if sampler.engine is not None]


def release_engines() -> None:
    """Release every resident decoder's engine (`FastSampler.release`); the private weights stay, ready."""
    with _LOCK:
        for sampler, _ in _RESIDENT.values():
            sampler.release()
