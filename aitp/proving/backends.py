"""Backend registry: names, availability checks (with the install command) and construction."""

from __future__ import annotations

import os

from aitp.proving.coq import CoqEnv, coq_available
from aitp.proving.env import ProverEnv
from aitp.proving.errors import ProverUnavailableError, UnknownBackendError
from aitp.proving.hol_light import HolLightEnv, HolLightServer, hol_light_available
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


def serving_address(name: str) -> str | None:
    """Where this process's loaded prover forks sessions for other processes of this host (HOL Light's socket).

    Loading HOL Light's library is slow (`benchmarks/results/history-prove.md`): local workers that fork
    from one loaded toplevel pay it once per run, not once per process. None for a backend that starts
    fast (Coq) or has no server.
    """
    if name != "hol-light":
        return None
    return HolLightServer.shared().path


def open_env(name: str, tactic_timeout: float = 5.0, address: str | None = None, **kwargs) -> ProverEnv:
    """Start a prover session of backend `name`, or fail in one line naming the install command.

    `address` (from `serving_address`) forks the session from that loaded prover when it serves on this host;
    elsewhere (a worker on another machine) the backend starts its own.
    """
    ok, why = backend_available(name)
    if not ok:
        raise ProverUnavailableError(f"backend '{name}' is unavailable: {why}")
    if address is not None and name == "hol-light" and os.path.exists(address):
        kwargs.setdefault("server", HolLightServer(address))
    return BACKENDS[name][0](tactic_timeout=tactic_timeout, **kwargs)
