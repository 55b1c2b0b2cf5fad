"""The named theorem sets, extracted offline from what the prover packages ship, cached under the home.

Each backend's record lists the sets it owns (`Backend.theorem_sets`: name, extractor, version):
- `hol-core`: the named theorems HOL Light's core library proves with `prove(...)` (Debian
  `hol-light`, /usr/share/hol-light), kept when the library's own search database names them.
- `coq-stdlib`: the lemmas of a range of Coq standard library directories (Debian `libcoq-stdlib`,
  `coqc -where`/theories; see `coq.extract.DEFAULT_DIRS`), kept when Coq resolves their qualified name.

Each theorem keeps its human proof; splits are fixed by a hash of the name (`theorem_set.split_of`).
A cached set older than its extractor's version is extracted again.
"""

from __future__ import annotations

from pathlib import Path

from aitp.home import resolve_home
from aitp.proving.backend import TheoremSource
from aitp.proving.backends import BACKENDS
from aitp.proving.data.theorem_set import SPLITS, TheoremSet, split_of
from aitp.proving.errors import UnknownTheoremError

_SOURCES: dict[str, TheoremSource] = {s.name: s for b in BACKENDS.values() for s in b.theorem_sets}
THEOREM_SETS: dict[str, str] = {s.name: b.name for b in BACKENDS.values() for s in b.theorem_sets}
"""Each named set and the backend that owns it (from the backend records)."""


def theorem_set_cache(name: str, home: str | Path | None = None) -> Path:
    """Where a named set is cached."""
    return resolve_home(home) / "proving" / "theorems" / f"{name}.jsonl"


def load_theorem_set(name: str, home: str | Path | None = None, refresh: bool = False) -> TheoremSet:
    """A named set (`hol-core`, `coq-stdlib`) from the cache, extracting it on first use; or a JSONL path."""
    if name not in THEOREM_SETS:
        if Path(name).is_file():
            return TheoremSet.load(Path(name))
        known = ", ".join(THEOREM_SETS)
        raise UnknownTheoremError(f"unknown theorem set '{name}': use one of {known}, or a JSONL file path")
    cache = theorem_set_cache(name, home)
    if cache.is_file() and not refresh:
        cached = TheoremSet.load(cache)
        if cached.version == _SOURCES[name].version:
            return cached
    theorem_set = _SOURCES[name].extract()
    theorem_set.save(cache)
    return theorem_set


__all__ = ["SPLITS", "THEOREM_SETS", "TheoremSet", "load_theorem_set", "split_of", "theorem_set_cache"]
