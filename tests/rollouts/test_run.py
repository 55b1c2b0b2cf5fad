"""`run_rollouts` on an in-process Dask cluster: rows carry the lake's fields, groups the `aitp score` fields."""

from __future__ import annotations

from dataclasses import replace

import pytest

from aitp.policies.base import SamplingParams
from aitp.policies.spec import PolicySpec
from aitp.reasoning.groups import score_group
from aitp.reasoning.items import generate_items
from aitp.reasoning.rollouts import group_records, run_rollouts
from aitp.reasoning.rollouts.run import NoGpuWorkersError, PolicyNotFoundError, _placement
from aitp.tokenizer import load_token_counter
from tests.rollouts.helpers import make_tiny_checkpoint

TINY = PolicySpec(backend="tiny")

ROW_FIELDS = {
    "experiment", "iteration", "item_id", "task", "config", "seed", "item_index", "split", "difficulty_level",
    "gold_answer", "group_id", "sample_index", "sample_seed", "prompt", "completion", "extracted_answer",
    "raw_score", "lenient_score", "final_score", "format_error", "prompt_tokens", "completion_tokens",
    "token_logprobs", "finish_reason", "latency_s", "worker", "model_version", "sampler_json", "token_ids",
}  # fmt: skip
SCORE_FIELDS = {"scores", "raw_scores", "lenient_scores", "format_errors", "extracted_answers", "completion_tokens"}


@pytest.fixture(scope="module")
def client():
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as cluster:
        with Client(cluster, set_as_default=False) as c:
            yield c


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    return str(make_tiny_checkpoint(tmp_path_factory.mktemp("ckpt") / "tiny"))


PARAMS = SamplingParams(temperature=1.0, max_tokens=24)


def test_rows_carry_lake_fields_in_item_order(client, policy):
    items = generate_items("basic_arithmetic", 5, seed=1)
    rows = run_rollouts(items, policy, replace(PARAMS, n=3), client, experiment="e", iteration=2, seed=1, shard_size=2)
    assert len(rows) == 15
    assert set(rows[0]) == ROW_FIELDS
    assert [(r["item_id"], r["sample_index"]) for r in rows] == [(i.item_id, k) for i in items for k in range(3)]
    row = rows[0]
    assert (row["experiment"], row["iteration"], row["task"]) == ("e", 2, "basic_arithmetic")
    assert row["gold_answer"] == items[0].answer and row["item_index"] == items[0].index
    assert row["prompt"][-1] == {"role": "user", "content": items[0].question}
    assert len(row["token_logprobs"]) == len(row["token_ids"]) == row["completion_tokens"] <= 24
    assert row["finish_reason"] in ("stop", "length") and row["latency_s"] >= 0
    assert row["sampler_json"] is None  # the built-in tiny policy keeps no timings of its calls
    assert len({r["group_id"] for r in rows}) == 5


def test_groups_match_aitp_score(client, policy):
    items = generate_items("basic_arithmetic", 3, seed=2)
    rows = run_rollouts(items, policy, replace(PARAMS, n=2), client, seed=2)
    groups = group_records(items, rows)
    assert [g["item_id"] for g in groups] == [i.item_id for i in items]
    for item, group in zip(items, groups):
        assert SCORE_FIELDS | {"completions", "question", "answer", "metadata"} <= set(group)
        again = score_group(item, group["completions"], 24, load_token_counter(None), group["completion_tokens"])
        assert group["scores"] == again.scores and group["format_errors"] == again.format_errors


def test_same_seed_same_rows_other_iteration_other_samples(client, policy):
    items = generate_items("basic_arithmetic", 4, seed=4)
    first = run_rollouts(items, policy, replace(PARAMS, n=2), client, seed=4, iteration=0)
    second = run_rollouts(items, policy, replace(PARAMS, n=2), client, seed=4, iteration=0)
    later = run_rollouts(items, policy, replace(PARAMS, n=2), client, seed=4, iteration=1)
    drop = ("latency_s",)
    assert [{k: v for k, v in r.items() if k not in drop} for r in first] == [
        {k: v for k, v in r.items() if k not in drop} for r in second
    ]
    assert [r["completion"] for r in first] != [r["completion"] for r in later]


