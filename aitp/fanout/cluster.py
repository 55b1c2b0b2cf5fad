"""The Dask cluster rollouts run on: a local one sized to the machine, or an existing scheduler.

Local CPU workers are processes with one thread each (the nanny sets OMP_NUM_THREADS=1, so two
workers do not fight over the cores). Local GPU workers are one per visible GPU (or per card of
`fanout.gpus`), each pinned to its card with CUDA_VISIBLE_DEVICES and declaring the Dask resource
`GPU=1`, which rollout tasks ask for when the policy runs on CUDA. Workers of an existing cluster
declare it themselves (`dask worker ADDR --nthreads 1 --resources GPU=1`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager

from aitp.errors import AitpError

GPU = "GPU"
CONNECT_TIMEOUT_S = 10.0
WORKERS_TIMEOUT_S = 60.0


class NoGpuWorkersError(AitpError):
    """The policy is to run on CUDA but no worker declares a GPU."""


class SchedulerUnreachableError(AitpError):
    """No Dask scheduler answers at the given address, or it has no workers."""


class NoCudaError(AitpError):
    """The config runs on CUDA but this machine shows no CUDA device."""


def machine_workers() -> int:
    """How many single-threaded CPU workers this machine holds: one per core."""
    return max(1, os.cpu_count() or 1)


def visible_gpus() -> int:
    """CUDA devices this process sees (0 without torch or CUDA)."""
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def wants_cuda(device: str | None) -> bool:
    """Whether a config's device names CUDA (`cuda`, `cuda:1`)."""
    return device is not None and device.startswith("cuda")


def check_device(device: str | None) -> int:
    """The GPUs visible here; refuses a CUDA device where none is visible, before anything starts."""
    n = visible_gpus()
    if wants_cuda(device) and n == 0:
        raise NoCudaError(
            f"the config runs on device {device} but this machine shows no CUDA device "
            f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}): run it on a GPU machine "
            "or pass --set device=cpu"
        )
    return n


class NoSuchCardError(AitpError):
    """`fanout.gpus` names a card this machine does not show."""


def worker_cards(gpus: list[int] | None, visible: int) -> list[int]:
    """The cards (indices among the visible ones) that get a GPU worker: `gpus`, or every visible card for None.

    Refuses a card past the visible ones before any worker starts, rather than leaving a worker whose card
    does not exist to fail at its first rollout.
    """
    if gpus is None:
        return list(range(visible))
    missing = [card for card in gpus if card >= visible]
    if missing:
        raise NoSuchCardError(
            f"fanout.gpus names card {missing[0]} but this machine shows {visible} GPU(s) (numbered from 0): "
            "name visible cards only, or remove fanout.gpus"
        )
    return list(gpus)


def loop_cluster(
    device: str | None,
    workers: int | None = None,
    memory_limit: str | float | None = "auto",
    gpus: list[int] | None = None,
):
    """The loop's local cluster: a worker per GPU card where the config may run on CUDA, beside CPU workers.

    `device` cpu gives CPU workers only; cuda (or None, meaning cuda where present) adds a worker for each
    card of `gpus` (None: every visible card). `workers` counts the CPU workers (None: one per core left over
    by the GPU workers).
    """
    visible = 0 if device == "cpu" else check_device(device)
    cards = worker_cards(gpus, visible)
    if not cards:
        return local_cluster(workers, 0, memory_limit)
    cpus = workers or max(1, machine_workers() - len(cards))
    return local_cluster(gpus=cards, cpu_workers=cpus, memory_limit=memory_limit)


EXPANDABLE_SEGMENTS = "expandable_segments:True"
"""PyTorch's CUDA allocator setting (in `PYTORCH_CUDA_ALLOC_CONF`) that lets a GPU worker's released engine go back."""


def gpu_allocator_settings(current: str) -> str:
    """PyTorch's CUDA allocator settings for a GPU worker: `current` with expandable segments on, unless it sets them.

    A GPU worker releases its decoder engine before the loop trains on the same card. With the
    allocator's default fixed-size segments, a segment goes back to the driver only when wholly free, so
    a few small live tensors inside an engine's freed segments keep them all (which tensors was not
    traced): a gpu.yaml worker kept most of the card reserved after every release, little of it in live
    tensors (`benchmarks/results/history-rollouts-in-loop.md`). Expandable segments hand back every free
    page (CUDA graphs' private pools keep their own segments).
    """
    if "expandable_segments" in current:
        return current
    return ",".join(part for part in (current, EXPANDABLE_SEGMENTS) if part)


