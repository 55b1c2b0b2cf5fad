"""The proving settings a backend's shipped loop config runs with, for benchmarks that compare at the loop's settings.

The HOL Light loop (`configs/prove-hol.yaml`) and the Coq loop (`configs/prove-coq.yaml`) own their theorem set
and tactic timeout; a benchmark reads them from there instead of keeping a second copy that could drift.
"""

from __future__ import annotations

from aitp.configs import SHIPPED_CONFIGS, load_config
from aitp.loop.config import PROVER_BACKENDS, LoopConfig, ProvingConfig
from aitp.proving.errors import UnknownBackendError

LOOP_CONFIGS = {"coq": "prove-coq.yaml", "hol-light": "prove-hol.yaml"}
"""The shipped proving-loop config of each backend (a file of `SHIPPED_CONFIGS`)."""


def loop_proving(backend: str) -> ProvingConfig:
    """The `proving` section of the backend's shipped loop config: its theorem set, tactic timeout and budgets."""
    if backend not in PROVER_BACKENDS:
        raise UnknownBackendError(f"no proving loop for backend '{backend}': use one of {', '.join(PROVER_BACKENDS)}")
    return load_config(LoopConfig, SHIPPED_CONFIGS / LOOP_CONFIGS[backend]).environment
