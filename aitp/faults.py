"""Named points of an iteration where a process may be told to SIGKILL itself, so tests hit exact boundaries.

A crash can land anywhere; the loop's promise is that `aitp run --resume` after it ends bit-exact with an
uninterrupted run. Killing from outside at a polled moment cannot hit a window of milliseconds (between recording a
promotion and moving the aliases), so a test sets `AITP_KILL_AT=<point>` and the process kills its own process group
with SIGKILL there: a real kill, at a chosen place. Points are `<stage>:<start|done>:<iteration>` for every timed
stage (items, rollouts, train, register, eval, promote, plot) and `promote:recorded:<iteration>`, the decision in the
lake with the aliases not moved yet. Unset (always, outside tests), a point costs one environment lookup.
"""

from __future__ import annotations

import os
import signal

KILL_AT = "AITP_KILL_AT"


def point(name: str) -> None:
    """SIGKILL this process group here when `AITP_KILL_AT` names this point."""
    if os.environ.get(KILL_AT) == name:
        os.killpg(os.getpgrp(), signal.SIGKILL)
