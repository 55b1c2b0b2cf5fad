"""Model ids that are content ids: the same weights get the same id in any home, on any machine.

A checkpoint's id hashes what decides its behaviour (weights, tokenizer, architecture) and nothing
that merely describes how it came to be: `training.json` (seconds, absolute paths), the example
lineage, the resumable ZeRO state, and the free-form `meta` block or `_name_or_path` of a
`config.json`. So a run resumed after a crash, or the same recipe run in another home, names its
models exactly as the clean run did, and the lake's `model_in`/`model_out` join across homes.
Which files are descriptive is the checkpoint formats' word (`aitp.checkpoints`); the id of a policy
spec, a checkpoint's or a server's, is `aitp.policies.spec.model_id`.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from aitp.checkpoints import CONFIG_FILE, EXAMPLES_FILE, RECORD_FILE, ZERO_DIR

WHOLE_FILE_LIMIT = 64 << 20
"""Files above this contribute their size, first and last MiB: fast on multi-GB weights."""
DESCRIPTIVE_FILES = frozenset({RECORD_FILE, EXAMPLES_FILE})
DESCRIPTIVE_DIRS = frozenset({ZERO_DIR})
DESCRIPTIVE_CONFIG_KEYS = frozenset({"meta", "_name_or_path"})


def _files(path: Path) -> list[Path]:
    if not path.is_dir():
        return [path]
    found = []
    for f in sorted(path.rglob("*")):
        rel = f.relative_to(path)
        if not f.is_file() or rel.name in DESCRIPTIVE_FILES or rel.parts[0] in DESCRIPTIVE_DIRS:
            continue
        if any(part.startswith(".") for part in rel.parts):
            continue
        found.append(f)
    return found


def _config_bytes(f: Path) -> bytes:
    """A config.json without its descriptive keys, canonically serialised."""
    try:
        data = json.loads(f.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError):
        return f.read_bytes()
    if isinstance(data, dict):
        data = {k: v for k, v in data.items() if k not in DESCRIPTIVE_CONFIG_KEYS}
    return json.dumps(data, sort_keys=True).encode()


def fingerprint(path: str | Path) -> str:
    """A 12-hex content id of a checkpoint directory or a model file."""
    path = Path(path)
    digest = hashlib.sha256()
    for f in _files(path):
        name = f.relative_to(path).as_posix() if path.is_dir() else f.name
        if f.name == CONFIG_FILE:
            body = _config_bytes(f)
            digest.update(f"{name}:{len(body)}".encode())
            digest.update(body)
            continue
        size = f.stat().st_size
        digest.update(f"{name}:{size}".encode())
        with f.open("rb") as fh:
            if size <= WHOLE_FILE_LIMIT:
                digest.update(fh.read())
                continue
            digest.update(fh.read(1 << 20))
            fh.seek(-(1 << 20), 2)
            digest.update(fh.read())
    return digest.hexdigest()[:12]