def _worker_spec(resources: dict[str, int] | None, env: dict[str, str], memory_limit) -> dict:
    from distributed import Nanny

    options = {"nthreads": 1, "env": env, "memory_limit": memory_limit, "silence_logs": logging.ERROR}
    if resources:
        options["resources"] = resources
    return {"cls": Nanny, "options": options}


def local_cluster(
    workers: int | None = None,
    gpus: int | list[int] = 0,
    memory_limit: str | float | None = "auto",
    cpu_workers: int = 0,
):
    """A local cluster of worker processes: `workers` CPU workers, or a worker per GPU card plus `cpu_workers`.

    `gpus` is a count (the first cards, at most `workers` of them) or the cards themselves, by index among this
    process's visible ones.
    """
    from distributed import LocalCluster, Scheduler, SpecCluster

    quiet = {"silence_logs": logging.ERROR}
    cards = list(range(min(workers or gpus, gpus))) if isinstance(gpus, int) else list(gpus)
    if not cards:
        n = workers or machine_workers()
        return LocalCluster(
            n_workers=n,
            threads_per_worker=1,
            processes=True,
            dashboard_address=":0",  # a free port: no clash with another cluster
            memory_limit=memory_limit,
            **quiet,
        )
    # Card i of this process is the i-th entry of its own CUDA_VISIBLE_DEVICES, when that is set.
    visible = [d.strip() for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    ids = visible if len(visible) > max(cards) else [str(i) for i in range(max(cards) + 1)]
    allocator = {"PYTORCH_CUDA_ALLOC_CONF": gpu_allocator_settings(os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""))}
    specs = {
        f"gpu-{card}": _worker_spec({GPU: 1}, {"CUDA_VISIBLE_DEVICES": ids[card], **allocator}, memory_limit)
        for card in cards
    }
    # CPU workers see no GPU: a task without the GPU resource never lands a model on a card by accident.
    specs |= {f"cpu-{i}": _worker_spec(None, {"CUDA_VISIBLE_DEVICES": ""}, memory_limit) for i in range(cpu_workers)}
    scheduler = {"cls": Scheduler, "options": {"dashboard_address": ":0"}}
    return SpecCluster(workers=specs, scheduler=scheduler, **quiet)


def connect(address: str, timeout_s: float = CONNECT_TIMEOUT_S):
    """A client of the scheduler at `address`, or a one-line error saying how to start one."""
    from distributed import Client

    try:
        return Client(address, timeout=timeout_s, set_as_default=False)
    except (OSError, TimeoutError, ValueError) as exc:
        raise SchedulerUnreachableError(
            f"no Dask scheduler answers at {address} within {timeout_s:g}s ({type(exc).__name__}): start one with "
            "`dask scheduler` and pass its tcp://HOST:PORT, or drop --dask-address to use a local cluster"
        ) from exc


def wait_for_workers(client, timeout_s: float = WORKERS_TIMEOUT_S) -> int:
    """Wait until the scheduler has at least one worker; return how many it has."""
    try:
        client.wait_for_workers(1, timeout=timeout_s)
    except (TimeoutError, OSError) as exc:
        raise SchedulerUnreachableError(
            f"the Dask scheduler at {client.scheduler.address} has no workers after {timeout_s:g}s: "
            f"start some with `dask worker {client.scheduler.address} --nthreads 1`"
        ) from exc
    return len(client.scheduler_info(n_workers=-1)["workers"])


def gpu_worker_addresses(client) -> list[str]:
    """The addresses of the cluster's workers that declare a GPU resource."""
    workers = client.scheduler_info(n_workers=-1)["workers"]
    return [addr for addr, w in workers.items() if (w.get("resources") or {}).get(GPU, 0) > 0]


def gpu_workers(client) -> int:
    """How many of the cluster's workers declare a GPU resource."""
    return len(gpu_worker_addresses(client))


@contextmanager
def dask_client(
    address: str | None = None,
    workers: int | None = None,
    gpus: int | list[int] | None = None,
    timeout_s: float = CONNECT_TIMEOUT_S,
) -> Iterator[object]:
    """A Dask client for the scheduler at `address`, else for a local cluster closed on exit.

    `gpus=None` gives a local GPU worker per visible card; `gpus=0` forces CPU workers; a list of cards gives
    workers on those (`fanout.gpus`).
    """
    from distributed import Client

    if address:
        client = connect(address, timeout_s)
        try:
            wait_for_workers(client, max(timeout_s, WORKERS_TIMEOUT_S))
            yield client
        finally:
            client.close()
        return
    if isinstance(gpus, list):
        cards: int | list[int] = worker_cards(gpus, visible_gpus())
    else:
        cards = visible_gpus() if gpus is None else gpus
    with local_cluster(workers, cards) as cluster, Client(cluster, set_as_default=False) as client:
        yield client
