"""`aitp lake vacuum`: delete replaced files once no reader can still need them.

A commit keeps the files it replaced for `RETAIN_SUPERSEDED_S` (readers that listed them before
the commit may still be reading) and the next commit of that shard deletes them; a shard that is
never written again keeps them until a vacuum. Only files a manifest marks as superseded, for
longer than the retention, are deleted; manifests are left as they are.
"""

from __future__ import annotations

import time
from pathlib import Path

from aitp.lake.catalog import as_lake, commits
from aitp.lake.schemas import TABLES
from aitp.lake.storage import Lake
from aitp.lake.writer import RETAIN_SUPERSEDED_S


def vacuum_lake(home: str | Path | Lake | None = None, retain_s: float = RETAIN_SUPERSEDED_S) -> list[str]:
    """Delete superseded files older than `retain_s`; returns the paths deleted (as users see them)."""
    lake = as_lake(home)
    now = time.time()
    deleted = []
    for table in TABLES:
        for commit in commits(lake, table):
            for path, since in commit.superseded.items():
                if now - since >= retain_s and path not in commit.files and lake.exists(path):
                    lake.fs.delete_file(path)
                    deleted.append(lake.show(path))
    return deleted
