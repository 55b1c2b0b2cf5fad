"""Faults that used to break a home for good: a first run killed while MLflow built its store, and two runs of
one experiment at once. After each, the home still runs to the end like an uninterrupted run."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from aitp.loop.writer_lock import lock_path, read_holder
from tests.loop.helpers import (
    AITP,
    REPO,
    champion_weights,
    env,
    lake_counts,
    run_aitp,
    run_and_kill,
    store_tables,
)

pytestmark = pytest.mark.slow  # real processes: a Prefect server, killed writers


def _run_args(config: Path, home: Path) -> list[str]:
    return ["run", "--config", str(config), "--home", str(home), "--no-report"]


def _agrees_with_baseline(home: Path, home0: Path) -> None:
    """Same lake rows, same champion weights, and each iteration's record names the registry's champion."""
    from aitp.lake import connect
    from aitp.registry import Registry

    assert lake_counts(home, "mini") == lake_counts(home0, "mini")
    assert champion_weights(home, "mini") == champion_weights(home0, "mini")
    con = connect(home)
    try:
        rows = con.execute(
            "SELECT promoted, champion_version, model_out FROM iterations WHERE experiment = 'mini' ORDER BY iteration"
        ).fetchall()
    finally:
        con.close()
    champion = Registry(home).get("mini", "champion")
    assert rows[-1][1] == champion.version
    assert [r[2] for r in rows if r[0]][-1] == champion.model_version  # the last one promoted is the champion


def test_a_first_run_killed_while_mlflow_builds_its_store_leaves_a_home_that_runs(baseline, prefect_server, tmp_path):
    home0, config, _ = baseline
    home = tmp_path / "home"

    def mid_setup() -> bool:  # the store half built, as in the issue (26 of 65 tables)
        return any(store_tables(p) >= 20 for p in home.glob(".mlflow.db.making-*"))

    run_and_kill(_run_args(config, home), env(prefect_server), mid_setup)
    assert not (home / "mlflow.db").exists()  # killed during set-up, not after
    done = run_aitp(_run_args(config, home), env(prefect_server))
    assert done.returncode == 0, done.stdout + done.stderr
    assert not list(home.glob(".mlflow.db.making-*"))  # the killed builder's file is gone
    _agrees_with_baseline(home, home0)


def test_a_second_run_of_one_experiment_is_refused_and_a_dead_holders_lock_taken_over(
    baseline, prefect_server, tmp_path
):
    home0, config, _ = baseline
    home = tmp_path / "home"
    first = subprocess.Popen(
        AITP + _run_args(config, home),
        env=env(prefect_server),
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while (holder := read_holder(lock_path(home, "mini"))) is None or holder.pid != first.pid:
            assert first.poll() is None and time.monotonic() < deadline, "the first run never took the lock"
            time.sleep(0.05)
        second = run_aitp(_run_args(config, home), env(prefect_server))
        assert first.poll() is None, "the first run ended before the second was refused: nothing was tested"
    finally:
        os.killpg(first.pid, signal.SIGKILL)  # a holder that dies without a word
        first.wait(timeout=30)
    lines = second.stderr.strip().splitlines()
    assert second.returncode != 0 and len(lines) == 1, second.stderr
    assert f"PID {first.pid}" in lines[0] and "aitp run --resume mini" in lines[0]

    assert read_holder(lock_path(home, "mini")).pid == first.pid  # the dead holder's name is still there
    done = run_aitp(["run", "--resume", "mini", "--home", str(home), "--no-report"], env(prefect_server))
    assert done.returncode == 0, done.stdout + done.stderr  # taken over without a word
    _agrees_with_baseline(home, home0)
