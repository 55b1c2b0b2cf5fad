"""A real writer process SIGKILLed at each step of a commit: readers see the old commit or the new one."""

import os
import signal
import subprocess
import sys
import time

import pytest

from aitp.lake import check_lake, connect, write_partition
from tests.lake.helpers import REPO, rollout_rows

WRITER = """
import sys, time
from aitp.lake import writer
from tests.lake.helpers import rollout_rows

home, step, marker = sys.argv[1:4]
writer.MIN_ROW_GROUP = writer.MAX_ROW_GROUP = 5  # several row groups, so "writing" is mid-file

def pause(name):
    if name == step:
        open(marker, "w").close()
        time.sleep(120)

writer._on_step = pause
writer.write_partition(home, "rollouts", "e", 0, rollout_rows(10, 2, tag="v2"))
"""


def _tags(home):
    return (
        connect(home)
        .execute("SELECT count(*), list_sort(list(DISTINCT split_part(completion, ':', 1))) FROM rollouts")
        .fetchone()
    )


def _kill_writer_at(home, step, marker):
    child = subprocess.Popen([sys.executable, "-c", WRITER, str(home), step, str(marker)], cwd=REPO)
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert child.poll() is None, "the writer exited before reaching the step"
            assert time.monotonic() < deadline, "the writer never reached the step"
            time.sleep(0.02)
        os.kill(child.pid, signal.SIGKILL)
        assert child.wait(timeout=30) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


@pytest.mark.parametrize(
    ("step", "expect", "leftover"),
    [
        ("writing", (10, ["v1"]), "staging"),
        ("staged", (10, ["v1"]), "staging"),
        ("placed", (10, ["v1"]), "orphan"),
        ("committed", (20, ["v2"]), None),
    ],
)
def test_sigkill_mid_commit_leaves_a_whole_commit_visible(tmp_path, step, expect, leftover):
    home = tmp_path / "h"
    write_partition(home, "rollouts", "e", 0, rollout_rows(5, 2, tag="v1"))
    _kill_writer_at(home, step, tmp_path / "reached")

    assert _tags(home) == expect
    assert check_lake(home) == []  # leftovers are young: maybe a writer still at work
    found = check_lake(home, grace_s=0)
    assert [p.kind for p in found] == ([leftover] if leftover else [])

    repaired = check_lake(home, repair=True, grace_s=0)
    assert all(p.repaired for p in repaired)
    assert check_lake(home, grace_s=0) == []
    assert _tags(home) == expect
    if leftover:
        assert list((home / "lake/_quarantine").rglob("*.parquet")), "the leftover was moved, not deleted"

    write_partition(home, "rollouts", "e", 0, rollout_rows(3, 2, tag="v3"))
    assert _tags(home) == (6, ["v3"])
