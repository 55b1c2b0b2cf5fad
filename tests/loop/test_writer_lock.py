"""The writer lock names its holder by PID and start time, so a reused PID is not taken for the holder."""

from __future__ import annotations

import json
import subprocess

import pytest

from aitp.loop import writer_lock as lock
from aitp.loop.writer_lock import ExperimentBusyError, Holder, lock_path, process_start, read_holder, writer_lock


def test_a_holder_is_its_pid_and_start_time_not_its_pid_alone():
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        started = process_start(sleeper.pid)
        assert started is not None
        assert Holder(sleeper.pid, started, "sleep").alive()
        assert not Holder(sleeper.pid, started - 100.0, "an earlier process with this PID").alive()
    finally:
        sleeper.kill()
        sleeper.wait()
    assert not Holder(sleeper.pid, started, "sleep").alive()


def test_without_flock_the_recorded_holder_decides(tmp_path, monkeypatch):
    """A filesystem without `flock` cannot be mounted here, so the module's `fcntl` is set to None (a fake)."""
    monkeypatch.setattr(lock, "fcntl", None)
    path = lock_path(tmp_path, "e")
    path.parent.mkdir(parents=True)
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        path.write_text(json.dumps({"pid": sleeper.pid, "started": process_start(sleeper.pid), "command": "x"}))
        with pytest.raises(ExperimentBusyError, match=f"PID {sleeper.pid}"), writer_lock(tmp_path, "e"):
            pass
    finally:
        sleeper.kill()
        sleeper.wait()
    with writer_lock(tmp_path, "e"):  # the holder died: taken over
        assert read_holder(path).pid != sleeper.pid
