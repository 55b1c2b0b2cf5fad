"""TRL's GRPOTrainer beside the project's GRPO on the same work, judged by the project's held-out evaluator.

    python benchmarks/trl_grpo.py --home runs/gpu-grpo --experiment gpu-grpo [--steps-per-generation 16]
        [--vllm colocate] [--limit-items K] [--max-steps N] [--device cpu] [--out trl.json]

Reads a loop (`aitp run --config configs/gpu-grpo.yaml --home runs/gpu-grpo`) from its lake: the warm start
(iteration 0's champion, from the registry), the train items every finished iteration 1..N rolled out with the chats
the loop sent (rebuilt with `build_messages` and checked against the lake's; an iteration not finished yet takes the
items the loop generates for it), and the loop's rollout and `self_train` settings. TRL's GRPOTrainer then trains
the warm start on those items in the loop's order, one pass, `group_size` completions per item, so it generates
exactly the loop's samples in all; in TRL's default mode, a generation batch per optimizer step, that batch sized to
the loop's generated samples per optimizer step (an iteration's samples over its steps). Its reward is the loop's
own `final_score`: the task's verifier through `score_group`, length penalty included. TRL's final model is
evaluated by the project's evaluator (`run_eval`, the checkpoint loaded as the loop loads one) on the experiment's
pinned eval set, and paired with the warm start and the loop's last champion on the same items.

Why not one generation batch per loop iteration, as the loop samples: TRL's dataloader hands every micro-batch the
whole generation batch again (a 32,768-row batch, fetched 1,024 times an iteration, took 0.57 s a fetch on the
2-core CPU here): minutes of data loading per iteration. `--steps-per-generation K` is the middle way: one
generation batch feeds K optimizer steps (their samples generated with one set of weights, the ratio then clipped
against those log-probs, as in the loop), so `generate` runs on K times the rows, K times less often; the steps stay
the same.

Printed as Markdown: the settings of both sides, the held-out gains, samples per second and TRL's peak GPU memory;
`--out` keeps the raw figures as JSON. The loop's side is read from its lake (each iteration's sampling seconds,
summed over its shards' calls, and its training seconds from the checkpoint's `training.json`). Nothing is written
to the lake. `--device cpu --limit-items 2 --max-steps 2` is a smoke run of a tiny loop on the CPU.

TRL is a benchmark-only dependency: pip install -e '.[trl]'.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib.util
import json
import math
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from aitp.checkpoints import read_record
from aitp.lake import connect
from aitp.loop.stats import per_item_pass
from aitp.paired import PairedGain, gain_on_shared_items
from aitp.reasoning.groups import score_group
from aitp.reasoning.items import Item, regenerate
from aitp.reasoning.prompt import SYSTEM_PROMPT, build_messages

TRL_MISSING = "error: this benchmark needs TRL: pip install -e '.[trl]'"


def require_trl() -> Any:
    """The `trl` module, or one line naming the install when it is missing."""
    try:
        import trl
    except ImportError:
        raise SystemExit(TRL_MISSING) from None
    return trl


@dataclass
class Loop:
    """What the benchmark takes of a recorded loop: its config, warm start, items per iteration and figures."""

    home: Path
    experiment: str
    config: Any
    """The run's `LoopConfig`, as its `iterations` rows recorded it."""
    warm_start: Path
    warm_start_model: str
    last_champion: str
    items: dict[int, list[Item]]
    """Iteration -> its train items in the loop's order: those its rollouts hold where the loop finished it, else
    the items the loop generates for it (an unfinished loop's later iterations)."""
    chats: dict[str, list[dict[str, str]]]
    """Item id -> the chat the loop sent for it (from the lake)."""
    iterations: list[dict[str, Any]] = field(default_factory=list)

    @property
    def world(self) -> Any:
        return self.config.environment

    @property
    def system_prompt(self) -> str:
        return self.world.system_prompt or SYSTEM_PROMPT


def _query(home: Path, sql: str, params: dict[str, Any]) -> list[tuple]:
    con = connect(home, read_only=True)
    try:
        return con.execute(sql, params).fetchall()
    finally:
        con.close()


