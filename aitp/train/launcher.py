"""Training as a process group of its own: several GPUs of this machine, or several machines of a Dask cluster.

A fit over more than one process never runs inside the loop's process, a Dask worker or a Prefect task
process: torch's launcher (`torch.distributed.run`, torchrun) starts the ranks, each running
`python -m aitp.train.run --job JOB.json`, and the job file carries the examples, base, config and
output directory. One machine: one launcher, `--standalone`. Several machines (`nodes` > 1): one launcher
agent per machine, each started by a task on a different worker of the loop's Dask cluster (the cluster
the rollouts already run on), the agents finding each other through torch's elastic rendezvous (c10d) on a
TCP store that this process hosts for the job. The job file and the checkpoint go to the home, so with
several machines the home must be on storage every one of them sees (a shared file system).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

from aitp.atomic import staging_dir
from aitp.checkpoints import EXAMPLES_FILE, read_record
from aitp.errors import AitpError
from aitp.train.config import TrainConfig

RANK_MODULE = "aitp.train.run"
RENDEZVOUS_TIMEOUT_S = 900
"""How long the agents wait for one another (a node's Python and CUDA start within this)."""


class LaunchError(AitpError):
    """A launched training process group that failed, or one that cannot be placed."""


@contextmanager
def job_file(
    examples: list[dict[str, Any]], base: dict[str, Any], config: TrainConfig, out: Path, meta: dict[str, Any]
) -> Iterator[Path]:
    """The job every rank reads, written beside the checkpoint's place (on the home) and removed after."""
    work = staging_dir(out, "job")
    work.mkdir(parents=True)
    try:
        with (work / EXAMPLES_FILE).open("w", encoding="utf-8") as fh:
            for ex in examples:
                fh.write(json.dumps(ex, default=str) + "\n")
        job = {
            "examples": str(work / EXAMPLES_FILE),
            "base": base,
            "config": config.model_dump(mode="json"),
            "out": str(out),
            "meta": meta,
        }
        (work / "job.json").write_text(json.dumps(job))
        yield work / "job.json"
    finally:
        shutil.rmtree(work, ignore_errors=True)


def read_job(path: str | Path) -> tuple[list[dict[str, Any]], dict[str, Any], TrainConfig, str, dict[str, Any]]:
    """(examples, base, config, out, meta) of a job file."""
    job = json.loads(Path(path).read_text())
    examples = [json.loads(line) for line in Path(job["examples"]).read_text().splitlines() if line]
    return examples, job["base"], TrainConfig.model_validate(job["config"]), job["out"], job["meta"]


def launch_here(job: Path, devices: int) -> None:
    """Train in a torchrun process group of `devices` ranks on this machine."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={devices}"]
    done = subprocess.run([*command, "-m", RANK_MODULE, "--job", str(job)], env={**os.environ, "PYTHONUNBUFFERED": "1"})
    if done.returncode != 0:
        raise LaunchError(f"the {devices}-GPU training process failed (exit {done.returncode}): see its log above")


def launch_on_nodes(client: Any, job: Path, nodes: int, devices: int | str = "auto") -> list[dict[str, Any]]:
    """Train on `nodes` workers of the Dask cluster, one launcher agent each; what each agent reported.

    Workers declaring the `GPU` resource are preferred, then workers on distinct hosts. Each agent starts
    `devices` ranks ("auto": one per GPU its worker declares; one on a CPU worker). Each agent task holds its
    worker's resources, so no rollout shard runs beside the training there.
    """
    if client is None:
        raise LaunchError(
            f"nodes: {nodes} trains on the workers of the loop's Dask cluster, and this training has none: run it "
            "from `aitp run` (with --dask-address for a cluster) or set nodes: 1"
        )
    placed = _place(client, nodes, devices)
    with rendezvous_store() as endpoint:
        run_id = uuid.uuid4().hex[:12]
        futures = [
            client.submit(
                run_agent, str(job), nodes, devices, endpoint, run_id, workers=[address], resources=held, pure=False
            )
            for address, devices, held in placed
        ]
        reports = client.gather(futures, errors="skip")
        failed = [f for f in futures if f.status != "finished"]
    bad = [r for r in reports if r["exit"] != 0]
    if failed or bad or len(reports) < nodes:
        why = "; ".join(f"{r['host']}: exit {r['exit']}" for r in bad) or f"{len(failed)} agent task(s) lost"
        raise LaunchError(f"the training on {nodes} nodes failed ({why}): see the workers' logs")
    return reports


def _place(client: Any, nodes: int, devices: int | str) -> list[tuple[str, int, dict[str, int] | None]]:
    """(worker address, ranks it starts, resources its task holds) per node: GPU workers if the cluster has any,
    each declaring at least the GPUs asked for; one host each before any host twice."""
    from aitp.fanout.cluster import GPU

    declared = {a: int(w.get("resources", {}).get(GPU, 0)) for a, w in client.scheduler_info()["workers"].items()}
    wanted = None if devices == "auto" else int(devices)
    gpus = {a: n for a, n in declared.items() if n}
    if gpus:
        pool = {a: n for a, n in gpus.items() if wanted is None or n >= wanted}
        kind = f"GPU workers declaring {wanted} or more GPUs" if wanted else "GPU workers"
    else:
        pool = dict.fromkeys(declared, 1) if wanted in (None, 1) else {}
        kind = "workers" if wanted in (None, 1) else f"workers with {wanted} GPUs"
    hosts: set[str] = set()
    first = [a for a in sorted(pool) if not (_host(a) in hosts or hosts.add(_host(a)))]
    ordered = first + [a for a in sorted(pool) if a not in first]
    if len(ordered) < nodes:
        raise LaunchError(
            f"nodes: {nodes} needs {nodes} Dask {kind} to train on and the cluster has {len(ordered)}: "
            "start more workers or lower nodes"
        )
    return [(a, wanted or pool[a], {GPU: wanted or pool[a]} if gpus else None) for a in ordered[:nodes]]


def _host(address: str) -> str:
    return address.split("://")[-1].rsplit(":", 1)[0]


@contextmanager
def rendezvous_store() -> Iterator[str]:
    """A TCP store for the agents' rendezvous, hosted by this process for one job; its `host:port`.

    The agents are told not to host it themselves: none of them is special, and this process (which
    waits for them anyway) may be on a machine that trains nothing.
    """
    from torch.distributed import TCPStore

    wait = timedelta(seconds=RENDEZVOUS_TIMEOUT_S)
    store = TCPStore("0.0.0.0", 0, is_master=True, wait_for_workers=False, timeout=wait)
    try:
        yield f"{_reachable_address()}:{store.port}"
    finally:
        del store


def _reachable_address() -> str:
    """This machine's address as other machines reach it (the interface of its default route), else loopback."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(("10.255.255.255", 1))  # no packet is sent: this only picks the outgoing interface
            return probe.getsockname()[0]
    except OSError:
        return "127.0.0.1"


def run_agent(job: str, nodes: int, devices: int, endpoint: str, run_id: str) -> dict[str, Any]:
    """One launcher agent (run as a Dask task): torchrun over this machine's `devices`, joining the rendezvous.

    The agent is a child process: CUDA and the process group never start inside the Dask worker.
    """
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nnodes={nodes}",
        f"--nproc_per_node={devices}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={endpoint}",
        f"--rdzv-id={run_id}",
        f"--rdzv-conf=is_host=0,join_timeout={RENDEZVOUS_TIMEOUT_S}",
        "-m",
        RANK_MODULE,
        "--job",
        job,
    ]
    done = subprocess.run(command, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    return {"host": socket.gethostname(), "exit": done.returncode, "devices": devices}


def check_written(out: Path, where: str) -> None:
    """Refuse a launched training that wrote no checkpoint."""
    if not read_record(out):
        raise LaunchError(f"the training on {where} wrote no checkpoint at {out}: see its log above")
