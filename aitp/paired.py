"""Is a gain real? The statistics every comparison of models uses: a paired bootstrap and a Wilson interval.

Both models answered the same fixed items (eval questions, valid theorems), so the gain is measured
per item and the items are resampled: far tighter than comparing two independent intervals. A single
pass rate gets the Wilson score interval, here in Python and as SQL for the lake's views.
Kept outside `aitp.loop` so that prover workers can use it without importing the loop (MLflow and
its stages); `aitp.loop.stats` reads the loop's per-item pass rates from the lake for it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

Z95 = 1.959963984540054
"""The standard normal quantile of 97.5%: the half-width of a two-sided 95% interval in standard errors."""


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


def gain_on_shared_items(
    a: Mapping[str, float], b: Mapping[str, float], model_a: str, model_b: str, n_boot: int = 10_000
) -> PairedGain | None:
    """The gain of b over a, paired over the items both were measured on (sorted by item); None when they share none."""
    items = sorted(set(a) & set(b))
    if not items:
        return None
    rates_a = np.array([float(a[i]) for i in items])
    rates_b = np.array([float(b[i]) for i in items])
    gain, low, high = paired_bootstrap(rates_a, rates_b, n_boot)
    return PairedGain(model_a, model_b, len(items), float(rates_a.mean()), float(rates_b.mean()), gain, low, high)


def wilson(n_pass: int, n: int) -> tuple[float, float]:
    """The 95% Wilson score interval of a pass rate."""
    if n == 0:
        return 0.0, 1.0
    p, z2 = n_pass / n, Z95 * Z95
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = Z95 * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def wilson_sql(rate: str, n: str, z: str = "z") -> tuple[str, str]:
    """The 95% Wilson interval's low and high ends as DuckDB expressions over columns `rate`, `n` and `z` (= Z95).

    The same formula as `wilson`, left unclipped (`wilson` clips its ends to [0, 1] against rounding).
    """
    centre, spread = f"{rate} + {z}*{z}/(2*{n})", f"{z}*sqrt({rate}*(1-{rate})/{n} + {z}*{z}/(4*{n}*{n}))"
    scale = f"(1 + {z}*{z}/{n})"
    return f"({centre} - {spread}) / {scale}", f"({centre} + {spread}) / {scale}"