def test_completions_do_not_depend_on_the_shard_cut(client, policy):
    items = generate_items("basic_arithmetic", 4, seed=5)
    one = run_rollouts(items, policy, replace(PARAMS, n=2), client, seed=5, shard_size=1)
    all_in_one = run_rollouts(items, policy, replace(PARAMS, n=2), client, seed=5, shard_size=4)
    assert [r["completion"] for r in one] == [r["completion"] for r in all_in_one]
    for a, b in zip(one, all_in_one):
        assert a["token_logprobs"] == pytest.approx(b["token_logprobs"], abs=1e-4)


def test_a_shard_crosses_from_a_worker_process_as_one_object(policy):
    # Dask sends a plain list of dicts item by item: every row's prompt then arrived as its own copy
    # (and the lake encoded each one), and an iteration's rows took seconds to fetch.
    from distributed import Client

    from aitp.fanout.cluster import local_cluster

    items = generate_items("basic_arithmetic", 3, seed=1)
    with local_cluster(workers=1) as cluster, Client(cluster, set_as_default=False) as c:
        rows = run_rollouts(items, policy, replace(PARAMS, n=3), c, seed=1)
    assert len(rows) == 9
    assert rows[0]["prompt"] is rows[1]["prompt"] is rows[2]["prompt"]  # a group's rows share one prompt object


def test_no_items_no_cluster():
    assert run_rollouts([], "does-not-matter", replace(PARAMS, n=2), client=None) == []


def test_missing_policy_path_fails_before_submitting(client, tmp_path):
    items = generate_items("basic_arithmetic", 1, seed=0)
    with pytest.raises(PolicyNotFoundError, match="does not exist"):
        run_rollouts(items, str(tmp_path / "nope"), replace(PARAMS, n=2), client)


class _FakeClient:
    def __init__(self, gpu_workers: int) -> None:
        self.workers = {f"w{i}": {"resources": {"GPU": 1} if i < gpu_workers else {}} for i in range(2)}

    def scheduler_info(self, n_workers: int = -1):
        return {"workers": self.workers}


def test_gpu_resources_only_for_local_models_on_cuda():
    assert _placement(TINY, _FakeClient(1), None) == ("cuda", {"GPU": 1})
    assert _placement(TINY, _FakeClient(0), None) == (None, None)
    assert _placement(TINY, _FakeClient(2), "cpu") == ("cpu", None)
    assert _placement(PolicySpec(backend="openai", base_url="http://x/v1"), _FakeClient(2), None) == (None, None)
    with pytest.raises(NoGpuWorkersError, match="resources GPU=1"):
        _placement(TINY, _FakeClient(0), "cuda")


def test_shards_shaped_on_the_workers_are_the_rows_the_flow_would_commit(client, policy):
    """The loop's path (each shard filtered and encoded on its worker) commits what shaping the gathered rows in the
    flow's process gives, in the same order; only the latency a shard measured and the time its table was made differ
    from run to run."""
    import pyarrow as pa

    from aitp.lake.schemas import rows_to_table
    from aitp.reasoning.filtering import filter_rows
    from aitp.reasoning.rollouts.run import fan_out_shards
    from aitp.reasoning.rollouts.worker import lake_rollout_rows, lake_shard_task

    items = generate_items("basic_arithmetic", 7, seed=3)
    options = dict(experiment="e", iteration=1, seed=6, shard_size=3)  # three shards, the last one short
    rows = run_rollouts(items, policy, replace(PARAMS, n=4), client, **options)
    in_flow = rows_to_table("rollouts", filter_rows(lake_rollout_rows(rows), 0.5)).drop_columns(
        ["latency_s", "created_at"]
    )
    tables = fan_out_shards(lake_shard_task, (0.5,), items, policy, replace(PARAMS, n=4), client, **options)
    on_workers = pa.concat_tables(tables).drop_columns(["latency_s", "created_at"])
    assert len(tables) == 3 and on_workers.num_rows == 28
    assert on_workers.equals(in_flow)
    assert set(on_workers.column("keep_reason").to_pylist()) - {None}  # every group was decided