def warm_start_checkpoint(home: Path, experiment: str, version: str) -> Path:
    """The registered checkpoint of iteration 0's champion: the model both trainers start from."""
    from aitp.registry.store import Registry

    registry = Registry(home)
    mv = registry.get(experiment, version)
    if mv is None:
        raise SystemExit(f"error: version {version} of {experiment} is not in {home}'s registry: run the loop there")
    return registry.checkpoint_path(mv)


def ordered_items(rows: Sequence[tuple], task_order: Sequence[str]) -> dict[int, list[Item]]:
    """Iteration -> its items regenerated from their lake identities, in the loop's order (task by task, by index).

    Each regenerated item must have the id the lake recorded: the reward then scores exactly the loop's item.
    """
    rank = {name: k for k, name in enumerate(task_order)}
    out: dict[int, list[Item]] = {}
    for iteration, item_id, task, config_json, seed, index in sorted(
        rows, key=lambda r: (r[0], rank.get(r[2], len(rank)), r[2], r[5])
    ):
        config = json.loads(config_json) if isinstance(config_json, str) else (config_json or {})
        item = regenerate(task, config, int(seed), int(index))
        if item.item_id != item_id:
            raise SystemExit(
                f"error: item {item_id} ({task} #{index}) regenerates as {item.item_id}: the lake is from "
                "another reasoning-gym version; rerun the loop"
            )
        out.setdefault(int(iteration), []).append(item)
    return out


def read_loop(home: Path, experiment: str) -> Loop:
    """The loop's config, warm start, rolled-out items and chats, and per-iteration figures, from its lake."""
    from aitp.loop.config import LoopConfig

    rows = _query(
        home,
        """SELECT iteration, config_json, champion_model, champion_version, epoch(finished_at) - epoch(started_at)
           FROM iterations WHERE experiment = $e AND champion_model IS NOT NULL ORDER BY iteration""",
        {"e": experiment},
    )
    if not rows or rows[0][0] != 0:
        raise SystemExit(f"error: experiment '{experiment}' in {home} has no decided iteration 0: run the loop first")
    config = LoopConfig.model_validate(json.loads(rows[0][1]))
    if config.environment.type != "reasoning":
        raise SystemExit(f"error: experiment '{experiment}' is a {config.environment.type} loop: pass a reasoning one")
    decided = [int(r[0]) for r in rows if r[0] >= 1]
    groups = (decided or []) and _query(
        home,
        """SELECT iteration, item_id, task, config_json, seed, item_index, prompt FROM rollouts
           WHERE experiment = $e AND list_contains($k, iteration) AND sample_index = 0""",
        {"e": experiment, "k": decided},
    )
    sampled = ordered_items([g[:6] for g in groups], [t.name for t in config.environment.tasks])
    # Iterations the loop has not finished yet: their items as the loop generates them.
    environment = config.build_environment(home)
    rounds = [k for k in range(1, config.iterations + 1) if config.environment.rolls_out(k)]
    if not rounds:
        raise SystemExit(f"error: experiment '{experiment}' never rolls out (a control?): pass a GRPO loop")
    items = {k: sampled.get(k) or list(environment.items(k)) for k in rounds}
    chats = {g[1]: json.loads(g[6]) if isinstance(g[6], str) else g[6] for g in groups}
    figures = (decided or []) and _query(
        home,
        """SELECT iteration, count(*), sum(completion_tokens), sum(latency_s) FILTER (WHERE sample_index = 0)
           FROM rollouts WHERE experiment = $e AND list_contains($k, iteration)
           GROUP BY iteration ORDER BY iteration""",
        {"e": experiment, "k": decided},
    )
    walls = {int(r[0]): r[4] for r in rows}
    iterations = []
    for k, samples, tokens, sampling_s in figures:
        record = read_record(home / "checkpoints" / experiment / f"iter-{int(k):03d}")
        iterations.append(
            {
                "iteration": int(k),
                "samples": int(samples),
                "completion_tokens": int(tokens or 0),
                "sampling_s": float(sampling_s or 0.0),
                "train_s": record.get("seconds"),
                "train_steps_s": (record.get("phases") or {}).get("steps_s"),
                "optimizer_steps": record.get("steps"),
                "wall_s": walls.get(int(k)),
            }
        )
    warm = warm_start_checkpoint(home, experiment, str(rows[0][3]))
    return Loop(home, experiment, config, warm, rows[0][2], rows[-1][2], items, chats, iterations)


