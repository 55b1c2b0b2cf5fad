"""The loop's local cluster: CPU workers always, one GPU worker per visible GPU where the config runs on CUDA."""

from __future__ import annotations

import pytest
from distributed import Client

from aitp.rollouts.cluster import NoCudaError, check_device, gpu_workers, loop_cluster, visible_gpus

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
