"""A tiny-model checkpoint is a directory: `config.json` (sizes, metadata), `model.safetensors`,
`tokenizer.json`, the names and the checks of `aitp.checkpoints`. It is written to a staging directory
and renamed into place, so a reader never sees half a checkpoint.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from aitp.atomic import publishing_dir
from aitp.checkpoints import CONFIG_FILE, TOKENIZER_FILE, WEIGHTS_FILE, is_tiny_checkpoint, tiny_config
from aitp.errors import CheckpointError
from aitp.policies.tiny.model import TinyConfig, TinyTransformer
from aitp.tokenizer import ByteTokenizer


def save_checkpoint(
    path: str | Path,
    model: TinyTransformer,
    tokenizer: ByteTokenizer | None = None,
    meta: dict[str, Any] | None = None,
) -> Path:
    """Write model, tokenizer and JSON-able `meta` (step, metrics, ...) to directory `path`, replacing it."""
    path = Path(path)
    with publishing_dir(path) as staging:
        state = {k: v.detach().to("cpu", torch.float32).contiguous() for k, v in model.state_dict().items()}
        save_file(state, str(staging / WEIGHTS_FILE))
        (tokenizer or ByteTokenizer()).save(staging / TOKENIZER_FILE)
        config = tiny_config(model.config.to_dict(), meta or {})
        (staging / CONFIG_FILE).write_text(json.dumps(config, indent=2, sort_keys=True))
    return path


def load_checkpoint(
    path: str | Path, device: str | torch.device | None = None
) -> tuple[TinyTransformer, ByteTokenizer, dict[str, Any]]:
    """Read a checkpoint directory: the model (in eval mode, on `device`), its tokenizer and its meta."""
    path = Path(path)
    if not is_tiny_checkpoint(path):
        raise CheckpointError(
            f"{path} is not a tiny-model checkpoint (no {CONFIG_FILE} with aitp_policy=tiny): "
            "pass a directory written by save_checkpoint"
        )
    if not (path / WEIGHTS_FILE).is_file():
        raise CheckpointError(f"checkpoint {path} has no {WEIGHTS_FILE}: it is incomplete, save it again")
    config = json.loads((path / CONFIG_FILE).read_text())
    model = TinyTransformer(TinyConfig.from_dict(config["model"]))
    model.load_state_dict(load_file(str(path / WEIGHTS_FILE)))
    tokenizer_file = path / TOKENIZER_FILE
    tokenizer = ByteTokenizer.load(tokenizer_file) if tokenizer_file.is_file() else ByteTokenizer()
    return model.to(device or "cpu").eval(), tokenizer, config.get("meta", {})
