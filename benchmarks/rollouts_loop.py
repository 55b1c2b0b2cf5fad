"""The loop's in-loop rollout rate beside the same `policy.sample` calls replayed outside it, on the same rows.

    python benchmarks/rollouts_loop.py HOME EXPERIMENT ITERATION [--new-tokens 64] [--temperature 1.0]
        [--hold-gib 0] [--torch-threads 0] [--history] [--fresh-policy] [--dask] [--json OUT]

The in-loop rate is what the lake says of an iteration: completion tokens over the shards' wall
seconds (`latency_s` of each group's first sample, summed: the `policy.sample` call of a shard,
prompts tokenised and texts decoded included). The replay loads the checkpoint that sampled those
rows (found under HOME by its `model_version` fingerprint), cuts the iteration's chats
and seeds into the loop's GPU shards and times the same `policy.sample` call on each, in one plain
process after one untimed call (the loop's worker had decoded an earlier iteration): the same model,
prompts, seeds and sampling settings, so the two rates differ only by where the call runs. Each
call's timings follow, the loop's from the lake's `sampler_json` and the replay's from the policy
(`CallStats`: slots, admissions, engine, admitting, waiting on the GPU, completions, tokenising).

Two knobs put the replay in the loop worker's conditions one at a time: `--hold-gib` keeps GPU memory
taken (the flow process trains and evaluates on the same card and keeps what it cached), so the
decoder sizes fewer slots, as the loop's worker does; `--torch-threads 1` gives torch the one CPU
thread a Dask worker has. The line printed says which slots the replay ran with.

`--history` replaces the one untimed call by the calls the loop's worker made before: its warm-up
(a few rows), then every earlier iteration's shards, so the timed calls find the engine those left
(its slots, its cache width); the line printed says whether a timed call had to build a new engine.
`--fresh-policy` times the calls on a policy loaded anew after the untimed ones (the loop's worker
loads each iteration's checkpoint into a new policy object, with its own tokenizer, before its call).
`--dask` runs the whole replay as one task on the GPU worker of a local Dask cluster started as the
loop starts its own (a worker process with one thread, beside its nanny and event loop), so a gap
that remains there is the worker's, and one that closes there is the rest of the loop's.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import time
from pathlib import Path

import torch

from aitp.fanout.shards import cut_shards, default_shard_size, sample_seed
from aitp.fingerprint import fingerprint
from aitp.lake.reader import read_partition
from aitp.policies.base import SamplingParams
from aitp.policies.fast.resident import resident_engines
from aitp.policies.loading import load_policy
from aitp.reasoning.rollouts.worker import WARM_PROMPTS, worker_name


def checkpoint_of(home: Path, version: str) -> Path:
    """The model directory under HOME (a checkpoint, a registered copy) whose fingerprint is `version`."""
    for config in sorted(home.rglob("config.json")):
        if fingerprint(config.parent) == version:
            return config.parent
    raise SystemExit(f"no model directory under {home} has fingerprint {version}")


def in_loop(rows: list[dict]) -> dict:
    """Tokens, seconds and tokens/s of an iteration's rollouts as the lake records them."""
    tokens = sum(r["completion_tokens"] for r in rows)
    seconds = sum(r["latency_s"] for r in rows if r["sample_index"] == 0)
    return dict(tokens=tokens, seconds=seconds, tps=tokens / seconds)


def iteration_calls(home: Path, experiment: str, iteration: int, seed: int) -> tuple[list[dict], list[dict], list]:
    """An iteration's lake rows, its groups' first rows, and its `policy.sample` calls as the loop cut them."""
    columns = ["item_id", "prompt", "sample_index", "completion_tokens", "prompt_tokens", "latency_s", "model_version"]
    columns += ["sampler_json"]  # each shard's call: where its time went (null in lakes written before it was kept)
    rows = read_partition(home, "rollouts", experiment, iteration).select(columns).to_pylist()
    firsts = [r for r in rows if r["sample_index"] == 0]
    chats = [json.loads(r["prompt"]) if isinstance(r["prompt"], str) else r["prompt"] for r in firsts]
    seeds = [sample_seed(r["item_id"], seed, iteration) for r in firsts]
    size = default_shard_size(len(chats), gpu_workers=1)
    return rows, firsts, list(zip(cut_shards(chats, size), cut_shards(seeds, size)))


