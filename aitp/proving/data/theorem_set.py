"""A theorem set: provable theorems in library order, every usable premise name, and fixed hash splits.

The split of a theorem is a stable hash of its name, so it never moves when the library grows.
The backends' extractors (`coq.extract`, `hol_light.extract`) build this; `data.theorems` caches and loads it.
"""

from __future__ import annotations

import difflib
import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from aitp.atomic import publish_jsonl
from aitp.proving.env import Theorem
from aitp.proving.errors import UnknownTheoremError

SPLITS = ("train", "valid", "test")


def split_of(name: str) -> str:
    """The fixed split of a theorem name: 80% train, 10% valid, 10% test by SHA-256."""
    bucket = int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big") % 100
    return "train" if bucket < 80 else "valid" if bucket < 90 else "test"


@dataclass
class TheoremSet:
    """Provable theorems in library order, and every library name usable as a premise, in order."""

    name: str
    backend: str
    theorems: list[Theorem]
    premise_names: list[str] = field(default_factory=list)
    version: int = 1  # of the extraction that built it: a cache of an older version is re-extracted

    def __post_init__(self) -> None:
        self._by_name = {t.name: t for t in self.theorems}
        self._rank = {n: i for i, n in enumerate(self.premise_names)}

    def __len__(self) -> int:
        return len(self.theorems)

    def get(self, name: str) -> Theorem:
        """The theorem called `name`, or a one-line error naming the closest names."""
        if name in self._by_name:
            return self._by_name[name]
        suffix = [n for n in self._by_name if n.endswith("." + name)]
        if len(suffix) == 1:
            return self._by_name[suffix[0]]
        close = difflib.get_close_matches(name, list(self._by_name), n=3, cutoff=0.6)
        hint = (
            f"did you mean {', '.join(close)}?"
            if close
            else f"list them with `aitp prove-theorems --theorems {self.name}`"
        )
        raise UnknownTheoremError(f"unknown theorem '{name}' in set '{self.name}': {hint}")

    def split(self, split: str) -> list[Theorem]:
        """Theorems of one split (train, valid, test) or all of them (`all`)."""
        if split == "all":
            return list(self.theorems)
        if split not in SPLITS:
            raise UnknownTheoremError(f"unknown split '{split}': use one of {', '.join(SPLITS)}, all")
        return [t for t in self.theorems if split_of(t.name) == split]

    def premises(self, theorem: str) -> list[str]:
        """Library names defined strictly before `theorem` (never the theorem itself)."""
        rank = self._rank.get(theorem)
        if rank is None:
            return []
        return self.premise_names[:rank]

    def premise_map(self) -> dict[str, list[str]]:
        """Premises of every theorem, for `ProverEnv.set_premises`."""
        return {t.name: self.premises(t.name) for t in self.theorems}

    def save(self, path: Path) -> None:
        """Write the set as JSONL (atomically): a header line, then one theorem per line."""
        header = {
            "set": self.name,
            "backend": self.backend,
            "version": self.version,
            "premise_names": self.premise_names,
        }
        publish_jsonl(path, [header, *(asdict(t) for t in self.theorems)])

    @classmethod
    def load(cls, path: Path) -> TheoremSet:
        """Read a set written by `save`."""
        with Path(path).open() as f:
            header = json.loads(f.readline())
            theorems = [Theorem(**json.loads(line)) for line in f if line.strip()]
        return cls(
            header["set"], header["backend"], theorems, header.get("premise_names", []), header.get("version", 1)
        )
