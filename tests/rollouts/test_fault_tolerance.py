"""Rollouts on a real `dask scheduler` and two `dask worker` processes; one worker is SIGKILLed mid-run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import replace

import pytest

from aitp.policies.base import SamplingParams
from aitp.reasoning.items import generate_items
from aitp.reasoning.rollouts import run_rollouts
from tests.rollouts.helpers import PYTHON, make_tiny_checkpoint, stop, subprocess_env

VOLATILE = ("latency_s", "worker")  # where and how fast a row was made; everything else must match


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A scheduler on a free port and two single-threaded workers without nannies (a kill is final)."""
    from distributed import Client

    root = tmp_path_factory.mktemp("dask")
    scheduler_file = root / "scheduler.json"
    env = subprocess_env()
    procs = [
        subprocess.Popen(
            [
                PYTHON,
                "-m",
                "distributed.cli.dask_scheduler",
                "--host",
                "127.0.0.1",
                "--port",
                "0",
                "--no-dashboard",
                "--scheduler-file",
                str(scheduler_file),
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=open(root / "scheduler.log", "wb"),
        )
    ]
    deadline = time.monotonic() + 60
    while not scheduler_file.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    address = json.loads(scheduler_file.read_text())["address"]
    for i in range(2):
        procs.append(
            subprocess.Popen(
                [
                    PYTHON,
                    "-m",
                    "distributed.cli.dask_worker",
                    address,
                    "--nthreads",
                    "1",
                    "--no-nanny",
                    "--memory-limit",
                    "1.5GiB",
                    "--no-dashboard",
                    "--name",
                    f"w{i}",
                ],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=open(root / f"worker{i}.log", "wb"),
            )
        )
    client = Client(address, set_as_default=False, timeout=30)
    try:
        client.wait_for_workers(2, timeout=60)
        yield address, client
    finally:
        client.close()
        for proc in reversed(procs):
            stop(proc)


def _stable(rows):
    return [{k: v for k, v in row.items() if k not in VOLATILE} for row in rows]


def test_killed_worker_costs_only_a_retry(cluster, tmp_path):
    address, client = cluster
    policy = str(make_tiny_checkpoint(tmp_path / "tiny"))
    items = generate_items("basic_arithmetic", 16, seed=3)
    params = SamplingParams(temperature=1.0, max_tokens=96)
    kwargs = dict(experiment="fault", iteration=1, seed=3, shard_size=1)

    # The fault-free run joins the scheduler by address; it also warms both workers' model caches.
    reference = run_rollouts(items, policy, replace(params, n=4), address, **kwargs)
    assert {row["worker"] for row in reference} == {"w0", "w1"}

    pids = client.run(os.getpid)  # worker address -> pid
    killed: dict[str, object] = {}

    def kill_a_busy_worker(done: int, total: int) -> None:
        if killed:
            return
        busy = [addr for addr, keys in client.processing().items() if keys and addr in pids]
        assert busy, "no worker had a shard in flight when the first result arrived"
        killed["address"], killed["shards"] = busy[0], list(client.processing()[busy[0]])
        os.kill(pids[busy[0]], signal.SIGKILL)

    faulty = run_rollouts(items, policy, replace(params, n=4), client, on_progress=kill_a_busy_worker, **kwargs)

    assert killed and killed["shards"], "the kill did not land while the worker held a shard"
    assert len(faulty) == len(reference) == 16 * 4
    assert _stable(faulty) == _stable(reference)
    deadline = time.monotonic() + 10
    while killed["address"] in client.scheduler_info(n_workers=-1)["workers"] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert killed["address"] not in client.scheduler_info(n_workers=-1)["workers"]