def check_chats(loop: Loop) -> int:
    """How many of the lake's chats `build_messages` rebuilds exactly (all of them, or the run stops)."""
    recorded = [it for its in loop.items.values() for it in its if it.item_id in loop.chats]
    wrong = [it.item_id for it in recorded if build_messages(it, loop.system_prompt) != loop.chats[it.item_id]]
    if wrong:
        raise SystemExit(
            f"error: {len(wrong)} chats differ from the lake's (first: item {wrong[0]}): the system prompt "
            "or build_messages changed since the loop ran"
        )
    return len(recorded)


class LoopReward:
    """TRL's reward function: each completion's `final_score` exactly as the loop computes it.

    `score_group` scores a group with the task's verifier and then applies the loop's length penalty, which needs
    the whole group: TRL hands a reward function every completion of a generation round, each prompt's
    `num_generations` completions one after another (the order its advantages are grouped in), so each block of
    `group_size` is one group. Lengths are the completion's tokens, end-of-sequence included, as the loop counts them.
    """

    __name__ = "aitp_final_score"  # TRL names a reward function's logged figures after it

    def __init__(self, items: Mapping[str, Item], group_size: int, max_token_length: int) -> None:
        self.items, self.group_size, self.max_token_length = dict(items), group_size, max_token_length

    def __call__(
        self,
        prompts: Sequence[Any],
        completions: Sequence[Any],
        completion_ids: Sequence[Sequence[int]],
        item_id: Sequence[str],
        **_: Any,
    ) -> list[float]:
        texts = [c[-1]["content"] if isinstance(c, list) else str(c) for c in completions]
        scores: list[float] = []
        for start in range(0, len(texts), self.group_size):
            ids = set(item_id[start : start + self.group_size])
            if len(ids) != 1 or len(texts[start : start + self.group_size]) != self.group_size:
                raise ValueError(f"completions {start}.. are not one item's group of {self.group_size}")
            group = score_group(
                self.items[ids.pop()],
                texts[start : start + self.group_size],
                self.max_token_length,
                len,  # unused: the lengths are given
                [len(c) for c in completion_ids[start : start + self.group_size]],
            )
            scores += group.scores
        return scores


def prompts_per_step(total_prompts: int, target: float) -> int:
    """The divisor of `total_prompts` nearest `target` (by ratio): TRL's sampler drops a last partial batch, so a
    generation batch's prompts must divide them all for TRL to generate every one of the loop's samples."""
    divisors = [k for k in range(1, total_prompts + 1) if total_prompts % k == 0]
    return min(divisors, key=lambda k: abs(math.log(k / max(target, 1.0))))


LR_SCHEDULES = {"constant": "constant_with_warmup", "linear": "linear", "cosine": "cosine"}
"""The loop's `lr_schedule` (after its warm-up) as TRL's `lr_scheduler_type`."""


