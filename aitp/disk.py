"""A full disk in one line: the path that could not be written and the space left there.

A run writes in many places (the lake, checkpoints, MLflow's store, the Prefect server's database)
and each library reports a full disk its own way: `OSError` errno 28, pyarrow's and safetensors'
messages, SQLite's "database or disk is full", torch's bare "unexpected pos", or a Prefect server
answering 500 because its own database could not grow. Rather than catch each at its write, the
CLI hands whatever stopped a run to `disk_full_error`, which finds the full disk in the exception
chain, or in the free space under the home when the failure carries no trace of it.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path

from aitp.errors import AitpError

FULL_DISK_MESSAGES = ("no space left on device", "database or disk is full", "os error 28", "errno 28")
"""How the libraries a run writes through say ENOSPC when they do not raise an OSError carrying it."""

LOW_FREE_BYTES = 16 * 2**20
"""Under this much free space, a run that failed without naming its cause failed for the disk."""


class DiskFullError(AitpError):
    """A write that found no space left on its device."""


def free_bytes(path: Path) -> int:
    """Bytes an unprivileged writer may still use on the filesystem holding `path` (or its nearest parent)."""
    path = Path(path).absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    stats = os.statvfs(path)
    return stats.f_bavail * stats.f_frsize


def human_bytes(n: int) -> str:
    """A byte count as `df -h` shows it: 0 B, 12.0 KiB, 3.4 MiB."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"


def _chain(exc: BaseException | None) -> Iterator[BaseException]:
    """An exception, its causes and contexts, and the members of exception groups, each once."""
    seen: set[int] = set()
    todo = [exc] if exc is not None else []
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        todo += [e.__cause__, e.__context__, *getattr(e, "exceptions", ())]


def names_full_disk(e: BaseException) -> bool:
    """Whether this one exception says its write found the disk full (ENOSPC, or a library's words for it)."""
    if isinstance(e, OSError) and e.errno == errno.ENOSPC:
        return True
    text = str(e).lower()
    return any(message in text for message in FULL_DISK_MESSAGES)


def disk_full_error(exc: BaseException | None, home: Path, resume: str) -> DiskFullError | None:
    """The one-line error for a run stopped by a full disk (from `exc`, or from the free space under `home`), else None.

    `resume` is the command that continues the run once there is room.
    """
    cause = next((e for e in _chain(exc) if names_full_disk(e)), None)
    where = Path(getattr(cause, "filename", None) or home)
    free = free_bytes(where)
    if cause is None and free >= LOW_FREE_BYTES:
        return None
    return DiskFullError(
        f"no space left on the device holding {where} ({human_bytes(free)} free there): free some space there "
        f"(or pass a --home on a larger disk), then continue with `{resume}`"
    )
