"""A rollout worker SIGKILLed mid-iteration: the loop survives on the other worker and ends like the baseline."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from aitp.lake import committed_shards
from tests.loop.helpers import AITP, REPO, champion_weights, env, lake_counts
from tests.rollouts.test_fault_tolerance import cluster  # noqa: F401  (a real scheduler and two workers)

pytestmark = pytest.mark.slow  # real processes: a Prefect server, killed workers or writers


def test_worker_killed_mid_rollouts(cluster, baseline, prefect_server, tmp_path):  # noqa: F811
    address, client = cluster
    home0, config, _ = baseline
    home = tmp_path / "home"
    args = ["run", "--config", str(config), "--home", str(home), "--no-report", "--dask-address", address]
    proc = subprocess.Popen(AITP + args, env=env(prefect_server), cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 600
        while not ((home / "lake").exists() and committed_shards(home, "rollouts", "mini", 1)):
            assert proc.poll() is None, proc.stdout.read()
            assert time.monotonic() < deadline
            time.sleep(0.02)
        pids = client.run(os.getpid)
        victim = sorted(pids)[0]
        os.kill(pids[victim], signal.SIGKILL)
        out, _ = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out
    assert len(client.scheduler_info()["workers"]) == 1  # the kill was real
    assert lake_counts(home, "mini") == lake_counts(home0, "mini")
    assert champion_weights(home, "mini") == champion_weights(home0, "mini")
