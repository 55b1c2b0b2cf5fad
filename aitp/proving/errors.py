"""Errors a prover user can hit, each naming its fix, plus the internal crash signal."""

from __future__ import annotations

from aitp.errors import AitpError


class ProverUnavailableError(AitpError):
    """A backend whose binaries or Python package are missing on this machine."""


class UnknownBackendError(AitpError):
    """A backend name that aitp does not know."""


class UnknownTheoremError(AitpError):
    """A theorem name or theorem set that does not exist."""


class MissingHumanStepsError(AitpError):
    """A generator asked to learn from the library's human proof steps in a home that has none replayed."""


class TacticRejectedError(AitpError):
    """A tactic outside the backend's allowlist grammar; it is never sent to the prover."""


class ProverCrashedError(RuntimeError):
    """The prover process died or stopped answering; the backend replaces it (not user-facing)."""

    def __init__(self, message: str, timed_out: bool = False) -> None:
        super().__init__(message)
        self.timed_out = timed_out
