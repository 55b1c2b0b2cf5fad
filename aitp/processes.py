"""Whether a process is still alive: one answer for the run lock, the tracking store's set-up and the services.

A PID that signal 0 reaches may be a zombie (exited, not yet reaped by its parent): it holds nothing and counts
as dead. A PID owned by another user cannot be signalled but is alive.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def pid_alive(pid: int) -> bool:
    """Whether process `pid` exists and has not exited (a zombie has)."""
    try:
        os.kill(pid, 0)
    except PermissionError:
        return True
    except OSError:
        return False
    with contextlib.suppress(OSError, ValueError, IndexError):
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        return state != "Z"
    return True
