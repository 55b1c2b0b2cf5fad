"""Where aitp keeps what it writes: `--home`, else `AITP_HOME`, else `./data`."""

from __future__ import annotations

import os
from pathlib import Path

from aitp.errors import AitpError


class MissingHomeError(AitpError):
    """A command that only reads was pointed at a home that does not exist."""


class HomeNotWritableError(AitpError):
    """The home cannot be created: a file is in the way, or no permission."""


def resolve_home(home: str | Path | None = None) -> Path:
    """Return the home directory (created if missing): the argument, else $AITP_HOME, else ./data."""
    chosen = home if home is not None else os.environ.get("AITP_HOME", "data")
    path = Path(chosen).expanduser().resolve()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise HomeNotWritableError(
            f"home directory {path} is not writable ({exc.strerror or exc}): "
            "pass --home DIR for a directory you can write"
        ) from None
    return path


def require_home(home: str | Path | None = None) -> None:
    """Fail when a local home to read from does not exist: reading never creates one (URIs are
    checked by the store that opens them)."""
    chosen = str(home if home is not None else os.environ.get("AITP_HOME", "data"))
    if "://" in chosen:
        return
    path = Path(chosen).expanduser().resolve()
    if not path.is_dir():
        what = "is not a directory" if path.exists() else "does not exist"
        raise MissingHomeError(f"aitp home {path} {what}: pass --home DIR (or set AITP_HOME) where aitp wrote its runs")
