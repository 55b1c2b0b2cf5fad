"""The HOL Light server's tactic timer counts the session's own CPU time, not the wall clock."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from tests.proving.cases import CASES


@pytest.mark.hol_light
def test_time_a_session_does_not_run_is_not_charged_to_its_tactic(hol_server):
    from aitp.proving.hol_light.env import HolLightEnv

    case = CASES["hol-light"]
    env = HolLightEnv(server=hol_server)
    try:
        child = env.run_tactic(env.open(case.theorem), case.first_tactic).goals[0]
        pid = env._session.pid
        # Stopped for 1.5 s in the middle of a 1 s budget (as a session starved by other jobs would be): a wall-clock
        # timer fires during the stop and answers at ~1.8 s; a CPU timer still has most of its budget left.
        threading.Timer(0.3, os.kill, (pid, signal.SIGSTOP)).start()
        threading.Timer(1.8, os.kill, (pid, signal.SIGCONT)).start()
        start = time.perf_counter()
        result = env.run_tactic(child, case.slow_tactic, timeout=1.0)
        elapsed = time.perf_counter() - start
        assert result.outcome == "timeout", result
        assert 2.3 <= elapsed < 15, elapsed
        assert env.run_tactic(child, case.failing_tactic).outcome in ("error", "goals")  # the session lives on
    finally:
        env.close()
