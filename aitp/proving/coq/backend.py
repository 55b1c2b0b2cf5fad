"""The Coq backend's record: its session, its `coq-stdlib` set, its loop config and its tactic sets.

The session module (`coq.env`, coqidetop and the hint databases) loads only when a session opens, so a config
or a policy can ask the record what Coq offers without starting anything.
"""

from __future__ import annotations

from typing import Any

from aitp.proving.backend import Backend, TheoremSource
from aitp.proving.coq.extract import COQ_SET_VERSION, extract_coq_stdlib
from aitp.proving.coq.hints import PREMISE_RULE
from aitp.proving.coq.protocol import COQ_INSTALL_HINT, coq_available
from aitp.proving.coq.tactics import parse_coq_tactic
from aitp.proving.env import ProverEnv

FIXED_TACTICS = (
    ("intros", "none"),
    ("simpl", "none"),
    ("reflexivity", "none"),
    ("auto", "none"),
    ("lia", "none"),
    ("destruct {}", "var"),
    ("induction {}", "var"),
    ("easy", "none"),
    ("split", "none"),
    ("congruence", "none"),
    ("rewrite {}", "premise"),
    ("apply {}", "premise"),
    ("intuition", "none"),
    ("discriminate", "none"),
    ("left", "none"),
    ("right", "none"),
    ("constructor", "none"),
    ("f_equal", "none"),
    ("subst", "none"),
    ("tauto", "none"),
    ("rewrite <- {}", "premise"),
    ("auto using {}", "premises"),
)
# Rewriting with an induction hypothesis is the step the premise-only templates could never take.
HYPOTHESIS_TACTICS = (("rewrite {}", "hyp"), ("rewrite <- {}", "hyp"), ("apply {}", "hyp"))
AUTOMATION_TACTICS = (
    ("sauto", "none"),
    ("qauto", "none"),
    ("hauto", "none"),
    ("sauto use: {}", "premises"),
    ("hammer", "none"),
)
"""CoqHammer's tactics a search may choose (a session with `CoqEnv(automation=True)` accepts them)."""


def open_coq(tactic_timeout: float = 5.0, address: str | None = None, **options: Any) -> ProverEnv:
    """A Coq session (`CoqEnv` options: automation, check_dependencies...); Coq starts fast, so no address."""
    from aitp.proving.coq.env import CoqEnv

    return CoqEnv(tactic_timeout=tactic_timeout, **options)


def validate_coq_tactic(text: str, automation: bool) -> str:
    """A sampled tactic through Coq's allowlist (CoqHammer's tactics only where the session loads it)."""
    return parse_coq_tactic(text, automation=automation)


COQ = Backend(
    name="coq",
    open_session=open_coq,
    available=coq_available,
    install_hint=COQ_INSTALL_HINT,
    system_prompt="You are a Coq prover. Reply with one Coq tactic for the goal, without goal selectors.",
    validate_tactic=validate_coq_tactic,
    theorem_sets=(TheoremSource("coq-stdlib", COQ_SET_VERSION, extract_coq_stdlib),),
    loop_config="prove-coq.yaml",
    tactics=FIXED_TACTICS,
    list_separator=", ",
    hypothesis_tactics=HYPOTHESIS_TACTICS,
    automation_tactics=AUTOMATION_TACTICS,
    goals_have_hypotheses=True,
    premise_rule=PREMISE_RULE,
)
