"""The loop engine without Prefect: one iteration in-process, a refused unused value, the environment seam."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from aitp.configs import ConfigError, load_config
from aitp.lake import connect, read_iteration
from aitp.loop import Environment, LoopConfig, LoopRun, open_experiment, run_iteration
from aitp.reasoning.environment import ReasoningEnvironment
from tests.loop.helpers import MINI, write_config


def test_a_yaml_value_the_loop_would_overwrite_is_refused(tmp_path):
    for stage, key, value in (("self_train", "threshold", 0.5), ("warm_start", "seed", 7)):
        data = copy.deepcopy(MINI)
        data["environment"][stage][key] = value
        path = tmp_path / f"{stage}-{key}.yaml"
        write_config(path, environment=data["environment"])
        with pytest.raises(ConfigError, match=rf"{stage}\.{key}.*is set by the loop") as err:
            load_config(LoopConfig, path)
        assert "\n" not in str(err.value)
    recorded = LoopConfig.model_validate(MINI).model_dump(mode="json")
    reloaded = LoopConfig.model_validate(recorded)  # a recorded config reloads
    assert reloaded.environment.train_config(1, reloaded.seed).threshold == -1


def test_the_loop_threshold_reaches_training_and_the_group_filter():
    config = LoopConfig.model_validate(MINI)
    world = config.environment
    assert world.train_config(1, config.seed).threshold == world.rollouts.threshold == -1
    assert world.rollouts.sampling().n == world.rollouts.group_size


def test_unknown_tasks_and_bad_task_configs_are_refused_at_validation():
    for task, why in (({"name": "no_such_task"}, "unknown task"), ({"name": "gcd", "config": {"bogus": 1}}, "bogus")):
        data = copy.deepcopy(MINI)
        data["environment"]["tasks"] = [task]
        with pytest.raises(ValueError, match=why):
            LoopConfig.model_validate(data)


def test_workers_with_a_scheduler_address_is_refused():
    data = copy.deepcopy(MINI)
    data["fanout"] = {**data["fanout"], "dask_address": "tcp://127.0.0.1:8786"}
    with pytest.raises(ValueError, match="fanout.workers"):
        LoopConfig.model_validate(data)


def test_the_reasoning_environment_implements_the_protocol():
    env = LoopConfig.model_validate(MINI).build_environment(Path("."))
    for name in Environment.__annotations__:
        assert hasattr(env, name), name
    for name in ("acts", "commits_items", "items", "item_rows", "act", "prepare", "release", "summarize", "train"):
        assert callable(getattr(env, name)), name
    assert not env.acts(0) and env.acts(1) and env.commits_items(0)


def test_readying_the_gpu_workers_first_releases_this_process_decoder_engines(monkeypatch):
    # No GPU here: the cluster's answer and the two calls are recorded; the real path is a GPU test.
    env, order = LoopConfig.model_validate(MINI).build_environment(Path(".")), []
    monkeypatch.setattr("aitp.fanout.cluster.gpu_workers", lambda client: 1)
    monkeypatch.setattr("aitp.policies.fast.resident.release_engines", lambda: order.append("release"))
    monkeypatch.setattr("aitp.reasoning.rollouts.run.prepare_gpu_workers", lambda *args: order.append("prepare"))
    env.prepare(0, "tiny", object())  # iteration 0 does not act: nothing to ready, nothing released
    env.prepare(1, "tiny", None)  # no cluster
    assert order == []
    env.prepare(1, "tiny", object())
    assert order == ["release", "prepare"]  # the worker sizes its slots once the flow's engine is gone


def test_the_gpu_workers_release_their_decoders_before_an_iteration_that_acted_trains(monkeypatch):
    # No GPU here: the cluster's answer and the call are recorded; the release itself is tested on a real
    # Dask worker in tests/rollouts/test_worker.py.
    env, sent = LoopConfig.model_validate(MINI).build_environment(Path(".")), []
    monkeypatch.setattr("aitp.fanout.cluster.gpu_workers", lambda client: 1)
    report = {"engines": 1.0, "freed_gib": 8.5, "allocated_gib": 44.02, "reserved_gib": 44.1}
    monkeypatch.setattr(
        "aitp.reasoning.rollouts.run.release_gpu_workers", lambda client: sent.append(client) or [report]
    )
    # Iteration 0 does not act: its worker's warm-up overlaps the first training.
    assert env.release(0, object()) is None
    assert env.release(1, None) is None  # no cluster
    assert sent == []
    client = object()
    line = env.release(1, client)
    assert sent == [client]
    assert line == (
        "released 1 decoder engine(s) on 1 GPU worker(s): 8.5 GiB back; still held: 44.0 GiB in tensors, "
        "44.1 GiB reserved"
    )
    monkeypatch.setattr("aitp.fanout.cluster.gpu_workers", lambda client: 0)
    assert env.release(2, client) is None  # no GPU worker: nothing to release
    assert sent == [client]


def test_a_release_on_cpu_workers_says_what_went_without_memory_figures():
    from aitp.reasoning.rollouts.run import describe_release

    assert describe_release([{"engines": 0.0}, {"engines": 2.0}]) == "released 2 decoder engine(s) on 2 GPU worker(s)"
    assert describe_release([]) == "released 0 decoder engine(s) on 0 GPU worker(s)"


def test_a_release_that_leaves_free_memory_reserved_names_the_allocator_setting():
    from aitp.reasoning.rollouts.run import describe_release

    def report(allocated: float, reserved: float) -> dict[str, float]:
        return {"engines": 1.0, "freed_gib": 8.3, "allocated_gib": allocated, "reserved_gib": reserved}

    # The figures of a gpu.yaml worker on one H100 with the allocator's default segments, then with expandable ones.
    pinned = describe_release([report(1.0, 43.3)])
    assert pinned.startswith("released 1 decoder engine(s) on 1 GPU worker(s): 8.3 GiB back; still held: 1.0 GiB")
    assert "42.3 GiB free but kept from the card" in pinned and "expandable_segments:True" in pinned
    assert "expandable" not in describe_release([report(1.0, 1.1)])


def test_one_iteration_runs_in_process_without_prefect(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    config = LoopConfig.model_validate(MINI)
    run = open_experiment(tmp_path, config)
    assert isinstance(run, LoopRun)
    events, order = [], []
    # A hint recorded, not run: readying GPU workers is a GPU test (tests/rollouts/test_gpu.py).
    monkeypatch.setattr(ReasoningEnvironment, "prepare", lambda env, k, policy, client: order.append(("prepare", k)))
    line = "released 1 decoder engine(s) on 1 GPU worker(s)"
    monkeypatch.setattr(ReasoningEnvironment, "release", lambda env, k, client: order.append(("release", k)) or line)

    def listen(kind, payload):
        events.append(kind)
        if kind == "released":
            order.append(("released", payload["text"]))
        if kind == "stage":
            order.append((payload["stage"], payload["state"]))

    row = run_iteration(run, 0, on_event=listen)
    assert row["status"] == "done" and row["promoted"] and row["champion_version"] == "1"
    # The next iteration's acting is readied once this model is judged: the GPU as the next shard finds it.
    assert order[-2:] == [("promote", "done"), ("prepare", 1)] and order.count(("prepare", 1)) == 1
    before_training = order[: order.index(("train", "start"))]
    assert before_training[-2:] == [("release", 0), ("released", line)]  # the workers' decoders go before training
    assert read_iteration(tmp_path, "mini", 0)["model_out"] == row["model_out"]
    assert {"stage", "iteration"} <= set(events)
    con = connect(tmp_path)
    try:
        assert con.execute("SELECT count(*) FROM items WHERE split = 'train'").fetchone()[0] == 12
    finally:
        con.close()
    again = run_iteration(run, 0)  # done: reused, nothing new written
    assert again["model_out"] == row["model_out"]