def trl_settings(
    world: Any,
    prompts_per_iteration: int,
    iterations: int,
    seed: int,
    loop_steps: float | None,
    device: str,
    steps_per_generation: int = 1,
) -> dict[str, Any]:
    """GRPOConfig's arguments for the loop's settings, where TRL has the same knob.

    Samples per step: the loop generates an iteration's samples, then takes `loop_steps` optimizer steps on them (its
    iterations' mean, from their training records; none recorded: as many as every sample would take). A TRL
    optimizer step takes as many samples as the loop generated per optimizer step (each reused `num_iterations`
    times, as the loop's `grpo_epochs`), rounded to a divisor of all the prompts so that every sample the loop
    generated is generated once: the same optimizer steps and samples in all. Micro-batches take
    `self_train.batch_size` sequences. TRL generates a batch for each optimizer step (its default), or one for
    `steps_per_generation` steps (fewer, larger `generate` calls; at most that many, to divide the prompts). TRL
    trains on every sample generated, the loop on the samples of groups whose scores differ (the others have no
    advantage: in TRL they add nothing but tokens to the loss's average).
    """
    rollouts, train = world.rollouts, world.self_train
    group, total = rollouts.group_size, prompts_per_iteration * iterations
    steps = loop_steps or prompts_per_iteration * group * train.grpo_epochs / (train.batch_size * train.grad_accum)
    prompts = prompts_per_step(total, prompts_per_iteration * train.grpo_epochs / steps)
    reuse = max(k for k in range(1, steps_per_generation + 1) if total % (prompts * k) == 0)
    step_samples = prompts * group
    batch = math.gcd(train.batch_size, step_samples)
    cuda = device.startswith("cuda")
    return {
        "num_generations": group,
        "generation_batch_size": step_samples * reuse,
        "per_device_train_batch_size": batch,
        "gradient_accumulation_steps": step_samples // batch,
        "num_iterations": train.grpo_epochs,
        "max_completion_length": rollouts.max_tokens,
        "temperature": rollouts.temperature,
        "top_p": rollouts.top_p,
        "top_k": 0,
        "loss_type": train.grpo_loss,  # the loop names its token averages as TRL does
        "scale_rewards": "group" if train.grpo_scale_std else "none",  # none: score minus group mean (Dr. GRPO)
        "epsilon": train.grpo_clip_low,
        "epsilon_high": train.grpo_clip_high,
        "beta": train.grpo_kl_beta,
        "learning_rate": train.lr,
        "lr_scheduler_type": LR_SCHEDULES[train.lr_schedule],  # the loop's restarts each iteration, TRL's spans all
        "warmup_steps": train.warmup_steps,
        "weight_decay": train.weight_decay,
        "adam_beta1": 0.9,
        "adam_beta2": 0.95,  # the loop's AdamW
        "max_grad_norm": 1.0,  # the loop's gradient clip
        "bf16": cuda,  # the loop trains bf16-mixed on CUDA, fp32 on the CPU
        "use_cpu": not cuda,
        "gradient_checkpointing": False,  # the loop does not checkpoint activations
        "shuffle_dataset": False,  # the loop's items in its order
        "num_train_epochs": 1,
        "seed": seed,
        "logging_steps": 10,
        "save_strategy": "no",
        "report_to": "none",
    }


def grpo_config(options: dict[str, Any], output_dir: Path) -> Any:
    """TRL's GRPOConfig of these arguments (activation checkpointing under the name this transformers reads)."""
    trl = require_trl()
    options = dict(options)
    if "activation_checkpointing" in {f.name for f in fields(trl.GRPOConfig)}:  # transformers 5's name
        options["activation_checkpointing"] = options.pop("gradient_checkpointing")
    return trl.GRPOConfig(output_dir=str(output_dir), **options)


def timed_trainer(base: type) -> type:
    """GRPOTrainer that times its generation and counts what it generated: it overrides TRL's
    `_generate_single_turn` (TRL 1.16), the one place where either backend (HF `generate`, vLLM) generates."""

    class TimedGRPOTrainer(base):
        generation_s = 0.0
        generated = 0

        def _generate_single_turn(self, *args: Any, **kwargs: Any) -> tuple[list[list[int]], Any]:
            _synchronize()
            start = time.perf_counter()
            ids, logprobs = super()._generate_single_turn(*args, **kwargs)
            _synchronize()
            TimedGRPOTrainer.generation_s += time.perf_counter() - start
            TimedGRPOTrainer.generated += len(ids)
            return ids, logprobs

    return TimedGRPOTrainer


def _synchronize() -> None:
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def train_with_trl(
    loop: Loop, items: list[Item], settings: dict[str, Any], work: Path, args: argparse.Namespace
) -> dict[str, Any]:
    """Train the warm start with TRL on the items; its final model saved under `work`, with its figures."""
    trl = require_trl()
    import datasets
    import torch
    import transformers

    options = dict(settings)
    if args.max_steps:
        options["max_steps"] = args.max_steps
    if args.vllm:
        options |= {"use_vllm": True, "vllm_mode": args.vllm, "vllm_gpu_memory_utilization": args.vllm_memory}
    config = grpo_config(options, work / "trl")
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(loop.warm_start))
    model = transformers.AutoModelForCausalLM.from_pretrained(str(loop.warm_start), dtype=torch.float32)
    rows = [{"prompt": build_messages(it, loop.system_prompt), "item_id": it.item_id} for it in items]
    reward = LoopReward(
        {it.item_id: it for it in items}, settings["num_generations"], settings["max_completion_length"]
    )
    cuda = torch.cuda.is_available() and args.device.startswith("cuda")
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    trainer = timed_trainer(trl.GRPOTrainer)(
        model=model,
        reward_funcs=reward,
        args=config,
        train_dataset=datasets.Dataset.from_list(rows),
        processing_class=tokenizer,
    )
    start = time.perf_counter()
    with contextlib.redirect_stdout(sys.stderr):  # TRL's logs: stdout is the Markdown's
        output = trainer.train()
    _synchronize()
    seconds = time.perf_counter() - start
    peak = torch.cuda.max_memory_allocated() / 2**30 if cuda else None
    reserved = torch.cuda.max_memory_reserved() / 2**30 if cuda else None
    final = work / "final"
    trainer.save_model(str(final))
    tokenizer.save_pretrained(str(final))
    figures = {
        "trl_version": trl.__version__,
        "mode": f"vllm {args.vllm}" if args.vllm else "transformers generate",
        "final_model": str(final),
        "train_s": seconds,
        "generation_s": type(trainer).generation_s,
        "samples": type(trainer).generated,
        "optimizer_steps": trainer.state.global_step,
        "peak_gib": peak,
        "peak_reserved_gib": reserved,
        "train_metrics": output.metrics,
        "log_history": trainer.state.log_history,
    }
    del trainer, model  # the card is the evaluator's next
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    return figures


