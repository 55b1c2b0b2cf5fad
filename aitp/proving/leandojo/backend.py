"""The LeanDojo backend's record: Lean 4 through `Dojo.run_tac`, with no theorem set, loop or fixed tactic set.

Lean theorems come from traced repositories (`aitp prove --backend leandojo --theorems FILE.jsonl`), which needs
a Lean toolchain and network; the fixed and ranked policies have no Lean tactic set, the generative one does.
"""

from __future__ import annotations

from typing import Any

from aitp.proving.backend import Backend
from aitp.proving.env import ProverEnv
from aitp.proving.errors import TacticRejectedError
from aitp.proving.leandojo.env import LEAN_INSTALL_HINT, leandojo_available


def open_leandojo(tactic_timeout: float = 5.0, address: str | None = None, **options: Any) -> ProverEnv:
    """A LeanDojo session (each theorem enters its own Dojo, so there is nothing to serve)."""
    from aitp.proving.leandojo.env import LeanDojoEnv

    return LeanDojoEnv(tactic_timeout=tactic_timeout, **options)


def validate_lean_line(text: str, automation: bool) -> str:
    """A sampled Lean tactic: one non-empty line, kept as written (the session's own check comes when it runs)."""
    if text.strip() and "\n" not in text.strip():
        return text
    raise TacticRejectedError("empty or multi-line tactic")


LEANDOJO = Backend(
    name="leandojo",
    open_session=open_leandojo,
    available=leandojo_available,
    install_hint=LEAN_INSTALL_HINT,
    system_prompt="You are a Lean 4 prover. Reply with one Lean tactic for the goal.",
    validate_tactic=validate_lean_line,
)
