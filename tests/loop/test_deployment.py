"""prefect.yaml for real: deploy to a process pool, start a worker, trigger a run with parameters, see it finish."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from aitp.lake import connect
from tests.loop.helpers import REPO, env, prefect_read, write_config

pytestmark = pytest.mark.slow  # real processes: a Prefect server, killed workers or writers

PREFECT = [sys.executable, "-m", "prefect"]


def _prefect(args: list[str], environ: dict[str, str], timeout: float = 300) -> str:
    done = subprocess.run(PREFECT + args, env=environ, cwd=REPO, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"prefect {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


async def _read_deployments(client) -> dict:
    return {d.name: d for d in await client.read_deployments()}


def test_deploy_trigger_and_complete(prefect_server, tmp_path):
    environ = env(prefect_server, PREFECT_HOME=str(tmp_path / "prefect-client"))
    _prefect(["work-pool", "create", "aitp-process", "--type", "process", "--overwrite"], environ)
    _prefect(["--no-prompt", "deploy", "--all"], environ)

    deployments = prefect_read(prefect_server, _read_deployments)
    assert {"nightly", "manual"} <= set(deployments)
    assert [s.schedule.cron for s in deployments["nightly"].schedules] == ["0 2 * * *"]

    home = tmp_path / "home"
    params = {"config": str(write_config(tmp_path / "mini.yaml", experiment="deployed")), "home": str(home)}
    params["iterations"] = 0
    out = _prefect(["deployment", "run", "aitp-loop/manual", "--params", json.dumps(params)], environ)
    assert "deployed" in out or "Parameters" in out
    _prefect(["worker", "start", "--pool", "aitp-process", "--run-once"], environ, timeout=600)

    con = connect(Path(home))
    status = con.execute("SELECT iteration, status FROM iterations WHERE experiment = 'deployed'").fetchall()
    con.close()
    assert status == [(0, "done")]