def evaluate_model(loop: Loop, checkpoint: Path, device: str) -> tuple[dict[str, float], str]:
    """Item id -> pass share of a checkpoint on the experiment's pinned eval set, by the project's evaluator."""
    from aitp.evals import pinned_eval_name
    from aitp.policies.fast.resident import release_engines
    from aitp.reasoning.evaluate import build_eval_set, load_checkpoint_policy, run_eval

    config = loop.world.eval_config(loop.config.seed)
    eval_set = build_eval_set(config)
    pinned = pinned_eval_name(loop.home, loop.experiment, eval_set.name)
    if pinned is not None and pinned != eval_set.eval_name:
        raise SystemExit(f"error: the loop's eval set was {pinned}, the config now builds {eval_set.eval_name}")
    policy = load_checkpoint_policy(checkpoint, device)
    _, samples = run_eval(policy, eval_set, config)
    del policy
    release_engines()  # the fast decoder keeps its engine's memory until told
    passed: dict[str, list[float]] = {}
    for s in samples:
        passed.setdefault(str(s["item_id"]), []).append(1.0 if s["passed"] else 0.0)
    return {item: sum(v) / len(v) for item, v in passed.items()}, eval_set.eval_name


def _gain(a: Mapping[str, float], b: Mapping[str, float], name_a: str, name_b: str) -> PairedGain:
    gain = gain_on_shared_items(a, b, name_a, name_b)
    if gain is None:
        raise SystemExit(f"error: {name_a} and {name_b} share no eval items")
    return gain


def _rate(count: float, seconds: float) -> float | None:
    return count / seconds if seconds else None


def _fmt(value: float | None, spec: str) -> str:
    return "–" if value is None else format(value, spec)


