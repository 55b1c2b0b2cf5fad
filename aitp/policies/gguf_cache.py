"""A GGUF model converted once into a `save_pretrained` directory, kept in the user's cache.

transformers reads a GGUF file with gguf's Python reader and de-quantises every tensor on each load,
many times slower than reading the same weights as safetensors
(`benchmarks/results/history-gpu-recipe.md`). The loop loads its base model several times in iteration 0
(each GPU worker, the training process and the ZeRO consolidation after it), so the first load writes a
float32 copy (exact for any GGUF type, and every dtype is cast from it as from the GGUF) and each later
one reads that copy.

The copy is keyed by the file's content id (`aitp.fingerprint`) and published whole (`aitp.atomic`),
so a reader never sees half a copy; of processes converting at the same time, the first to finish
puts its copy in place and the others keep it. A cache that cannot be written costs only the speed-up.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aitp.atomic import publish_dir, staging_dir
from aitp.collector import collector_paused

CACHE_SUBDIR = ("aitp", "gguf")
STALE_STAGING_S = 3600  # a staging directory this old was left by a process that died converting (a minute's work)


def cache_root() -> Path:
    """Where converted copies live: `$XDG_CACHE_HOME/aitp/gguf`, else `~/.cache/aitp/gguf`."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).joinpath(*CACHE_SUBDIR)


def cached_copy(gguf: Path, content_id: str) -> Path:
    """The directory that holds (or will hold) `gguf`'s converted copy."""
    return cache_root() / f"{gguf.stem}-{content_id}"


def is_complete(copy: Path) -> bool:
    """Whether a converted copy has what loading needs (it is renamed into place only once written)."""
    return (copy / "config.json").is_file() and any(copy.glob("*.safetensors"))


def convert(gguf: Path, content_id: str, load_gguf: Callable[[], tuple[Any, Any] | None]) -> Path | None:
    """The copy of `gguf`, written from `load_gguf()` (float32 model, tokenizer) if missing; None if it cannot be."""
    copy = cached_copy(gguf, content_id)
    if is_complete(copy):
        return copy
    try:
        staging = staging_dir(copy, "convert")
        _remove_stale_staging(copy)
        staging.mkdir()
    except OSError:
        return None
    try:
        with collector_paused():  # the reading makes hundreds of thousands of lasting objects
            loaded = load_gguf()
            if loaded is None:
                return None
            model, tokenizer = loaded
            model.save_pretrained(staging)
            tokenizer.save_pretrained(staging)
        try:
            publish_dir(staging, copy, replace=False)
        except FileExistsError:  # another process put its copy there first: keep that one
            if not is_complete(copy):
                return None
        return copy
    except OSError:
        return None
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _remove_stale_staging(copy: Path) -> None:
    """Delete what killed conversions of this copy left behind (each up to the model's size in float32)."""
    now = time.time()
    for old in copy.parent.glob(f".{copy.name}.*"):
        try:
            if now - old.stat().st_mtime > STALE_STAGING_S:
                shutil.rmtree(old, ignore_errors=True)
        except OSError:
            continue
