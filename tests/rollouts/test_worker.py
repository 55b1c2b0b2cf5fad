"""The per-worker policy cache and the shard function, outside and inside Dask."""

from __future__ import annotations

import pytest

from aitp.policies.base import SamplingParams
from aitp.reasoning.items import generate_items
from aitp.reasoning.rollouts import worker
from aitp.reasoning.rollouts.run import prepare_gpu_workers, warm_gpu_workers
from aitp.reasoning.rollouts.worker import (
    PolicyPlugin,
    RolloutContext,
    load_cached_policy,
    prepare_decoder,
    rollout_shard,
    warm_decoder,
)
from tests.rollouts.helpers import make_tiny_checkpoint


@pytest.fixture(autouse=True)
def empty_cache():
    worker._POLICIES.clear()
    yield
    worker._POLICIES.clear()


def test_policy_loads_once_and_reloads_when_the_checkpoint_is_replaced(tmp_path):
    path = make_tiny_checkpoint(tmp_path / "ckpt", seed=0)
    first = load_cached_policy(str(path), "cpu")
    assert load_cached_policy(str(path), "cpu") is first
    make_tiny_checkpoint(tmp_path / "ckpt", seed=1)  # retrained, renamed into the same place
    second = load_cached_policy(str(path), "cpu")
    assert second is not first and second.version != first.version


def test_cache_keeps_only_the_most_recent_policies(tmp_path):
    paths = [str(make_tiny_checkpoint(tmp_path / f"c{i}", seed=i)) for i in range(3)]
    policies = [load_cached_policy(p, "cpu") for p in paths]
    assert len(worker._POLICIES) == worker.MAX_CACHED_POLICIES
    assert load_cached_policy(paths[2], "cpu") is policies[2]
    assert load_cached_policy(paths[0], "cpu") is not policies[0]  # evicted, loaded again


def test_shard_outside_dask_names_host_and_pid(tmp_path):
    path = str(make_tiny_checkpoint(tmp_path / "ckpt"))
    items = generate_items("basic_arithmetic", 2, seed=0)
    ctx = RolloutContext("e", 0, 0, SamplingParams(n=2, max_tokens=8), 8, "cpu")
    rows = rollout_shard([i.to_dict() for i in items], path, ctx)
    assert len(rows) == 4 and ":" in rows[0]["worker"]
    assert rollout_shard([i.to_dict() for i in items], path, ctx)[0]["completion"] == rows[0]["completion"]


def test_worker_plugin_warms_the_cache(tmp_path):
    from distributed import Client, LocalCluster

    path = str(make_tiny_checkpoint(tmp_path / "ckpt"))
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as cluster:
        with Client(cluster, set_as_default=False) as client:
            client.register_plugin(PolicyPlugin(path, "cpu"))
            assert worker.spec_key(path, "cpu") in worker._POLICIES


def test_a_gpu_policy_stops_its_worker_s_statistical_profiler_and_a_cpu_policy_does_not(tmp_path, monkeypatch):
    from distributed import Client, LocalCluster

    def profiling():
        pcs = worker.get_worker().periodic_callbacks
        return [pcs[name].is_running() for name in ("profile", "profile-cycle")]

    assert not worker.stop_worker_profiler()  # outside a Dask worker: nothing to stop
    path = str(make_tiny_checkpoint(tmp_path / "ckpt"))
    # No GPU here: the policy is loaded on CPU under a CUDA key, the worker and its profiler are real.
    monkeypatch.setattr("aitp.policies.loading.load_policy", lambda spec, device: object())
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as cluster:
        with Client(cluster, set_as_default=False) as client:
            assert client.submit(profiling, pure=False).result() == [True, True]
            client.submit(worker.load_cached_policy, path, "cpu", pure=False).result()
            assert client.submit(profiling, pure=False).result() == [True, True]
            client.submit(worker.load_cached_policy, path, "cuda", pure=False).result()
            assert client.submit(profiling, pure=False).result() == [False, False]  # stopped on its own loop
    worker._POLICIES.pop(worker.spec_key(path, "cuda"))


def test_warming_loads_the_policy_and_samples_with_the_rollout_settings(tmp_path):
    path = str(make_tiny_checkpoint(tmp_path / "ckpt"))
    import gc

    try:
        seconds = warm_decoder(path, "cpu", SamplingParams(n=2, max_tokens=4), "Be brief.")
        frozen = gc.get_freeze_count()
    finally:
        gc.unfreeze()
    assert seconds > 0 and worker.spec_key(path, "cpu") in worker._POLICIES
    assert frozen > 0  # the worker's long-lived objects are out of the collector's walks


def test_no_warming_is_sent_for_a_cpu_policy(tmp_path):
    path = str(make_tiny_checkpoint(tmp_path / "ckpt"))
    assert warm_gpu_workers(object(), path, SamplingParams(), "cpu") == []  # the client is never asked


def test_no_preparing_is_sent_for_a_cpu_or_remote_policy(tmp_path):
    path = str(make_tiny_checkpoint(tmp_path / "ckpt"))
    items = generate_items("basic_arithmetic", 4, seed=0)
    assert prepare_gpu_workers(object(), items, path, SamplingParams(), "cpu") == []  # the client is never asked
    assert prepare_gpu_workers(object(), items, "openai:http://127.0.0.1:9/v1", SamplingParams(), "cuda") == []


def test_a_policy_sampled_on_cpu_has_nothing_to_prepare(tmp_path):
    path = str(make_tiny_checkpoint(tmp_path / "ckpt"))
    chats = [[{"role": "user", "content": "What is 2 + 2?"}]]
    assert prepare_decoder(path, "cpu", SamplingParams(n=2, max_tokens=4), chats, 2) is None
    assert worker.spec_key(path, "cpu") in worker._POLICIES  # loaded all the same, for the shards to come


def test_dask_weighs_a_shard_by_its_rows():
    from dask.sizeof import sizeof

    from aitp.reasoning.rollouts.worker import ShardRows

    rows = [{"completion": "x" * 100, "sample_index": i} for i in range(1000)]
    assert sizeof(ShardRows(rows)) == sizeof(rows) > 100_000  # the worker's memory accounting sees the rows


def test_releasing_the_gpu_workers_drops_their_decoder_engines_and_waits_for_it():
    # No GPU here: the worker declares one and holds a real decoder engine on CPU; Dask is real.
    pytest.importorskip("transformers")
    import torch
    from distributed import Client, LocalCluster

    from aitp.policies.fast import resident
    from aitp.reasoning.rollouts.run import release_gpu_workers
    from tests.policies.test_decoder import tiny_llama

    model = tiny_llama()
    resident._RESIDENT.clear()
    with torch.inference_mode():
        resident.prepare_resident(model, None, [[1, 2, 3]], SamplingParams(n=2, max_tokens=4), 2, eos_ids={0})
    assert len(resident.resident_engines()) == 1
    with LocalCluster(
        n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None, resources={"GPU": 1}
    ) as cluster:
        with Client(cluster, set_as_default=False) as client:
            assert release_gpu_workers(client) == [{"engines": 1.0}]  # in-process worker: the engine built above
            assert resident.resident_engines() == []
            assert release_gpu_workers(client) == [{"engines": 0.0}]
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as cluster:
        with Client(cluster, set_as_default=False) as client:
            assert release_gpu_workers(client) == []  # no worker declares a GPU: nothing is sent
    resident._RESIDENT.clear()