def settings_table(loop: Loop, settings: dict[str, Any], loop_steps: float | None) -> str:
    """The loop's settings beside the GRPOConfig arguments TRL ran with."""
    rollouts, train = loop.world.rollouts, loop.world.self_train
    per_iteration = len(next(iter(loop.items.values()))) * rollouts.group_size
    recorded = f"{per_iteration / loop_steps:.1f}" if loop_steps else "– (no training recorded)"
    clip = f"[1 - {train.grpo_clip_low:g}, 1 + {train.grpo_clip_high:g}]"
    step = settings["per_device_train_batch_size"] * settings["gradient_accumulation_steps"]
    mapping = [
        ("samples per item", f"group_size {rollouts.group_size}", f"num_generations {settings['num_generations']}"),
        (
            "generated samples per optimizer step",
            f"an iteration's {per_iteration:,} over its steps: {recorded}",
            f"{step:,} a step over num_iterations {settings['num_iterations']}: {step / settings['num_iterations']:.1f}"
            f"; generation_batch_size {settings['generation_batch_size']:,}",
        ),
        (
            "sampling",
            f"temperature {rollouts.temperature:g}, top_p {rollouts.top_p:g}, max_tokens {rollouts.max_tokens}",
            f"temperature {settings['temperature']:g}, top_p {settings['top_p']:g}, "
            f"max_completion_length {settings['max_completion_length']}",
        ),
        ("reward", "final_score (verifier, length penalty)", "LoopReward: the same score_group"),
        (
            "advantage",
            "score - group mean" + (" / std" if train.grpo_scale_std else ""),
            f"scale_rewards {settings['scale_rewards']}",
        ),
        (
            "loss",
            f"grpo_loss {train.grpo_loss}, ratio to the sampler's clipped to {clip}, KL {train.grpo_kl_beta:g}",
            f"loss_type {settings['loss_type']}, epsilon {settings['epsilon']:g}, epsilon_high "
            f"{settings['epsilon_high']:g}, beta {settings['beta']:g}",
        ),
        (
            "optimizer",
            f"AdamW lr {train.lr:g}, warmup {train.warmup_steps}, {train.lr_schedule}, betas 0.9/0.95, clip 1",
            f"learning_rate {settings['learning_rate']:g}, warmup_steps {settings['warmup_steps']}, "
            f"{settings['lr_scheduler_type']}, adam_beta2 0.95, max_grad_norm 1",
        ),
        (
            "batch",
            f"{train.batch_size} x grad_accum {train.grad_accum}, groups whose scores differ, "
            f"{train.grpo_epochs} pass(es)",
            f"per_device_train_batch_size {settings['per_device_train_batch_size']} x gradient_accumulation_steps "
            f"{settings['gradient_accumulation_steps']}, every sample, num_iterations {settings['num_iterations']}",
        ),
    ]
    lines = ["| setting | the loop's GRPO | TRL GRPOConfig |", "|---|---|---|"]
    return "\n".join(lines + [f"| {a} | {b} | {c} |" for a, b, c in mapping])


def held_out_table(gains: dict[str, Any]) -> str:
    """The held-out pass rates, each paired with the warm start and the loop's last champion."""
    held = [
        f"Held-out: {gains['eval_name']}, paired over {gains['trl_vs_warm'].n_items} items.",
        "",
        "| model | pass rate | over the warm start (paired 95 %) | over the loop's last champion |",
        "|---|---:|---|---|",
    ]
    warm, loop_gain = gains["warm_rate"], gains["loop_vs_warm"]
    trl_gain, versus = gains["trl_vs_warm"], gains["trl_vs_loop"]
    held.append(f"| warm start (iteration 0's champion) | {warm:.3f} | – | |")
    held.append(f"| warm start re-evaluated here | {gains['warm_here_rate']:.3f} | {gains['warm_here_vs_lake']} | |")
    held.append(f"| the loop's GRPO, last champion | {loop_gain.rate_b:.3f} | {loop_gain} | – |")
    held.append(f"| TRL GRPOTrainer, final model | {trl_gain.rate_b:.3f} | {trl_gain} | {versus} |")
    return "\n".join(held)


