"""A miniature loop config, the means to run `aitp run` as a real process (and kill it), and a real other process
holding a writer lock."""

from __future__ import annotations

import copy
import hashlib
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
AITP = [sys.executable, "-m", "aitp.cli"]

ONE_DIGIT_SUMS = {
    "min_terms": 2,
    "max_terms": 2,
    "min_digits": 1,
    "max_digits": 1,
    "operators": ["+"],
    "allow_parentheses": False,
    "allow_negation": False,
}
"""basic_arithmetic at its easiest: sums of two one-digit numbers, answers of one or two tokens."""

WORLD = {
    "type": "reasoning",
    "system_prompt": "Answer in <answer></answer>.",
    "policy": {
        "backend": "tiny",
        "seed": 0,
        "config": {"n_layer": 1, "n_head": 2, "n_kv_head": 1, "d_model": 32, "max_seq_len": 192},
    },
    "tasks": [
        {"name": "basic_arithmetic", "config": ONE_DIGIT_SUMS},
        {"name": "leg_counting", "config": {"min_animals": 1, "max_animals": 1}},
    ],
    "demonstrations_per_task": 6,
    # threshold -1 keeps every group, so iteration 1 always has something to train on
    "rollouts": {"items_per_task": 4, "group_size": 2, "max_tokens": 8, "threshold": -1},
    # one training thread: a fit pins every core by default, and a 32-wide model's steps on 2 threads spin against
    # the test's other processes (server, Dask worker) on a 2-core machine: 150 steps took 31-41 s, not 3.7
    "warm_start": {"demonstrations_only": True, "steps": 4, "batch_size": 4, "max_len": 128, "threads": 1},
    "self_train": {"steps": 150, "batch_size": 4, "max_len": 128, "threads": 1},
    "eval": {"n_per_task": 4, "max_tokens": 8},
}
MINI = {
    "experiment": "mini",
    "seed": 3,
    "iterations": 1,
    "device": "cpu",
    "environment": WORLD,
    "fanout": {"chunk_items": 1, "workers": 1},
}
"""A reasoning loop of two tasks and a 1-layer model: an iteration in seconds."""


def mini(**world: object) -> dict:
    """A deep copy of `MINI` with keys of its world (`environment`) changed."""
    data = copy.deepcopy(MINI)
    data["environment"].update(copy.deepcopy(world))
    return data


def write_config(path: Path, **changes: object) -> Path:
    """The miniature config as YAML, with top-level keys changed."""
    path.write_text(yaml.safe_dump({**copy.deepcopy(MINI), **changes}, sort_keys=False))
    return path


def env(prefect_url: str | None = None, **extra: str) -> dict[str, str]:
    """The environment of an `aitp` subprocess: one thread per process, a given Prefect server."""
    out = dict(os.environ)
    out.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONUNBUFFERED="1", **extra)
    out.pop("MLFLOW_TRACKING_URI", None)
    if prefect_url:
        out["PREFECT_API_URL"] = prefect_url
    return out


def run_aitp(args: list[str], environ: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(AITP + args, env=environ, cwd=REPO, capture_output=True, text=True, timeout=timeout)


def run_and_kill(args: list[str], environ: dict[str, str], when: Callable[[], bool], timeout: float = 600) -> str:
    """Start `aitp ...` in its own process group and SIGKILL the whole group once `when()` holds."""
    log = subprocess.Popen(
        AITP + args,
        env=environ,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    deadline = time.monotonic() + timeout
    try:
        while not when():
            if log.poll() is not None:
                raise AssertionError(f"aitp exited ({log.returncode}) before the kill point:\n{log.stdout.read()}")
            if time.monotonic() > deadline:
                raise AssertionError("the kill point never came")
            time.sleep(0.02)
        os.killpg(log.pid, signal.SIGKILL)
    finally:
        if log.poll() is None:
            os.killpg(log.pid, signal.SIGKILL)
        log.wait(timeout=30)
    return log.stdout.read()


def weights_hash(checkpoint: str | Path) -> str:
    """The content hash of a checkpoint's weights alone (its training record holds times)."""
    digest = hashlib.sha256()
    for f in sorted(Path(checkpoint).glob("*.safetensors")):
        digest.update(f.read_bytes())
    return digest.hexdigest()[:16]


def lake_counts(home: Path, experiment: str) -> dict[str, int]:
    """Rows per lake table of an experiment."""
    from aitp.lake import connect

    con = connect(home)
    try:
        tables = ("items", "rollouts", "evals", "eval_samples", "iterations")
        return {
            t: con.execute(f"SELECT count(*) FROM {t} WHERE experiment = $e", {"e": experiment}).fetchone()[0]
            for t in tables
        }
    finally:
        con.close()


def champion_weights(home: Path, experiment: str) -> tuple[str, str]:
    """The champion's registry version and weights hash."""
    from aitp.registry import Registry

    registry = Registry(home)
    champion = registry.get(experiment, "champion")
    return champion.version, weights_hash(registry.checkpoint_path(champion))


def prefect_read(url: str, read: Callable) -> object:
    """Run `read(client)` (a coroutine function) against the Prefect API at url."""
    import asyncio

    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    async def go():
        async with get_client() as client:
            return await read(client)

    with temporary_settings({PREFECT_API_URL: url}):
        return asyncio.run(go())


def store_tables(db: Path) -> int:
    """Tables an MLflow SQLite store has so far (0 while it is being written): how far its set-up got."""
    try:
        with sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True, timeout=0.05) as con:
            return con.execute("SELECT count(*) FROM sqlite_master WHERE type = 'table'").fetchone()[0]
    except sqlite3.DatabaseError:
        return 0


HOLD_LOCK = """
import sys
from aitp.loop.writer_lock import home_writer_lock, writer_lock
home, experiment = sys.argv[1:3]
with home_writer_lock(home) if experiment == "-" else writer_lock(home, experiment):
    print("held", flush=True)
    sys.stdin.read()  # until the test lets go (closes stdin) or kills this process
"""


@contextmanager
def lock_held(home: Path, experiment: str | None = None) -> Iterator[subprocess.Popen]:
    """A real other process holding the experiment's writer lock (the whole home's without one) for the block."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(home), experiment or "-"],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert holder.stdout.readline() == "held\n", "the holder never took the lock"
        yield holder
    finally:
        holder.stdin.close()  # a clean release (unless the test killed it already)
        holder.wait(timeout=30)
        holder.stdout.close()
