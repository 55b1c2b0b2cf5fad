"""What a GPU rollout shard costs besides sampling: scoring, its lake rows, and committing them; one run.

    .venv/bin/python benchmarks/shard_rows.py [--prompts N] [--n 16] [--wrong 3,99]

`aitp.reasoning.rollouts.worker.rollout_shard` runs on the GPU worker after `policy.sample`, before the next
shard can start. Here its policy is a stand-in that returns canned short completions (the shape of
`configs/gpu.yaml`'s answers: a tagged answer, right with probability 0.4, else one of `--wrong` + 1
wrong numbers), so the timing is the shard's scoring and row building alone. Baseline in the same run:
the same groups scored one completion at a time (every sample judged, as before distinct texts were
judged once). `--prompts` defaults to an iteration of the config (one shard on one GPU). Then the
shard's rows are committed as the loop commits a chunk
(`lake_rollout_rows`, the threshold filter, `write_partition`); baseline in the same run: the same rows
with every row's prompt and config its own copy, so each is encoded to JSON again (as before shared
objects were encoded once). Last, the rows' way back from a Dask worker process to the flow: fetched
as the task's result in one object (`ShardRows`) against the plain list (as before), each the least of
three fetches in the same run, and each fetched copy committed. Then what the flow's process itself does
with a chunk, and what that costs a training beside it (`rollouts.overlap` trains in the same process):
the shard fetched as rows then shaped, filtered and committed there (as before), against the shard
shaped, filtered and encoded on the worker and fetched as a table, then committed (`lake_shard_task`, as
the loop now does). A thread issuing small torch operations stands in for the training's kernel launches
(each releases and retakes the interpreter lock, as a CUDA launch does); its rate beside each, against
its rate alone, in the same run.
"""

from __future__ import annotations

import argparse
import copy
import pickle
import random
import tempfile
import threading
import time
from pathlib import Path

import torch
import yaml

import aitp.reasoning.rollouts.worker as worker
from aitp.lake import write_partition
from aitp.policies.base import Completion, SamplingParams
from aitp.reasoning.filtering import filter_rows
from aitp.reasoning.groups import score_group
from aitp.reasoning.items import generate_items
from aitp.reasoning.scoring import score_completion, verifier_entry

CONFIG = Path(__file__).resolve().parent.parent / "configs" / "gpu.yaml"


