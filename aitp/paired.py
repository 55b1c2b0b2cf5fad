"""Is a gain real? A paired bootstrap over the items both models were evaluated on.

Both models answered the same fixed items (eval questions, valid theorems), so the gain is measured
per item and the items are resampled: far tighter than comparing two independent intervals.
Kept outside `aitp.loop` so that prover workers can use it without importing the loop (MLflow, its
stages: ~6 s of imports); `aitp.loop.stats` computes the same statistic for the reasoning loop.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class PairedGain:
    """Pass rate of b minus a on the same items, with its paired-bootstrap 95% interval."""

    model_a: str
    model_b: str
    n_items: int
    rate_a: float
    rate_b: float
    gain: float
    low: float
    high: float

    def to_dict(self) -> dict[str, Any]:
        """As a plain dict, for JSON."""
        return asdict(self)

    def __str__(self) -> str:
        return f"{self.gain:+.3f} (95% {self.low:+.3f} to {self.high:+.3f}, {self.n_items} items)"


def paired_bootstrap(a: np.ndarray, b: np.ndarray, n_boot: int = 10_000, seed: int = 0) -> tuple[float, float, float]:
    """Mean of b - a and the 2.5% / 97.5% quantiles of its bootstrap over paired items."""
    diff = np.asarray(b, dtype=float) - np.asarray(a, dtype=float)
    rng = np.random.default_rng(seed)
    means = diff[rng.integers(0, len(diff), size=(n_boot, len(diff)))].mean(axis=1)
    low, high = np.quantile(means, [0.025, 0.975])
    return float(diff.mean()), float(low), float(high)