def replay(
    home: Path,
    experiment: str,
    iteration: int,
    new_tokens: int,
    temperature: float,
    seed: int = 0,
    profile=None,
    hold_gib: float = 0.0,
    history: bool = False,
    fresh_policy: bool = False,
) -> dict:
    """The in-loop figures and the replayed calls' figures for one iteration.

    `hold_gib` keeps that much GPU memory taken while the decoder sizes its slots and samples, as the
    loop's flow process holds what its training and evaluation cached on the same card.
    """
    held = torch.empty(int(hold_gib * 2**30), dtype=torch.uint8, device="cuda") if hold_gib > 0 else None
    rows, firsts, shards = iteration_calls(home, experiment, iteration, seed)
    versions = {r["model_version"] for r in rows}
    if len(versions) != 1:
        raise SystemExit(f"iteration {iteration} was sampled by {len(versions)} models; replay needs one")
    n = len(rows) // len(firsts)
    checkpoint = str(checkpoint_of(home, versions.pop()))
    policy = load_policy(checkpoint, device="cuda")
    params = SamplingParams(n=n, temperature=temperature, max_tokens=new_tokens)
    if history:  # untimed: the worker's warm-up, then the earlier iterations' calls
        policy.sample([shards[0][0][0]] * WARM_PROMPTS, params, list(range(WARM_PROMPTS)))
        for earlier in range(1, iteration):
            for chats, seeds in iteration_calls(home, experiment, earlier, seed)[2]:
                policy.sample(chats, params, seeds)
    else:  # untimed: compiles and captures, as earlier iterations did
        policy.sample(shards[0][0], params, shards[0][1])
    if fresh_policy:
        policy = load_policy(checkpoint, device="cuda")
    engines = set(map(id, resident_engines()))
    tokens = seconds = 0.0
    calls = []
    for shard_chats, shard_seeds in shards:
        torch.cuda.synchronize()
        start = time.perf_counter()
        if profile is not None:
            profile.enable()
        groups = policy.sample(shard_chats, params, shard_seeds)
        if profile is not None:
            profile.disable()
        seconds += time.perf_counter() - start
        tokens += sum(c.completion_tokens for g in groups for c in g)
        calls.append(getattr(policy, "last_call", None))
    loop = in_loop(rows)
    del held
    return dict(
        card=torch.cuda.get_device_name(),
        history=history,
        fresh_policy=fresh_policy,
        where=worker_name(),
        rebuilt=set(map(id, resident_engines())) != engines,
        hold_gib=hold_gib,
        threads=torch.get_num_threads(),
        slots=[engine.slots for engine in resident_engines()],
        iteration=iteration,
        prompts=len(firsts),
        n=n,
        shards=len(shards),
        mean_prompt_tokens=sum(r["prompt_tokens"] for r in firsts) / len(firsts),
        mean_completion_tokens=loop["tokens"] / len(rows),
        in_loop=loop,
        in_loop_calls=sorted({r["sampler_json"] for r in firsts if r["sampler_json"]}),
        replayed=dict(tokens=tokens, seconds=seconds, tps=tokens / seconds),
        replayed_calls=[json.dumps(c, sort_keys=True) for c in calls if c],
        ratio=loop["tps"] / (tokens / seconds),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("home", type=Path)
    parser.add_argument("experiment")
    parser.add_argument("iteration", type=int)
    parser.add_argument("--new-tokens", type=int, default=64, help="the config's rollouts.max_tokens")
    parser.add_argument("--temperature", type=float, default=1.0, help="the config's rollouts.temperature")
    parser.add_argument("--seed", type=int, default=0, help="the config's seed (the groups' sampling seeds follow it)")
    parser.add_argument("--hold-gib", type=float, default=0.0, help="GPU memory kept taken, as the loop's flow holds")
    parser.add_argument("--torch-threads", type=int, default=0, help="torch CPU threads (the loop's worker has 1)")
    parser.add_argument("--history", action="store_true", help="first replay the worker's earlier calls, untimed")
    parser.add_argument("--fresh-policy", action="store_true", help="time the calls on a policy loaded anew")
    parser.add_argument("--dask", action="store_true", help="replay in a local Dask cluster's GPU worker")
    parser.add_argument("--profile", type=int, default=0, help="print this many lines of a profile of the timed calls")
    parser.add_argument("--json", help="also write the result here")
    args = parser.parse_args()
    profile = cProfile.Profile() if args.profile else None
    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)
    how = (args.home, args.experiment, args.iteration, args.new_tokens, args.temperature, args.seed)
    if args.dask:
        from distributed import Client

        from aitp.fanout.cluster import GPU, local_cluster

        with local_cluster(gpus=1) as cluster, Client(cluster) as client:
            options = (args.hold_gib, args.history, args.fresh_policy)
            task = client.submit(replay, *how, None, *options, resources={GPU: 1}, pure=False)
            result = task.result()
    else:
        result = replay(*how, profile, args.hold_gib, args.history, args.fresh_policy)
    loop, again = result["in_loop"], result["replayed"]
    print(
        f"{result['card']}, iteration {result['iteration']}: {result['prompts']} prompts x {result['n']} in "
        f"{result['shards']} shard(s), {result['mean_prompt_tokens']:.1f}-token prompts, "
        f"{result['mean_completion_tokens']:.1f} new tokens per row\n"
        f"in the loop: {loop['tokens']:,.0f} tokens in {loop['seconds']:.2f} s = {loop['tps']:,.0f} tokens/s\n"
        f"replayed:    {again['tokens']:,.0f} tokens in {again['seconds']:.2f} s = {again['tps']:,.0f} tokens/s\n"
        f"in-loop / replayed: {100 * result['ratio']:.0f} % (replayed with {result['slots']} slots, "
        f"{result['hold_gib']:g} GiB held, {result['threads']} torch threads, {result['where']}; "
        f"{'after the earlier calls' if result['history'] else 'after one call of the same shard'}"
        f"{', on a policy loaded anew' if result['fresh_policy'] else ''}, "
        f"{'a timed call built a new engine' if result['rebuilt'] else 'no timed call built an engine'})"
    )
    for where, calls in (("in the loop", result["in_loop_calls"]), ("replayed", result["replayed_calls"])):
        for call in calls:  # where each call's time went (the fast decoder's timings)
            print(f"{where}: {call}")
    if profile is not None:
        pstats.Stats(profile).sort_stats("cumulative").print_stats(args.profile)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
