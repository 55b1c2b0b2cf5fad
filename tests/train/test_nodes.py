"""Training over several nodes: one torchrun agent per Dask worker, joined by torch's elastic rendezvous.

Run for real on the CPU: a local Dask cluster of two worker processes stands for two machines; each runs a
launcher agent (its own torchrun), the two meet over TCP at the store this process hosts, and their ranks
train with DDP over gloo. The same code path places agents on GPU workers of a cluster.
"""

from __future__ import annotations

import json

import pytest
from distributed import Client

from aitp.checkpoints import RECORD_FILE, verify_checkpoint
from aitp.fanout.cluster import local_cluster
from aitp.train.config import TrainConfig
from aitp.train.launcher import LaunchError
from aitp.train.run import train_on
from tests.train.helpers import SYSTEM, tiny_base


def _examples(n: int = 32) -> list[dict]:
    return [
        {
            "prompt": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"Calculate {i} + 1."}],
            "completion": f"<answer>{i + 1}</answer>",
        }
        for i in range(n)
    ]


@pytest.mark.slow
def test_two_nodes_train_one_checkpoint_and_record_their_world(tmp_path):
    base = tiny_base(tmp_path / "base")
    config = TrainConfig(steps=6, batch_size=4, lr=3e-3, max_len=96, nodes=2, threads=1)
    with local_cluster(2) as cluster, Client(cluster, set_as_default=False) as client:
        out = train_on(_examples(), base, config, tmp_path / "ckpt", {"experiment": "t"}, client)
    assert verify_checkpoint(out) == "tiny"
    record = json.loads((out / RECORD_FILE).read_text())
    assert record["world_size"] == 2 and record["nodes"] == 2 and record["steps"] == 6
    assert record["strategy"].startswith("ddp on 2 nodes x 1xcpu")
    assert record["tokens"] > 0 and len(record["losses"]) == 6
    assert not list(tmp_path.glob(".ckpt*")), "the job's staging files are removed"


def test_more_nodes_than_workers_is_one_line_naming_the_fix(tmp_path):
    base = tiny_base(tmp_path / "base")
    config = TrainConfig(steps=1, batch_size=4, max_len=96, nodes=3)
    with local_cluster(1) as cluster, Client(cluster, set_as_default=False) as client:
        with pytest.raises(LaunchError, match="nodes: 3 needs 3 Dask workers to train on and the cluster has 1"):
            train_on(_examples(4), base, config, tmp_path / "ckpt", {}, client)
    with pytest.raises(LaunchError, match="set nodes: 1"):
        train_on(_examples(4), base, config, tmp_path / "ckpt", {}, None)
    assert not (tmp_path / "ckpt").exists()


def test_nodes_stay_out_of_old_dumps_and_are_refused_below_one():
    assert "nodes" not in TrainConfig().model_dump()
    assert TrainConfig(nodes=2).model_dump()["nodes"] == 2
    with pytest.raises(ValueError, match="nodes"):
        TrainConfig(nodes=0)
