"""Checksums of committed files: taken while a file is written, verified by `aitp lake check`.

A manifest records each file's size and blake2b digest, so a check streams the bytes once and
compares (no Parquet decoding): random bytes written into the middle of a file, a truncation or
a swapped file are all found, which reading the footer alone misses. Manifests written before
checksums existed carry none; their files can only be read back (footer, or every row group with
`deep`), and a check counts them as unverified.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import pyarrow.parquet as pq

from aitp.lake.storage import Lake

DIGEST = "blake2b"
_BLOCK = 4 * 1024 * 1024


def new_digest() -> Any:
    return hashlib.blake2b(digest_size=32)


@dataclass(frozen=True)
class Checksum:
    """What a committed file must be: its size in bytes and its digest (`blake2b:<hex>`)."""

    size: int
    digest: str

    def to_json(self) -> dict[str, Any]:
        return {"size": self.size, "digest": self.digest}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Checksum:
        return cls(int(data["size"]), str(data["digest"]))


class HashingSink:
    """A file-like sink that digests every byte on its way to the real output stream."""

    def __init__(self, out: Any) -> None:
        self._out = out
        self._digest = new_digest()
        self._size = 0

    def write(self, data: bytes) -> int:
        self._digest.update(data)
        self._size += len(data)
        return self._out.write(data)

    def tell(self) -> int:
        return self._size

    def flush(self) -> None:
        self._out.flush()

    def close(self) -> None:  # the caller closes the real stream
        return None

    @property
    def closed(self) -> bool:
        return self._out.closed

    def checksum(self) -> Checksum:
        return Checksum(self._size, f"{DIGEST}:{self._digest.hexdigest()}")


def file_checksum(lake: Lake, path: str) -> Checksum:
    """The size and digest of a file as it is now, streamed in blocks (never held whole in memory)."""
    digest, size = new_digest(), 0
    with lake.fs.open_input_stream(path) as stream:
        while block := stream.read(_BLOCK):
            digest.update(block)
            size += len(block)
    return Checksum(size, f"{DIGEST}:{digest.hexdigest()}")


def _decode_problem(lake: Lake, path: str, rows: int | None, deep: bool) -> str | None:
    try:
        with lake.fs.open_input_file(path) as handle:
            parquet = pq.ParquetFile(handle)
            found = parquet.metadata.num_rows
            if deep:
                for group in range(parquet.num_row_groups):
                    parquet.read_row_group(group)
    except Exception as exc:  # any failure to read is the finding itself
        return " ".join(str(exc).split()) or type(exc).__name__
    if rows is not None and found != rows:
        return f"holds {found} rows, its manifest says {rows}"
    return None


def file_problem(lake: Lake, path: str, expected: Checksum | None, rows: int | None, deep: bool = False) -> str | None:
    """Why a committed file is not what its manifest recorded, or None when it is.

    With a checksum: size first (one stat), then the digest; `deep` also decodes every row group.
    Without one (an old manifest): the footer and row count, or every row group with `deep`.
    """
    if expected is not None:
        size = lake.fs.get_file_info(path).size
        if size is not None and size != expected.size:
            return f"is {size} bytes, its manifest says {expected.size} (truncated or overwritten)"
        try:
            found = file_checksum(lake, path)
        except OSError as exc:
            return " ".join(str(exc).split()) or type(exc).__name__
        if found != expected:
            return f"checksum mismatch: {found.digest[:23]}… where the manifest says {expected.digest[:23]}…"
        if not deep:
            return None
    return _decode_problem(lake, path, rows, deep)
