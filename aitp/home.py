"""Where aitp keeps what it writes: `--home`, else `AITP_HOME`, else `./data`."""

from __future__ import annotations

import os
from pathlib import Path


def resolve_home(home: str | Path | None = None) -> Path:
    """Return the home directory (created if missing): the argument, else $AITP_HOME, else ./data."""
    chosen = home if home is not None else os.environ.get("AITP_HOME", "data")
    path = Path(chosen).expanduser().resolve()
    path.mkdir(parents=True, exist_ok=True)
    return path