def speed_table(loop: Loop, trl_run: dict[str, Any]) -> str:
    """Samples per second of each side, with where the seconds come from."""
    its = loop.iterations
    samples = sum(i["samples"] for i in its)
    sampling = sum(i["sampling_s"] for i in its)
    trained = [i["train_s"] for i in its if i["train_s"] is not None]
    training = sum(trained)
    wall = sum(i["wall_s"] or 0.0 for i in its)
    first, last = (its[0]["iteration"], its[-1]["iteration"]) if its else (0, 0)
    done = (
        "no iteration finished" if not its else f"iteration {first}" if first == last else f"iterations {first}-{last}"
    )
    speed = [
        "| side | samples | generation s | training s | generation + training s | samples / s | peak GPU GiB |",
        "|---|---:|---:|---:|---:|---:|---:|",
        f"| the loop's GRPO, {done} | {samples:,} | {sampling:.1f} | {_fmt(training if trained else None, '.1f')} "
        f"| {sampling + training:.1f} "
        f"| {_fmt(_rate(samples, sampling + training), '.1f')} | not in the lake |",
        f"| TRL {trl_run['trl_version']} ({trl_run['mode']}) | {trl_run['samples']:,} | {trl_run['generation_s']:.1f} "
        f"| {trl_run['train_s'] - trl_run['generation_s']:.1f} | {trl_run['train_s']:.1f} "
        f"| {_fmt(_rate(trl_run['samples'], trl_run['train_s']), '.1f')} | {_fmt(trl_run['peak_gib'], '.2f')} |",
    ]
    note = (
        f"The loop's iterations took {wall:.1f} wall s in all (evaluation and records included): "
        f"{_fmt(_rate(samples, wall), '.1f')} samples / s. TRL's training s is its whole `train()` less "
        f"its generation (scoring and its {trl_run['optimizer_steps']} optimizer steps); the "
        f"loop's sampling s sums its shards' sampling calls, its training s the iterations' `training.json` seconds."
    )
    return "\n".join(speed) + "\n\n" + note


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", type=Path, required=True, help="the loop's home (its lake, registry, checkpoints)")
    parser.add_argument("--experiment", required=True, help="a reasoning loop with GRPO iterations, e.g. gpu-grpo")
    parser.add_argument("--device", default="cuda", help="cuda (one card) or cpu")
    parser.add_argument("--limit-items", type=int, default=None, help="only the first K items of each iteration")
    parser.add_argument("--max-steps", type=int, default=None, help="stop TRL after this many optimizer steps")
    parser.add_argument(
        "--steps-per-generation", type=int, default=1, help="optimizer steps one generation batch feeds (TRL: 1)"
    )
    parser.add_argument("--vllm", choices=("colocate", "server"), default=None, help="TRL's vLLM generation mode")
    parser.add_argument("--vllm-memory", type=float, default=0.3, help="vllm_gpu_memory_utilization (colocate)")
    parser.add_argument("--work", type=Path, default=None, help="where TRL's model goes (default: a new temp folder)")
    parser.add_argument("--out", type=Path, default=None, help="also write the raw figures here as JSON")
    args = parser.parse_args()
    require_trl()  # before minutes of reading: the one line that names the install
    if args.vllm and importlib.util.find_spec("vllm") is None:
        raise SystemExit("error: --vllm needs vLLM beside TRL: pip install vllm, or leave --vllm out")

    loop = read_loop(args.home, args.experiment)
    checked = check_chats(loop)
    per_iteration = {k: its[: args.limit_items] if args.limit_items else its for k, its in loop.items.items()}
    items = [it for k in sorted(per_iteration) for it in per_iteration[k]]
    recorded = [i["optimizer_steps"] for i in loop.iterations if i["optimizer_steps"]]
    loop_steps = sum(recorded) / len(recorded) if recorded else None
    settings = trl_settings(
        loop.world,
        len(items) // len(per_iteration),
        len(per_iteration),
        loop.config.seed,
        loop_steps,
        args.device,
        args.steps_per_generation,
    )
    work = args.work or Path(tempfile.mkdtemp(prefix="trl-grpo-"))
    trl_run = train_with_trl(loop, items, settings, work, args)

    trl_pass, eval_name = evaluate_model(loop, Path(trl_run["final_model"]), args.device)
    warm_here, _ = evaluate_model(loop, loop.warm_start, args.device)
    warm = per_item_pass(loop.home, loop.experiment, loop.warm_start_model, eval_name)
    last = per_item_pass(loop.home, loop.experiment, loop.last_champion, eval_name)
    gains = {
        "eval_name": eval_name,
        "warm_rate": sum(warm.values()) / len(warm),
        "warm_here_rate": sum(warm_here.values()) / len(warm_here),
        "warm_here_vs_lake": _gain(warm, warm_here, "warm start (lake)", "warm start (here)"),
        "loop_vs_warm": _gain(warm, last, "warm start", "loop last champion"),
        "trl_vs_warm": _gain(warm, trl_pass, "warm start", "TRL final"),
        "trl_vs_loop": _gain(last, trl_pass, "loop last champion", "TRL final"),
    }
    print("\n\n".join([settings_table(loop, settings, loop_steps), held_out_table(gains), speed_table(loop, trl_run)]))
    if args.out:
        raw = {
            "home": str(loop.home),
            "experiment": loop.experiment,
            "warm_start": str(loop.warm_start),
            "iterations": sorted(per_iteration),
            "items": len(items),
            "chats_checked_against_the_lake": checked,
            "loop_optimizer_steps_per_iteration": loop_steps,
            "trl_settings": settings,
            "trl": trl_run,
            "loop_iterations": loop.iterations,
            "held_out": {k: v.to_dict() if isinstance(v, PairedGain) else v for k, v in gains.items()},
        }
        args.out.write_text(json.dumps(raw, indent=2, default=str))


if __name__ == "__main__":
    main()
