"""The loop's local cluster: CPU workers always, one GPU worker per visible GPU where the config runs on CUDA."""

from __future__ import annotations

import pytest
from distributed import Client

from aitp.fanout.cluster import (
    NoCudaError,
    NoSuchCardError,
    check_device,
    gpu_allocator_settings,
    gpu_workers,
    local_cluster,
    loop_cluster,
    visible_gpus,
    worker_cards,
)

no_cuda = pytest.mark.skipif(visible_gpus() > 0, reason="checks a machine without CUDA")


@no_cuda
def test_cuda_config_is_refused_without_cuda():
    with pytest.raises(NoCudaError, match="no CUDA device"):
        check_device("cuda")
    with pytest.raises(NoCudaError):
        loop_cluster("cuda:0", workers=1)
    assert check_device("cpu") == 0 and check_device(None) == 0


@no_cuda
@pytest.mark.parametrize("device", [None])  # None: cuda where present; cpu skips the check
def test_cpu_or_unset_device_gives_cpu_workers_only(device):
    with loop_cluster(device, workers=2) as cluster, Client(cluster, set_as_default=False) as client:
        client.wait_for_workers(2, timeout=60)
        assert len(client.scheduler_info(n_workers=-1)["workers"]) == 2
        assert gpu_workers(client) == 0


@pytest.mark.gpu
@pytest.mark.skipif(visible_gpus() == 0, reason="needs a CUDA device")
def test_cuda_config_starts_one_gpu_worker_per_card_beside_cpu_workers():
    n = visible_gpus()
    with loop_cluster("cuda", workers=2) as cluster, Client(cluster, set_as_default=False) as client:
        client.wait_for_workers(n + 2, timeout=120)
        assert gpu_workers(client) == n
        names = sorted(w["name"] for w in client.scheduler_info(n_workers=-1)["workers"].values())
        assert names == sorted([f"gpu-{i}" for i in range(n)] + ["cpu-0", "cpu-1"])
        cards = client.run(lambda: __import__("os").environ.get("CUDA_VISIBLE_DEVICES"))
        assert sorted(cards.values()) == sorted(["", ""] + [str(i) for i in range(n)])


def test_gpu_workers_run_with_expandable_segments_and_cpu_workers_without(monkeypatch):
    # A real local cluster; its GPU worker needs no card to start (it only declares the GPU resource).
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "garbage_collection_threshold:0.9")
    with local_cluster(gpus=1, cpu_workers=1) as cluster, Client(cluster, set_as_default=False) as client:
        client.wait_for_workers(2, timeout=60)
        settings = client.run(lambda: __import__("os").environ.get("PYTORCH_CUDA_ALLOC_CONF"))
        names = {addr: w["name"] for addr, w in client.scheduler_info(n_workers=-1)["workers"].items()}
    by_name = {names[addr]: value for addr, value in settings.items()}
    assert by_name["gpu-0"] == "garbage_collection_threshold:0.9,expandable_segments:True"
    assert by_name["cpu-0"] == "garbage_collection_threshold:0.9"  # inherited, untouched


def test_a_users_own_expandable_segments_setting_is_kept():
    assert gpu_allocator_settings("") == "expandable_segments:True"
    assert gpu_allocator_settings("expandable_segments:False") == "expandable_segments:False"
    assert gpu_allocator_settings("max_split_size_mb:512") == "max_split_size_mb:512,expandable_segments:True"


def test_fanout_gpus_picks_the_cards_that_get_workers_and_refuses_others():
    assert worker_cards(None, 2) == [0, 1] and worker_cards(None, 0) == []
    assert worker_cards([1], 2) == [1]
    with pytest.raises(NoSuchCardError, match="names card 1 but this machine shows 1 GPU"):
        worker_cards([0, 1], 1)
    with pytest.raises(NoSuchCardError, match="shows 0 GPU"):
        worker_cards([0], 0)  # device unset on a machine without CUDA: the setting would do nothing


@no_cuda
def test_fanout_gpus_on_a_machine_without_cuda_is_refused_before_any_worker_starts():
    with pytest.raises(NoSuchCardError):
        loop_cluster(None, workers=1, gpus=[0])


def test_a_worker_runs_on_each_named_card_and_on_no_other(monkeypatch):
    # A real local cluster; its GPU worker needs no card to start (it only declares the GPU resource).
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5")  # card 1 of this process is the machine's card 5
    with local_cluster(gpus=[1], cpu_workers=1) as cluster, Client(cluster, set_as_default=False) as client:
        client.wait_for_workers(2, timeout=60)
        cards = client.run(lambda: __import__("os").environ.get("CUDA_VISIBLE_DEVICES"))
        names = {addr: w["name"] for addr, w in client.scheduler_info(n_workers=-1)["workers"].items()}
        assert gpu_workers(client) == 1
    assert {names[addr]: value for addr, value in cards.items()} == {"gpu-1": "5", "cpu-0": ""}


def test_fanout_gpus_is_checked_once_in_the_config():
    from pydantic import ValidationError

    from aitp.fanout.config import FanoutConfig
    from aitp.loop.config import LoopConfig

    assert FanoutConfig(gpus=[1]).gpus == [1]
    assert "gpus" not in FanoutConfig().model_dump()  # configs recorded before the setting keep their hash
    for bad, why in (([1, 1], "each card once"), ([-1], "each card once"), ([], "at least 1")):
        with pytest.raises(ValidationError, match=why):
            FanoutConfig(gpus=bad)
    with pytest.raises(ValidationError, match="no effect with fanout.dask_address"):
        FanoutConfig(gpus=[0], dask_address="tcp://127.0.0.1:8786")
    with pytest.raises(ValidationError, match="device is cpu"):
        world = {"type": "reasoning", "tasks": [{"name": "gcd"}]}
        LoopConfig(experiment="x", device="cpu", environment=world, fanout={"gpus": [0]})


@pytest.mark.gpu
@pytest.mark.skipif(visible_gpus() == 0, reason="needs a CUDA device")
def test_fanout_gpus_starts_a_gpu_worker_on_the_named_card_only():
    last = visible_gpus() - 1
    with loop_cluster("cuda", workers=1, gpus=[last]) as cluster, Client(cluster, set_as_default=False) as client:
        client.wait_for_workers(2, timeout=120)
        assert gpu_workers(client) == 1
        names = sorted(w["name"] for w in client.scheduler_info(n_workers=-1)["workers"].values())
    assert names == ["cpu-0", f"gpu-{last}"]
