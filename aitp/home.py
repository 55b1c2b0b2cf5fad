"""Where aitp keeps what it writes: `--home`, else `AITP_HOME`, else `./data`.

The loop (runs, training, registry, services, reports, traces) keeps its home on a local or mounted
path; only the lake commands read an object-store URI (`s3://bucket/prefix`). A URI given to a command
that would treat it as a path is refused here, before `./s3:/bucket` could be created in its place.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import urlsplit

from aitp.errors import AitpError

# `s3://b/x`, and the same after a Path-typed option collapsed it to `s3:/b/x`; a one-letter scheme is a drive
URI_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):/")
LAKE_COMMANDS = "aitp sql, export, rescore and lake check|vacuum|ls"


class MissingHomeError(AitpError):
    """A command that only reads was pointed at a home that does not exist."""


class HomeNotWritableError(AitpError):
    """The home cannot be created: a file is in the way, or no permission."""


class LocalHomeRequiredError(AitpError):
    """An object-store URI given as the home of a command that keeps its home on a path."""


def _chosen(home: str | Path | None) -> str:
    return str(home if home is not None else os.environ.get("AITP_HOME", "data"))


def uri_scheme(home: str | Path | None) -> str | None:
    """The URI scheme a home names (`s3`, `file`...), None for a plain path."""
    found = URI_SCHEME.match(_chosen(home))
    return found.group(1).lower() if found else None


def _local_only(chosen: str) -> LocalHomeRequiredError:
    if "://" not in chosen:  # a Path-typed --home collapsed `//`: show the URI as the user wrote it
        chosen = chosen.replace(":/", "://", 1)
    return LocalHomeRequiredError(
        f"home {chosen} is an object-store URI, but this command keeps its home on a local or mounted path today: "
        f"pass --home DIR (a mounted bucket works); {LAKE_COMMANDS} read an s3:// lake"
    )


def resolve_home(home: str | Path | None = None) -> Path:
    """Return the home directory (created if missing): the argument, else $AITP_HOME, else ./data."""
    chosen = _chosen(home)
    scheme = uri_scheme(chosen)
    if scheme == "file":
        chosen = urlsplit(chosen).path
    elif scheme is not None:
        raise _local_only(chosen)
    path = Path(chosen).expanduser().resolve()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise HomeNotWritableError(
            f"home directory {path} is not writable ({exc.strerror or exc}): "
            "pass --home DIR for a directory you can write"
        ) from None
    return path


def local_home(home: str | Path | None = None) -> Path | None:
    """The path of a home on a local or mounted filesystem (`file://` too), None for an object store: where a
    writer can hold a lock file (not created here)."""
    chosen = _chosen(home)
    scheme = uri_scheme(chosen)
    if scheme == "file":
        chosen = urlsplit(chosen).path
    elif scheme is not None:
        return None
    return Path(chosen).expanduser().resolve()


def require_home(home: str | Path | None = None, object_store: bool = True) -> None:
    """Fail when a home to read from does not exist: reading never creates one (a URI's bucket,
    credentials and endpoint are checked with one request; `object_store=False`: a URI is refused)."""
    chosen = _chosen(home)
    scheme = uri_scheme(chosen)
    if scheme == "file":
        chosen = urlsplit(chosen).path
    elif scheme is not None:
        if not object_store or "://" not in chosen:  # a Path-typed --home collapsed `//`: a local-home command
            raise _local_only(chosen)
        from aitp.lake.object_store import check_object_store

        check_object_store(chosen)
        return
    path = Path(chosen).expanduser().resolve()
    if not path.is_dir():
        what = "is not a directory" if path.exists() else "does not exist"
        raise MissingHomeError(f"aitp home {path} {what}: pass --home DIR (or set AITP_HOME) where aitp wrote its runs")
