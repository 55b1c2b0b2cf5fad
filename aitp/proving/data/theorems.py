"""The named theorem sets, extracted offline from what the prover packages ship, cached under the home.

Each backend's record lists the sets it owns (`Backend.theorem_sets`: name, extractor, version):
- `hol-core`: the named theorems HOL Light's core library proves with `prove(...)` (Debian
  `hol-light`, /usr/share/hol-light), kept when the library's own search database names them.
- `coq-stdlib`: the lemmas of a range of Coq standard library directories (Debian `libcoq-stdlib`,
  `coqc -where`/theories; see `coq.extract.DEFAULT_DIRS`), kept when Coq resolves their qualified name.

Each theorem keeps its human proof; splits are fixed by a hash of the name (`theorem_set.split_of`).
A cached set older than its extractor's version is extracted again; a prover that dies during an extraction is
started again and the set extracted from the start, and only a whole set is ever cached.
"""

from __future__ import annotations

import sys
from pathlib import Path

from aitp.home import resolve_home
from aitp.proving.backend import TheoremSource
from aitp.proving.backends import BACKENDS
from aitp.proving.data.theorem_set import SPLITS, TheoremSet, split_of
from aitp.proving.errors import ProverCrashedError, ProverUnavailableError, UnknownTheoremError

EXTRACTION_TRIES = 3  # a prover killed once (a preempted node, an OOM kill) should not fail a first run
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
    theorem_set = _extract(name)
    theorem_set.save(cache)  # only a whole set: an extraction that failed raised before this
    return theorem_set


def _extract(name: str) -> TheoremSet:
    """Extract a set, again from the start where the prover dies on the way (a killed or crashed process mid-way,
    as on a preempted node): a line says so each time, and after the last try one line says what to check."""
    for attempt in range(1, EXTRACTION_TRIES + 1):
        try:
            return _SOURCES[name].extract()
        except ProverCrashedError as exc:
            reason = " ".join(str(exc).split())[:200]
            if attempt == EXTRACTION_TRIES:
                raise ProverUnavailableError(
                    f"the prover died {EXTRACTION_TRIES} times while extracting theorem set '{name}' (last: {reason}): "
                    "check that it runs on this machine (memory, a process killer), then run the command again"
                ) from None
            print(
                f"warning: the prover died while extracting theorem set '{name}' ({reason}): "
                f"extracting it again from the start (try {attempt + 1} of {EXTRACTION_TRIES})",
                file=sys.stderr,
                flush=True,
            )
    raise AssertionError("unreachable")


__all__ = ["SPLITS", "THEOREM_SETS", "TheoremSet", "load_theorem_set", "split_of", "theorem_set_cache"]
