"""The main job SIGKILLed at each boundary of an iteration's stages (after training, after registration, after
the evaluation, between recording a promotion and moving the aliases, after the aliases moved), then resumed: it
ends bit-exact with an uninterrupted run. The kill is real (SIGKILL of the whole process group); only its moment is
chosen, by `AITP_KILL_AT` (`aitp.faults`), since a polled kill from outside cannot land in a window of milliseconds."""

from __future__ import annotations

import subprocess

import pytest

from aitp.faults import KILL_AT
from aitp.lake import read_iteration
from aitp.registry import Registry, model_name
from tests.lake import test_heal
from tests.loop.helpers import AITP, REPO, champion_weights, env, run_aitp
from tests.loop.test_resume import _model_ids

pytestmark = pytest.mark.slow  # a killed run and its resume per boundary, through a real Prefect server

RUN_IDS = ["flow_run_id", "flow_run_name", "mlflow_run_id"]  # every run has its own Prefect and MLflow runs


def lake_fingerprint(home, experiment: str) -> dict:
    """The content of the loop's tables, what measures the run (times, its run ids) left out."""
    measured = {**test_heal.MEASURED, "iterations": [*test_heal.MEASURED["iterations"], *RUN_IDS]}
    return test_heal.lake_fingerprint(home, experiment, measured)


POINTS = ["train:done:1", "register:done:1", "eval:done:1", "promote:recorded:1", "promote:done:1"]


def _registry_state(home) -> tuple:
    registry = Registry(home)
    versions = registry.client.search_model_versions(f"name = '{model_name('mini')}'")
    return registry.aliases("mini"), sorted((v.version, v.tags.get("aitp.decision")) for v in versions)


@pytest.mark.parametrize("point", POINTS)
def test_killed_at_a_stage_boundary_then_resumed_ends_like_an_uninterrupted_run(
    point, baseline, prefect_server, tmp_path
):
    home0, config, _ = baseline
    home = tmp_path / "home"
    args = ["run", "--config", str(config), "--home", str(home), "--no-report"]
    killed = subprocess.run(
        AITP + args,
        env=env(prefect_server, **{KILL_AT: point}),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        start_new_session=True,  # its own process group: the kill takes the run and its workers only
    )
    assert killed.returncode == -9, f"not killed at {point}:\n{killed.stdout[-2000:]}{killed.stderr[-2000:]}"
    assert (read_iteration(home, "mini", 1) or {}).get("status") != "done"

    done = run_aitp(["run", "--resume", "mini", "--home", str(home), "--no-report"], env(prefect_server))
    assert done.returncode == 0, done.stdout + done.stderr
    assert lake_fingerprint(home, "mini") == lake_fingerprint(home0, "mini")
    assert _model_ids(home) == _model_ids(home0)
    assert champion_weights(home, "mini") == champion_weights(home0, "mini")
    assert _registry_state(home) == _registry_state(home0)
