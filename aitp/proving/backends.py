"""The prover backends, registered in one place: look one up, check it is installed, open a session.

Each backend package defines its `Backend` record (`aitp/proving/<name>/backend.py`); adding a prover is a
package plus one entry here. The records load no prover session module until a session opens.
"""

from __future__ import annotations

from aitp.proving.backend import Backend
from aitp.proving.coq.backend import COQ
from aitp.proving.env import ProverEnv
from aitp.proving.errors import ProverUnavailableError, UnknownBackendError
from aitp.proving.hol_light.backend import HOL_LIGHT
from aitp.proving.leandojo.backend import LEANDOJO

BACKENDS: dict[str, Backend] = {b.name: b for b in (COQ, HOL_LIGHT, LEANDOJO)}
DEFAULT_BACKEND = COQ.name
"""The backend a config or command uses when it names none."""


def backend(name: str) -> Backend:
    """The record of backend `name`, or `UnknownBackendError` naming the known ones."""
    if name not in BACKENDS:
        raise UnknownBackendError(f"unknown backend '{name}': use one of {', '.join(BACKENDS)}")
    return BACKENDS[name]


def backend_available(name: str) -> tuple[bool, str]:
    """Whether a backend can run here, and if not, why and how to install it."""
    return backend(name).available()


def serving_address(name: str) -> str | None:
    """Where this process's loaded prover forks sessions for other processes of this host (HOL Light's socket).

    Loading HOL Light's library is slow (`benchmarks/results/history-prove.md`): local workers that fork
    from one loaded toplevel pay it once per run, not once per process. None for a backend that starts
    fast (Coq) or has no server.
    """
    serve = backend(name).serve
    return serve() if serve is not None else None


def open_env(name: str, tactic_timeout: float = 5.0, address: str | None = None, **kwargs) -> ProverEnv:
    """Start a prover session of backend `name`, or fail in one line naming the install command.

    `address` (from `serving_address`) forks the session from that loaded prover when it serves on this host;
    elsewhere (a worker on another machine) the backend starts its own.
    """
    ok, why = backend_available(name)
    if not ok:
        raise ProverUnavailableError(f"backend '{name}' is unavailable: {why}")
    return backend(name).open_session(tactic_timeout=tactic_timeout, address=address, **kwargs)
