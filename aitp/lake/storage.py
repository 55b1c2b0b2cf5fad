"""Where the lake lives: `<home>/lake` on a local disk or under an object-store URI, behind pyarrow.

A local home is a plain directory. A URI home (`s3://bucket/prefix`, `gs://…`, `memory://…`) goes
through `pyarrow.fs.FileSystem.from_uri`, or through fsspec for schemes pyarrow does not know.
DuckDB reads the same files through an fsspec filesystem registered on its connection.
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs

from aitp.lake.errors import LakeError


@dataclass(frozen=True)
class Lake:
    """The lake root (`<home>/lake`) inside one pyarrow filesystem."""

    fs: pafs.FileSystem
    root: str
    scheme: str | None = None  # None for a local directory
    _fsspec: Any = field(default=None, compare=False, repr=False)

    @property
    def is_local(self) -> bool:
        return self.scheme is None

    def path(self, *parts: str) -> str:
        """A path under the lake root, joined with '/'."""
        return "/".join([self.root.rstrip("/"), *parts])

    def show(self, path: str) -> str:
        """A path as users should see it in messages: local path or full URI."""
        return self.duckdb_path(path)

    def duckdb_path(self, path: str) -> str:
        """The path DuckDB opens: local as is; remote as `scheme://path` (memory keeps its leading '/')."""
        return path if self.is_local else f"{self.scheme}://{path}"

    def duckdb_filesystem(self) -> Any:
        """An fsspec filesystem for DuckDB to register (None for local lakes)."""
        if self.is_local:
            return None
        if self._fsspec is not None:
            return self._fsspec
        import fsspec

        try:
            return fsspec.filesystem(self.scheme)
        except (ImportError, ValueError) as exc:
            raise LakeError(
                f"DuckDB needs an fsspec filesystem for '{self.scheme}://' ({exc}): "
                f"install it (for s3: pip install s3fs; for gs: pip install gcsfs)"
            ) from exc

    # -- small filesystem helpers ------------------------------------------------------------

    def exists(self, path: str) -> bool:
        return self.fs.get_file_info(path).type != pafs.FileType.NotFound

    def is_dir(self, path: str) -> bool:
        return self.fs.get_file_info(path).type == pafs.FileType.Directory

    def listdir(self, path: str) -> list[pafs.FileInfo]:
        """Entries directly under a directory (empty when it does not exist), sorted by name."""
        infos = self.fs.get_file_info(pafs.FileSelector(path, allow_not_found=True, recursive=False))
        return sorted(infos, key=lambda i: i.base_name)

    def walk_files(self, path: str) -> list[pafs.FileInfo]:
        """Every file under a directory, recursively."""
        infos = self.fs.get_file_info(pafs.FileSelector(path, allow_not_found=True, recursive=True))
        return [i for i in infos if i.type == pafs.FileType.File]

    def makedirs(self, path: str) -> None:
        self.fs.create_dir(path, recursive=True)

    def read_text(self, path: str) -> str:
        with self.fs.open_input_stream(path) as stream:
            return stream.read().decode("utf-8")

    def sync(self, path: str) -> None:
        """Flush a local file to disk, so a rename that follows never exposes an empty file."""
        if self.is_local:
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def write_json_atomic(self, path: str, obj: Any) -> None:
        """Write JSON to a hidden temporary name beside `path`, then rename it over `path`."""
        parent, name = path.rsplit("/", 1)
        tmp = f"{parent}/.{name}.{uuid.uuid4().hex[:12]}.tmp"
        with self.fs.open_output_stream(tmp) as out:
            out.write(json.dumps(obj, indent=1, sort_keys=True).encode("utf-8"))
        self.sync(tmp)
        self.fs.move(tmp, path)  # rename(2) locally: atomic replace; one PUT on object stores

    def remove_empty_dir(self, path: str) -> None:
        """Remove a directory if it is empty (object stores have no empty directories to remove)."""
        if self.is_local:
            try:
                os.rmdir(path)
            except OSError:
                pass
        elif self.is_dir(path) and not self.listdir(path):
            self.fs.delete_dir(path)


def home_location(home: str | Path | None = None) -> str:
    """The home as given: the argument, else $AITP_HOME, else ./data (not created here)."""
    chosen = home if home is not None else os.environ.get("AITP_HOME", "data")
    return str(chosen)


def open_lake(home: str | Path | None = None) -> Lake:
    """The lake of a home directory or URI; nothing is created until something is written."""
    chosen = home_location(home)
    if "://" not in chosen:
        root = Path(chosen).expanduser().resolve() / "lake"
        return Lake(pafs.LocalFileSystem(), root.as_posix())
    scheme = chosen.split("://", 1)[0].lower()
    if scheme == "file":
        fs, path = pafs.FileSystem.from_uri(chosen)
        return Lake(fs, path.rstrip("/") + "/lake")
    try:
        fs, path = pafs.FileSystem.from_uri(chosen)
        return Lake(fs, path.rstrip("/") + "/lake", scheme)
    except Exception:  # pyarrow does not know the scheme (or lacks the build): try fsspec
        pass
    try:
        import fsspec

        spec_fs, path = fsspec.core.url_to_fs(chosen)
    except (ImportError, ValueError) as exc:
        raise LakeError(f"cannot open the lake at '{chosen}' ({exc}): install the fsspec driver for it") from exc
    fs = pafs.PyFileSystem(pafs.FSSpecHandler(spec_fs))
    return Lake(fs, path.rstrip("/") + "/lake", scheme, spec_fs)
