"""environment.rollouts.overlap: iteration k+1 samples with iteration k's starting model while iteration k trains.

Run for real: the quickstart shrunk to seconds, in-process stages, one local Dask cluster of one worker
process. The same loop without overlap is the baseline the lake's row counts are compared with.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from distributed import Client
from pydantic import ValidationError

from aitp.configs import load_config
from aitp.fanout.cluster import local_cluster
from aitp.lake import connect, read_iteration
from aitp.loop import LoopConfig, open_experiment, run_iteration
from aitp.loop.iteration import quiet

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
TABLES = ("items", "rollouts", "evals", "eval_samples", "iterations")


def _small(overlap: bool, experiment: str) -> LoopConfig:
    data = load_config(LoopConfig, CONFIGS / "quickstart.yaml").model_dump(mode="json")
    data.update(experiment=experiment, iterations=2)
    data["fanout"].update(chunk_items=9)
    world = data["environment"]
    world.update(demonstrations_per_task=16, eval={"n_per_task": 8, "max_tokens": 24})
    world["tasks"] = [{k: v for k, v in t.items() if k != "demonstrations"} for t in world["tasks"]]
    world["rollouts"].update(items_per_task=6, group_size=4, threshold=-1.0, overlap=overlap)
    world["warm_start"].update(steps=20, threads=1)
    world["self_train"].update(steps=4, batch_size=8, threads=1)
    return LoopConfig.model_validate(data)


def _counts(home: Path, experiment: str) -> dict[str, int]:
    con = connect(home, read_only=True)
    try:
        return {
            t: con.execute(f"SELECT count(*) FROM {t} WHERE experiment = ?", [experiment]).fetchone()[0] for t in TABLES
        }
    finally:
        con.close()


@pytest.mark.slow
def test_overlap_samples_the_next_iteration_during_training_with_the_lag_recorded(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    events: list[tuple[int, str, str, str]] = []

    def listen(kind: str, payload: dict[str, Any]) -> None:
        if kind == "stage":
            events.append((payload["iteration"], payload["stage"], payload["state"], threading.current_thread().name))

    with local_cluster(1) as cluster, Client(cluster, set_as_default=False) as client:
        for overlap, home in ((False, tmp_path / "plain"), (True, tmp_path / "overlap")):
            run = open_experiment(home, _small(overlap, "ov"))
            for k in range(3):
                row = run_iteration(run, k, client, on_event=listen if overlap else quiet)
                assert row["status"] == "done"
    home = tmp_path / "overlap"
    # iteration 2 sampled in a thread of its own while iteration 1 trained
    order = [(k, stage, state) for k, stage, state, _ in events]
    assert order.index((2, "rollouts-chunk-0000", "start")) < order.index((1, "train", "done"))
    assert any(
        k == 2 and stage.startswith("rollouts") and thread.startswith("act-ahead-2") for k, stage, _, thread in events
    )
    rows = {k: read_iteration(home, "ov", k) for k in range(3)}
    assert rows[0]["rollouts_model"] is None and rows[0]["policy_lag"] is None  # the warm start samples nothing
    assert rows[1]["rollouts_model"] == rows[1]["model_in"] and rows[1]["policy_lag"] == 0
    assert rows[2]["rollouts_model"] == rows[1]["model_in"]  # the model iteration 1 started from
    assert rows[2]["policy_lag"] == (1 if rows[1]["promoted"] else 0)
    assert (rows[2]["rollouts_model"] != rows[2]["model_in"]) == bool(rows[1]["promoted"])
    # every lake table has as many rows as the same loop without overlap
    assert _counts(home, "ov") == _counts(tmp_path / "plain", "ov")
    con = connect(home, read_only=True)
    try:
        lineage = con.execute(
            "SELECT l.iteration, count(*), count(DISTINCT l.sampled_by), any_value(l.sampled_by = i.rollouts_model), "
            "max(l.policy_lag), any_value(l.trained_into = i.model_out) FROM rollout_lineage l "
            "JOIN iterations i USING (experiment, iteration) WHERE l.experiment = 'ov' GROUP BY 1 ORDER BY 1"
        ).fetchall()
    finally:
        con.close()
    assert [(k, n, models, same, into) for k, n, models, same, _, into in lineage] == [
        (1, 72, 1, True, True),
        (2, 72, 1, True, True),
    ]
    assert max(lag for *_, lag, _ in lineage) <= 1


def test_overlap_settings_take_effect_or_are_refused():
    config = load_config(LoopConfig, CONFIGS / "quickstart.yaml")
    data = config.model_dump(mode="json")
    assert data["environment"]["rollouts"]["overlap"] is False  # off by default

    def with_rollouts(base: dict, **changes) -> LoopConfig:
        world = base["environment"]
        return LoopConfig.model_validate(
            {**base, "environment": {**world, "rollouts": {**world["rollouts"], **changes}}}
        )

    with pytest.raises(ValidationError, match="max_policy_lag"):
        with_rollouts(data, overlap=True, max_policy_lag=2)
    control = load_config(LoopConfig, CONFIGS / "quickstart-control.yaml").model_dump(mode="json")
    with pytest.raises(ValidationError, match="a control never samples"):
        with_rollouts(control, overlap=True)
    with pytest.raises(ValidationError, match="environment.proving.rollouts"):  # proving has no sampling settings
        LoopConfig.model_validate({"environment": {"type": "proving", "rollouts": {"overlap": True}}})
    with pytest.raises(ValidationError, match="gpu_memory_share"):
        with_rollouts(data, gpu_memory_share=0.0)
    assert with_rollouts(data, overlap=True).model_dump(mode="json")["environment"]["rollouts"]["overlap"] is True
