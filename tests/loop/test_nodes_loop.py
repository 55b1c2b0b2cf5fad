"""A loop iteration whose training spans two nodes: two Dask workers, one launcher agent each (CPU, gloo).

The checkpoint is the usual one: registered, evaluated and judged like any other, its record saying how many
processes and nodes trained it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from distributed import Client

from aitp.checkpoints import RECORD_FILE
from aitp.configs import load_config
from aitp.fanout.cluster import local_cluster
from aitp.loop import LoopConfig, open_experiment, run_iteration
from aitp.train.checkpoint import checkpoint_dir

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


@pytest.mark.slow
def test_an_iteration_trains_on_two_nodes_and_is_registered_and_judged(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    data = load_config(LoopConfig, CONFIGS / "quickstart.yaml").model_dump(mode="json")
    data.update(experiment="nodes", iterations=1)
    data["fanout"].update(chunk_items=18)
    world = data["environment"]
    world.update(demonstrations_per_task=16, eval={"n_per_task": 8, "max_tokens": 24})
    world["tasks"] = [{k: v for k, v in t.items() if k != "demonstrations"} for t in world["tasks"]]
    world["rollouts"].update(items_per_task=6, group_size=4, threshold=-1.0)
    world["warm_start"].update(steps=20, threads=1)
    world["self_train"].update(steps=4, batch_size=8, threads=1, nodes=2)
    run = open_experiment(tmp_path, LoopConfig.model_validate(data))
    with local_cluster(2) as cluster, Client(cluster, set_as_default=False) as client:
        for k in (0, 1):
            assert run_iteration(run, k, client)["status"] == "done"
    record = json.loads((checkpoint_dir(tmp_path, "nodes", 1) / RECORD_FILE).read_text())
    assert record["nodes"] == 2 and record["world_size"] == 2
    first = json.loads((checkpoint_dir(tmp_path, "nodes", 0) / RECORD_FILE).read_text())
    assert first["nodes"] == 1 and first["world_size"] == 1  # the warm start kept its one process
    version = run.registry.get(run.experiment, "challenger") or run.registry.get(run.experiment, "champion")
    assert version is not None
    evaluated = run.environment.evaluator.load(tmp_path, "nodes", version.model_version)
    assert evaluated is not None and 0.0 <= evaluated.score("pass_rate") <= 1.0
