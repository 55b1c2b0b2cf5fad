"""Trained checkpoints: where `train` puts them, how it saves the weights, and how it reads a ZeRO state back.

Layout of `<home>/checkpoints/<experiment>/iter-<k>/`:
- the policy's own files: a tiny checkpoint, or a `save_pretrained` directory (Hugging Face, LoRA adapters
  merged in);
- `training.json`: config, base model, losses, tokens, strategy; `examples.jsonl`: every example
  with its keep reason and threshold (lineage);
- `zero/` (DeepSpeed only): the resumable ZeRO state; the weights beside it are its fp32 consolidation.
The file names, the checks of every kind (the prover's too) and the training record are the formats'
(`aitp.checkpoints`). A checkpoint is assembled in a hidden sibling directory and renamed into place.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from aitp.errors import CheckpointError


def checkpoint_dir(home: str | Path, experiment: str, iteration: int) -> Path:
    """Where `train` writes the checkpoint of an iteration."""
    return Path(home) / "checkpoints" / experiment / f"iter-{iteration:03d}"


def save_policy(trainable: Any, path: Path, meta: dict[str, Any]) -> Path:
    """Write the trained weights as a directory the policy backend loads (into a fresh `path`)."""
    model = trainable.model
    if trainable.backend == "tiny":
        from aitp.policies.tiny import save_checkpoint

        return save_checkpoint(path, model, trainable.tokenizer, meta)
    if trainable.lora is not None:
        model = model.merge_and_unload()  # a plain model the HF backend loads without peft
    path.mkdir(parents=True, exist_ok=False)
    model.save_pretrained(path, safe_serialization=True)
    trainable.tokenizer.save_pretrained(path)
    return path


def zero_state_dict(zero_dir: Path) -> dict[str, torch.Tensor]:
    """The fp32 weights of a DeepSpeed ZeRO checkpoint, keyed as the LightningModule names them."""
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

    state = get_fp32_state_dict_from_zero_checkpoint(str(zero_dir))
    # Checkpoints of Lightning < 2.1 prefix the module with its wrapper's name.
    return {k.removeprefix("_forward_module."): v for k, v in state.items()}


def consolidate_zero(zero_dir: Path, module: torch.nn.Module) -> torch.nn.Module:
    """Load the fp32 consolidation of a ZeRO checkpoint into a fresh CPU copy of the trained module."""
    state = zero_state_dict(zero_dir)
    missing, unexpected = module.load_state_dict(state, strict=False)
    # Non-persistent buffers (e.g. rotary tables) are rebuilt by the module, not stored.
    missing = [k for k in missing if k in dict(module.named_parameters())]
    if missing or unexpected:
        raise CheckpointError(
            f"ZeRO checkpoint {zero_dir} does not match the model ({len(missing)} missing, "
            f"{len(unexpected)} unexpected keys, e.g. {(missing or unexpected)[0]}): train again from the same base"
        )
    return module
