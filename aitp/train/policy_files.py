"""The files of a policy checkpoint (tiny or Hugging Face), checked before anyone loads them.

Kept apart from `aitp.train.checkpoint`, which also dispatches to the prover's checkpoints, so that a
prover checkpoint can check the policy it carries (its generative tactic model) without an import cycle.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

from aitp.errors import CheckpointError

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


def _safetensors_complete(path: Path) -> bool:
    """Whether a safetensors file holds every byte its header promises (a cut copy does not)."""
    try:
        with path.open("rb") as fh:
            (header_len,) = struct.unpack("<Q", fh.read(8))
            if header_len > 100 << 20:
                return False
            header = json.loads(fh.read(header_len))
    except (OSError, struct.error, json.JSONDecodeError, UnicodeDecodeError):
        return False
    ends = [v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"]
    return path.stat().st_size == 8 + header_len + max(ends, default=0)


def _weight_files(path: Path) -> list[Path]:
    index = path / "model.safetensors.index.json"
    if index.is_file():
        shards = set(json.loads(index.read_text()).get("weight_map", {}).values())
        return [path / s for s in sorted(shards)]
    for name in ("model.safetensors", "pytorch_model.bin"):
        if (path / name).is_file():
            return [path / name]
    return []


def verify_policy_checkpoint(path: str | Path) -> str:
    """The backend ("tiny" or "hf") of a complete policy checkpoint directory; a one-line error otherwise."""
    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(f"checkpoint {path} does not exist: train it first (aitp train) or pass another path")
    config_file = path / "config.json"
    if not config_file.is_file():
        raise CheckpointError(f"checkpoint {path} has no config.json: it is incomplete, train or copy it again")
    try:
        config = json.loads(config_file.read_text())
    except json.JSONDecodeError:
        raise CheckpointError(f"checkpoint {path} has a corrupt config.json: train or copy it again") from None
    backend = "tiny" if config.get("aitp_policy") == "tiny" else "hf"
    files = _weight_files(path)
    if not files:
        raise CheckpointError(f"checkpoint {path} has no weights (model.safetensors): it is incomplete, train again")
    for f in files:
        if not f.is_file() or (f.suffix == ".safetensors" and not _safetensors_complete(f)):
            raise CheckpointError(f"checkpoint {path} has a missing or truncated {f.name}: train or copy it again")
    if backend == "hf" and not any((path / n).is_file() for n in TOKENIZER_FILES):
        raise CheckpointError(f"checkpoint {path} has no tokenizer files: it is incomplete, train or copy it again")
    return backend
