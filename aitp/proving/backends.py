"""Backend registry: names, availability checks (with the install command) and construction."""

from __future__ import annotations

from aitp.proving.coq import CoqEnv, coq_available
from aitp.proving.env import ProverEnv
from aitp.proving.errors import ProverUnavailableError, UnknownBackendError
from aitp.proving.hol_light import HolLightEnv, hol_light_available
from aitp.proving.leandojo import LeanDojoEnv, leandojo_available

BACKENDS: dict[str, tuple[type[ProverEnv], object]] = {
    "coq": (CoqEnv, coq_available),
    "hol-light": (HolLightEnv, hol_light_available),
    "leandojo": (LeanDojoEnv, leandojo_available),
}
DEFAULT_THEOREM_SETS = {"coq": "coq-stdlib", "hol-light": "hol-core"}


def backend_available(name: str) -> tuple[bool, str]:
    """Whether a backend can run here, and if not, why and how to install it."""
    if name not in BACKENDS:
        raise UnknownBackendError(f"unknown backend '{name}': use one of {', '.join(BACKENDS)}")
    return BACKENDS[name][1]()


def open_env(name: str, tactic_timeout: float = 5.0, **kwargs) -> ProverEnv:
    """Start a prover session of backend `name`, or fail in one line naming the install command."""
    ok, why = backend_available(name)
    if not ok:
        raise ProverUnavailableError(f"backend '{name}' is unavailable: {why}")
    return BACKENDS[name][0](tactic_timeout=tactic_timeout, **kwargs)
