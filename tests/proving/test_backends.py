"""Sessions fork from the loaded prover this host already serves, so local workers load HOL Light once per run."""

from __future__ import annotations

from pathlib import Path

import pytest

from aitp.proving.backends import open_env, serving_address
from tests.proving.cases import CASES


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


@pytest.mark.hol_light
def test_a_session_forks_from_the_prover_serving_this_host(hol_server):
    case = CASES["hol-light"]
    with open_env("hol-light", tactic_timeout=2.0, address=hol_server.path) as env:
        assert env.server.proc is None  # no toplevel of its own: no second 70-90 s load
        assert _parent(env._session.pid) == hol_server.proc.pid
        assert env.run_tactic(env.open(case.theorem), case.first_tactic).outcome == "goals"


def test_a_fast_starting_backend_serves_no_address():
    assert serving_address("coq") is None
