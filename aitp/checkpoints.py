"""Checkpoint formats, every kind in one place: the file names, the checks, and the training record.

Training writes checkpoints, the policies and the prover load them, the registry and the loop verify
them; all of them import the formats from here, so none of them has to import another to learn what a
checkpoint of its kind looks like. This module imports no torch.

A checkpoint directory of each kind:
- built-in model (tiny): `config.json` (with `aitp_policy: tiny`, the sizes and a `meta` block),
  `model.safetensors`, `tokenizer.json`;
- Hugging Face: a `save_pretrained` directory (`config.json`, safetensors weights, possibly sharded with an
  index, or `pytorch_model.bin`, and tokenizer files);
- prover models: `prover_models.json` (the manifest), `tactic_ranker.npy`, `premise_ranker.pt`,
  `goal_critic.npy` when a critic was trained, and `generator/`, a policy checkpoint of either kind above,
  when the tactics come from a generative model.
Any of them may hold `training.json` (how it was trained) and `examples.jsonl` (each example's lineage);
a DeepSpeed run leaves `zero/`, its resumable ZeRO state. These three describe how a checkpoint came to be,
not how it behaves, so a checkpoint's content id leaves them out (`aitp.fingerprint`).
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

from aitp.atomic import publish_json, publish_jsonl
from aitp.errors import CheckpointError

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
TOKENIZER_FILE = "tokenizer.json"
POLICY_KEY = "aitp_policy"  # the config.json key that marks a built-in model's checkpoint
TINY_POLICY = "tiny"
TINY_FORMAT = 1

HF_WEIGHTS_INDEX = "model.safetensors.index.json"
HF_WEIGHT_FILES = (WEIGHTS_FILE, "pytorch_model.bin")
TOKENIZER_FILES = (TOKENIZER_FILE, "tokenizer_config.json", "tokenizer.model", "vocab.json")

PROVER_FORMAT = "aitp-prover-models"
PROVER_MANIFEST = "prover_models.json"
RANKER_FILE = "tactic_ranker.npy"
PREMISE_FILE = "premise_ranker.pt"
CRITIC_FILE = "goal_critic.npy"
GENERATOR_DIR = "generator"

RECORD_FILE = "training.json"
EXAMPLES_FILE = "examples.jsonl"
ZERO_DIR = "zero"


def tiny_config(model: dict[str, Any], meta: dict[str, Any]) -> dict[str, Any]:
    """The `config.json` of a built-in model's checkpoint: its sizes and JSON-able `meta`."""
    return {POLICY_KEY: TINY_POLICY, "format": TINY_FORMAT, "model": model, "meta": meta}


def is_tiny_checkpoint(path: str | Path) -> bool:
    """Whether `path` is a directory holding a tiny-model checkpoint."""
    config = Path(path) / CONFIG_FILE
    if not config.is_file():
        return False
    try:
        return json.loads(config.read_text()).get(POLICY_KEY) == TINY_POLICY
    except (json.JSONDecodeError, AttributeError):
        return False


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
    index = path / HF_WEIGHTS_INDEX
    if index.is_file():
        shards = set(json.loads(index.read_text()).get("weight_map", {}).values())
        return [path / s for s in sorted(shards)]
    for name in HF_WEIGHT_FILES:
        if (path / name).is_file():
            return [path / name]
    return []


def verify_policy_checkpoint(path: str | Path) -> str:
    """The backend ("tiny" or "hf") of a complete policy checkpoint directory; a one-line error otherwise."""
    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(f"checkpoint {path} does not exist: train it first (aitp train) or pass another path")
    config_file = path / CONFIG_FILE
    if not config_file.is_file():
        raise CheckpointError(f"checkpoint {path} has no {CONFIG_FILE}: it is incomplete, train or copy it again")
    try:
        config = json.loads(config_file.read_text())
    except json.JSONDecodeError:
        raise CheckpointError(f"checkpoint {path} has a corrupt {CONFIG_FILE}: train or copy it again") from None
    backend = TINY_POLICY if config.get(POLICY_KEY) == TINY_POLICY else "hf"
    files = _weight_files(path)
    if not files:
        raise CheckpointError(f"checkpoint {path} has no weights ({WEIGHTS_FILE}): it is incomplete, train again")
    for f in files:
        if not f.is_file() or (f.suffix == ".safetensors" and not _safetensors_complete(f)):
            raise CheckpointError(f"checkpoint {path} has a missing or truncated {f.name}: train or copy it again")
    if backend == "hf" and not any((path / n).is_file() for n in TOKENIZER_FILES):
        raise CheckpointError(f"checkpoint {path} has no tokenizer files: it is incomplete, train or copy it again")
    return backend


def verify_prover_checkpoint(path: str | Path) -> str:
    """ "prover" for a complete prover checkpoint directory (before the registry trusts it); a one-line error else."""
    path = Path(path)
    try:
        manifest = json.loads((path / PROVER_MANIFEST).read_text())
    except (OSError, ValueError):
        raise CheckpointError(f"prover checkpoint {path} has an unreadable {PROVER_MANIFEST}: train it again") from None
    if not isinstance(manifest, dict) or manifest.get("format") != PROVER_FORMAT:
        raise CheckpointError(
            f"{path} is not a prover checkpoint ({PROVER_MANIFEST} format is not {PROVER_FORMAT!r}): train again"
        )
    needed = (RANKER_FILE, PREMISE_FILE, *((CRITIC_FILE,) if "critic" in manifest else ()))
    missing = [f for f in needed if not (path / f).is_file()]
    if missing:
        raise CheckpointError(f"prover checkpoint {path} has no {', '.join(missing)}: it is incomplete, train again")
    if (path / GENERATOR_DIR).exists():
        verify_policy_checkpoint(path / GENERATOR_DIR)  # a generative policy must load before the registry trusts it
    return "prover"


def verify_checkpoint(path: str | Path) -> str:
    """The backend ("tiny", "hf" or "prover") of a complete checkpoint directory; a one-line error otherwise."""
    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(f"checkpoint {path} does not exist: train it first (aitp train) or pass another path")
    if (path / PROVER_MANIFEST).is_file():
        return verify_prover_checkpoint(path)
    return verify_policy_checkpoint(path)


def write_record(path: str | Path, record: dict[str, Any], examples: list[dict[str, Any]] | None = None) -> None:
    """Write `training.json` into a checkpoint directory, and `examples.jsonl` when `examples` are given."""
    path = Path(path)
    publish_json(path / RECORD_FILE, record)
    if examples is not None:
        publish_jsonl(path / EXAMPLES_FILE, examples)


def read_record(path: str | Path) -> dict[str, Any]:
    """The `training.json` of a checkpoint ({} when it has none, e.g. a base model)."""
    record = Path(path) / RECORD_FILE
    return json.loads(record.read_text()) if record.is_file() else {}
