"""Publish a file or a directory whole or not at all: write beside it, fsync, rename over it.

Every writer of aitp that a reader (or a resumed run) may look at while it writes goes through
here, so a crash at any instant leaves either the old content or the new, never half of either.
The temporary sibling is hidden (a leading dot) so globbing readers never pick it up.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def _sibling(final: Path, label: str) -> Path:
    return final.with_name(f".{final.name}.{label}-{os.getpid()}-{uuid.uuid4().hex[:8]}")


def _fsync_dir(path: Path) -> None:
    """Make a rename inside `path` durable (a no-op where directories cannot be opened)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextmanager
def publishing_file(final: str | Path, mode: str = "w") -> Iterator[Any]:
    """Open a hidden sibling of `final` for writing; on a clean exit fsync it and rename it over `final`."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = _sibling(final, "tmp")
    encoding = None if "b" in mode else "utf-8"
    try:
        with open(tmp, mode, encoding=encoding) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, final)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(final.parent)


def publish_bytes(final: str | Path, data: bytes) -> Path:
    """Write `data` to `final` atomically."""
    with publishing_file(final, "wb") as out:
        out.write(data)
    return Path(final)


def publish_text(final: str | Path, text: str) -> Path:
    """Write `text` (UTF-8) to `final` atomically."""
    with publishing_file(final) as out:
        out.write(text)
    return Path(final)


def publish_json(final: str | Path, data: Any) -> Path:
    """Write `data` as indented, key-sorted JSON to `final` atomically."""
    return publish_text(final, json.dumps(data, indent=2, sort_keys=True, default=str))


def publish_jsonl(final: str | Path, records: Iterable[Any]) -> Path:
    """Write one JSON document per line to `final` atomically."""
    with publishing_file(final) as out:
        for record in records:
            out.write(json.dumps(record, default=str) + "\n")
    return Path(final)


def staging_dir(final: str | Path, label: str = "tmp") -> Path:
    """A fresh hidden sibling path of `final` (not created), to be filled and then handed to `publish_dir`."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    return _sibling(final, label)


def publish_dir(staging: str | Path, final: str | Path, replace: bool = True) -> Path:
    """Rename a complete staging directory to `final`, replacing what was there (the old one is removed after).

    With `replace=False` a `final` already there is kept: FileExistsError, and `staging` is left to the caller.
    """
    staging, final = Path(staging), Path(final)
    for root, _dirs, files in os.walk(staging):
        for name in files:
            fd = os.open(os.path.join(root, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    if not replace:
        try:
            staging.rename(final)  # fails onto a directory with anything in it
        except OSError as exc:
            raise FileExistsError(f"{final} is already there") from exc
        _fsync_dir(final.parent)
        return final
    old = None
    if final.exists():
        old = _sibling(final, "old")
        final.rename(old)
    staging.rename(final)
    _fsync_dir(final.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return final


@contextmanager
def publishing_dir(final: str | Path, label: str = "tmp") -> Iterator[Path]:
    """A staging directory that becomes `final` on a clean exit and is removed on an error."""
    staging = staging_dir(final, label)
    staging.mkdir()
    try:
        yield staging
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    publish_dir(staging, final)