class CannedPolicy:
    """Short tagged answers for the items in order: a stand-in for the sampler, so only the rest is timed."""

    version = "canned"

    def __init__(self, items, wrong: int, seed: int = 0) -> None:
        self.items, self.wrong, self.rng = items, wrong, random.Random(seed)

    def sample(self, prompts, params, seeds):
        return [[self._one(item) for _ in range(params.n)] for item in self.items[: len(prompts)]]

    def _one(self, item) -> Completion:
        answer = item.answer if self.rng.random() < 0.4 else str(self.rng.randint(0, self.wrong))
        return Completion(f"<answer>{answer}</answer>", [0] * 9, [-0.1] * 9, "stop", 44, 9)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, help="items in the shard, split over the tasks (default: an iteration)")
    parser.add_argument("--n", type=int, default=16, help="samples per item")
    parser.add_argument("--wrong", default="3,99", help="comma-separated: largest wrong number a sample may give")
    args = parser.parse_args()
    config = yaml.safe_load(CONFIG.read_text())["environment"]
    per_task = args.prompts // len(config["tasks"]) if args.prompts else config["rollouts"]["items_per_task"]
    items = []
    for task in config["tasks"]:
        items += generate_items(task["name"], per_task, 1, "train", task_config=task.get("config") or {})
    limit, threshold = config["rollouts"]["max_tokens"], config["rollouts"]["threshold"]
    params = SamplingParams(n=args.n, temperature=1.0, max_tokens=limit)
    ctx = worker.RolloutContext("bench", 1, 0, params, limit, None, config.get("system_prompt"))
    print(f"{len(items)} items x {args.n} samples, tasks {', '.join(t['name'] for t in config['tasks'])}\n")
    print(
        "| wrong answers | rows | distinct texts per group | shard (score + rows) s | groups scored s "
        "| every sample judged s | ratio |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for item in items:  # untimed: the verifiers' datasets are built and cached on first use
        score_group(item, ["<answer>0</answer>"], limit, len, [9])
    for wrong in [int(w) for w in args.wrong.split(",")]:
        policy = CannedPolicy(items, wrong)
        groups = CannedPolicy(items, wrong).sample(items, params, None)
        worker.load_cached_policy = lambda spec, device=None, policy=policy: policy
        start = time.perf_counter()
        rows = worker.rollout_shard([i.to_dict() for i in items], "canned", ctx)
        shard = time.perf_counter() - start
        start = time.perf_counter()
        for item, group in zip(items, groups):
            verifier = verifier_entry(item)
            [score_completion(item, c.text, verifier) for c in group]
        every = time.perf_counter() - start
        start = time.perf_counter()
        for item, group in zip(items, groups):
            score_group(item, [c.text for c in group], limit, len, [c.completion_tokens for c in group])
        grouped = time.perf_counter() - start
        distinct = sum(len({c.text for c in g}) for g in groups) / len(groups)
        print(
            f"| {wrong} | {len(rows):,} | {distinct:.1f} | {shard:.2f} | {grouped:.2f} | {every:.2f} "
            f"| {every / grouped:.2f}x |"
        )
    commit_table(rows, threshold)
    fetch_table(rows, threshold)
    flow_share(rows, threshold)


def commit_seconds(rows: list[dict], threshold: float, home: str, shard: str) -> float:
    """Seconds to turn worker rows into the lake's rows, filter them and commit them as one chunk."""
    start = time.perf_counter()
    write_partition(home, "rollouts", "bench", 1, filter_rows(worker.lake_rollout_rows(rows), threshold), shard=shard)
    return time.perf_counter() - start


def commit_table(rows: list[dict], threshold: float) -> None:
    """Commit a shard's rows as they come, and with every row's objects copied."""
    copied = [{**row, "prompt": copy.deepcopy(row["prompt"]), "config": copy.deepcopy(row["config"])} for row in rows]
    with tempfile.TemporaryDirectory() as home:
        commit_seconds(rows, threshold, home, "warm-up")
        shared = own = float("inf")
        for k in range(3):  # alternating; the least disturbed of three commits each
            shared = min(shared, commit_seconds(rows, threshold, home, f"shared-{k}"))
            own = min(own, commit_seconds(copied, threshold, home, f"copied-{k}"))
    print("\n| rows committed | shared prompt objects s | every row its own copy s | ratio |\n|---:|---:|---:|---:|")
    print(f"| {len(rows):,} | {shared:.2f} | {own:.2f} | {own / shared:.2f}x |")


def _rows_on_worker(blob: bytes, boxed: bool):
    """The rows as a task's result on the worker: in one object, or the plain list."""
    rows = pickle.loads(blob)
    return worker.ShardRows(rows) if boxed else rows


def fetch_table(rows: list[dict], threshold: float) -> None:
    """Seconds to fetch the rows from a worker process, in one object and as a plain list; each copy committed."""
    from distributed import Client, wait

    from aitp.fanout.cluster import local_cluster

    blob = pickle.dumps(rows, protocol=5)
    best = {True: float("inf"), False: float("inf")}
    fetched = {}
    with local_cluster(workers=1) as cluster, Client(cluster) as client:
        for _ in range(3):
            for boxed in (True, False):
                future = client.submit(_rows_on_worker, blob, boxed, pure=False)
                wait(future)
                start = time.perf_counter()
                result = future.result()
                best[boxed] = min(best[boxed], time.perf_counter() - start)
                fetched[boxed] = result.rows if boxed else result
                del future
    with tempfile.TemporaryDirectory() as home:
        commit_seconds(rows, threshold, home, "warm-up")
        commits = {boxed: commit_seconds(fetched[boxed], threshold, home, f"fetched-{boxed}") for boxed in best}
    print(
        "\n| rows fetched from a worker | one object s | plain list s | ratio | commit after: one object s "
        "| plain list s |\n|---:|---:|---:|---:|---:|---:|"
    )
    print(
        f"| {len(rows):,} | {best[True]:.2f} | {best[False]:.2f} | {best[False] / best[True]:.1f}x "
        f"| {commits[True]:.2f} | {commits[False]:.2f} |"
    )


def _table_on_worker(blob: bytes, threshold: float):
    """The rows as `lake_shard_task` returns them: shaped, filtered and encoded on the worker."""
    return worker.lake_table(pickle.loads(blob), threshold)


class Launcher:
    """A thread issuing small torch operations, as a training step launches kernels; counts them."""

    def __init__(self) -> None:
        self.ops, self.stop = 0, threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        x = torch.zeros(64)
        while not self.stop.is_set():
            for _ in range(100):
                x.add_(1.0)
            self.ops += 100

    def rate(self, seconds: float) -> float:
        """Operations a second over the next `seconds` (of whatever runs meanwhile in this process)."""
        before, start = self.ops, time.perf_counter()
        time.sleep(seconds)
        return (self.ops - before) / (time.perf_counter() - start)

    def rate_during(self, work) -> tuple[float, float]:
        """(operations a second while `work()` runs here, `work`'s wall seconds)."""
        before, start = self.ops, time.perf_counter()
        work()
        seconds = time.perf_counter() - start
        return (self.ops - before) / seconds, seconds


def flow_share(rows: list[dict], threshold: float) -> None:
    """The flow's part of a chunk, rows shaped in the flow against a table shaped on the worker, and what each
    leaves a launching thread beside it."""
    from distributed import Client, wait

    from aitp.fanout.cluster import local_cluster

    torch.set_num_threads(1)
    blob = pickle.dumps(rows, protocol=5)
    results = {"rows": [], "table": []}
    with local_cluster(workers=1) as cluster, Client(cluster) as client, tempfile.TemporaryDirectory() as home:
        launcher = Launcher()
        launcher.thread.start()
        for k in range(3):
            for how in results:
                if how == "rows":
                    future = client.submit(_rows_on_worker, blob, True, pure=False)

                    def work(future=future, k=k) -> None:
                        got = worker.lake_rollout_rows(future.result().rows)
                        write_partition(home, "rollouts", "bench", 1, filter_rows(got, threshold), shard=f"r{k}")
                else:
                    future = client.submit(_table_on_worker, blob, threshold, pure=False)

                    def work(future=future, k=k) -> None:
                        write_partition(home, "rollouts", "bench", 1, future.result(), shard=f"t{k}")

                wait(future)
                alone = launcher.rate(1.0)  # just before: the cores as busy as they will be, but for the work
                rate, seconds = launcher.rate_during(work)
                results[how].append((rate / alone, seconds))
                del future
        launcher.stop.set()
    print(
        f"\n| the flow's part of a chunk of {len(rows):,} rows | flow s (least of 3) | launching thread's rate "
        "beside it, share of its rate alone just before (median of 3) |\n|---|---:|---:|"
    )
    for how, label in (("rows", "rows fetched, shaped, filtered, committed"), ("table", "table fetched, committed")):
        seconds = min(s for _, s in results[how])
        share = sorted(r for r, _ in results[how])[1]
        print(f"| {label} | {seconds:.2f} | {share:.2f} |")


if __name__ == "__main__":
    main()
