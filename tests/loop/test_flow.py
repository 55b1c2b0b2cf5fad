"""A 2-iteration miniature through a real Prefect server: flow runs, MLflow runs, registry and lake agree."""

from __future__ import annotations

import pytest

from aitp.configs import config_hash
from aitp.lake import connect
from aitp.loop import LoopRun
from aitp.loop.experiment import resume_config
from aitp.registry import Registry
from tests.loop.helpers import prefect_read

pytestmark = pytest.mark.slow  # real processes: a Prefect server, killed workers or writers


def _flow_runs(url: str, experiment: str) -> list:
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterTags

    async def read(client):
        return await client.read_flow_runs(flow_run_filter=FlowRunFilter(tags=FlowRunFilterTags(all_=[experiment])))

    return prefect_read(url, read)


def test_iterations_are_named_tagged_versioned_and_linked(baseline, prefect_server):
    home, _config, stdout = baseline
    assert "iter  1" in stdout and "held-out" in stdout  # the live display ran
    config = resume_config(home, "mini")
    version = LoopRun(home, config, config_hash(config)).version

    runs = {r.name: r for r in _flow_runs(prefect_server, "mini")}
    assert {"mini-iter-000", "mini-iter-001"} <= set(runs)
    for k in (0, 1):
        run = runs[f"mini-iter-{k:03d}"]
        assert run.state.is_completed()
        assert {"mini", f"iteration:{k:03d}"} <= set(run.tags)
        assert run.flow_version == version and version.endswith(config_hash(config)[:12])

    con = connect(home)
    rows = con.execute(
        "SELECT iteration, flow_run_id, flow_run_name, mlflow_run_id, config_hash, model_in, model_out, "
        "champion_version, promoted, eval_pass_rate, status FROM iterations WHERE experiment = 'mini' ORDER BY 1"
    ).fetchall()
    con.close()
    assert [r[0] for r in rows] == [0, 1]
    registry = Registry(home)
    client = registry.client
    parent = registry.parent_run("mini")
    assert client.get_run(parent).info.status == "FINISHED"  # issue 13: the parent run ends with the loop
    for _iteration, flow_run_id, name, mlflow_run_id, digest, model_in, model_out, champion, _, rate, status in rows:
        assert str(runs[name].id) == flow_run_id  # lake -> Prefect
        mlflow_run = client.get_run(mlflow_run_id)
        assert mlflow_run.data.tags["aitp.flow_run_id"] == flow_run_id  # MLflow -> Prefect
        assert mlflow_run.data.tags["mlflow.parentRunId"] == parent
        assert digest == config_hash(config) and status == "done"
        assert model_in and model_out and champion and rate is not None
    assert rows[1][5] == Registry(home).get("mini", rows[0][7]).model_version  # iteration 1 starts from champion 0
    aliases = registry.aliases("mini")
    assert aliases["champion"] == rows[1][7]
    assert "challenger" in aliases
