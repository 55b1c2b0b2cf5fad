"""The HOL Light backend's record: forked sessions of one loaded toplevel, its `hol-core` set, its tactic set.

Loading HOL Light's library is slow (`benchmarks/results/history-prove.md`), so the record serves forked
sessions (`serve`): local workers fork from this process's loaded toplevel and pay the load once per run.
"""

from __future__ import annotations

import os
from typing import Any

from aitp.proving.backend import Backend, TheoremSource
from aitp.proving.env import ProverEnv
from aitp.proving.hol_light.extract import HOL_SET_VERSION, extract_hol_core
from aitp.proving.hol_light.session import HOL_INSTALL_HINT, HolLightServer, hol_light_available
from aitp.proving.hol_light.tactics import parse_hol_tactic

FIXED_TACTICS = (
    ("ARITH_TAC", "none"),
    ("REPEAT STRIP_TAC", "none"),
    ("STRIP_TAC", "none"),
    ("CONJ_TAC", "none"),
    ("GEN_TAC", "none"),
    ("DISCH_TAC", "none"),
    ("INDUCT_TAC", "none"),
    ("EQ_TAC", "none"),
    ("REFL_TAC", "none"),
    ("ITAUT_TAC", "none"),
    ("DISJ1_TAC", "none"),
    ("DISJ2_TAC", "none"),
    ("ASM_REWRITE_TAC []", "none"),
    ("ASM_MESON_TAC []", "none"),
    ("REWRITE_TAC [{}]", "premises"),
    ("ASM_REWRITE_TAC [{}]", "premises"),
    ("SIMP_TAC [{}]", "premises"),
    ("ASM_MESON_TAC [{}]", "premises"),
    ("ONCE_REWRITE_TAC [{}]", "premise"),
    ("MATCH_MP_TAC {}", "premise"),
    ("MP_TAC {}", "premise"),
)


def open_hol_light(tactic_timeout: float = 5.0, address: str | None = None, **options: Any) -> ProverEnv:
    """A HOL Light session, forked from the toplevel serving `address` when it serves on this host."""
    from aitp.proving.hol_light.env import HolLightEnv

    if address is not None and os.path.exists(address):
        options.setdefault("server", HolLightServer(address))
    return HolLightEnv(tactic_timeout=tactic_timeout, **options)


def serving_path() -> str:
    """The socket of this process's loaded toplevel (started on first use), which forks sessions for this host."""
    return HolLightServer.shared().path


def validate_hol_tactic(text: str, automation: bool) -> str:
    """A sampled tactic through HOL Light's allowlist, as its canonical text (HOL Light has no automation set)."""
    return parse_hol_tactic(text).text


HOL_LIGHT = Backend(
    name="hol-light",
    open_session=open_hol_light,
    available=hol_light_available,
    install_hint=HOL_INSTALL_HINT,
    system_prompt="You are a HOL Light prover. Reply with one HOL Light tactic for the goal.",
    validate_tactic=validate_hol_tactic,
    theorem_sets=(TheoremSource("hol-core", HOL_SET_VERSION, extract_hol_core),),
    loop_config="prove-hol.yaml",
    tactics=FIXED_TACTICS,
    list_separator="; ",
    serve=serving_path,
)
