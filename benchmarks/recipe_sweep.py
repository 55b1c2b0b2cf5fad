"""Recipe sweep: the loop's learning dynamics, stripped to the model, for many configs side by side.

Finding a quickstart recipe whose gain comes from self-training (and not from more steps on the
demonstrations) takes dozens of runs; the full loop costs ~6 minutes each on 2 CPU cores. This
script keeps only what decides learning — the tiny policy, its byte tokenizer and KV-cache sampler
from `aitp`, the same optimiser (AdamW, betas 0.9/0.95, constant rate after warm-up, clipping 1.0),
SFT on completion tokens, groups of T=1 samples on fresh items, exact-answer filtering, optional
distinct answers per group, greedy held-out eval, promotion on a strict gain, a paired bootstrap of
last champion over first — and drops the lake, MLflow, Prefect and Dask. On one H100 sixteen runs go
side by side in ~2 minutes. Scoring is exact match on the `<answer>` tag (case-insensitive for
spell_backward), which is what a 0.99 threshold keeps anyway; reasoning-gym is needed only to make
the item pools.

    .venv/bin/python benchmarks/recipe_sweep.py pools pools.json       # where reasoning-gym is installed
    python benchmarks/recipe_sweep.py run pools.json grid.jsonl --parallel 16 --out results.jsonl

A grid line is one JSON config: {"name", "tasks": [[pool, demonstrations], ...], "model": {...},
"warm_steps", "self_steps", "items", "group", "temp", "self_lr", "distinct", "control", "seed"}.
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

POOLS = {
    "spell34": ("spell_backward", {"min_word_len": 3, "max_word_len": 4}),
    "lc11": ("letter_counting", {"min_words": 1, "max_words": 1}),
    "arith2": (
        "basic_arithmetic",
        {
            "min_terms": 2,
            "max_terms": 2,
            "min_digits": 1,
            "max_digits": 2,
            "operators": ["+", "-"],
            "allow_parentheses": False,
            "allow_negation": False,
        },
    ),
}
SYSTEM = "Answer inside <answer></answer> tags."
_ANSWER = re.compile(r"<answer> ?(.*?) ?</answer>", re.DOTALL)


def make_pools(path: Path, n_train: int = 6000) -> None:
    """100 held-out questions per pool and up to `n_train` distinct train questions outside them."""
    import reasoning_gym

    out = {}
    for key, (task, config) in POOLS.items():
        held_out = {
            x["question"]: x["answer"] for x in reasoning_gym.create_dataset(task, seed=12345, size=100, **config)
        }
        train, seen = [], set(held_out)
        for x in reasoning_gym.create_dataset(task, seed=777, size=n_train, **config):
            if x["question"] not in seen:
                seen.add(x["question"])
                train.append({"q": x["question"], "a": x["answer"]})
        out[key] = {"task": task, "eval": [{"q": q, "a": a} for q, a in held_out.items()], "train": train}
    path.write_text(json.dumps(out))


def is_right(task: str, completion: str, gold: str) -> bool:
    """Exactly one answer pair, and its content equal to the gold answer."""
    if len(re.findall(r"<answer>.*?</answer>", completion, re.DOTALL | re.IGNORECASE)) != 1:
        return False
    found = _ANSWER.findall(completion)
    if not found:
        return False
    answer = found[-1].strip()
    return answer.lower() == gold.lower() if task == "spell_backward" else answer == gold.strip()


def simulate(pools: dict[str, Any], cfg: dict[str, Any]) -> dict[str, Any]:
    """Warm start on demonstrations, then self-training (or the control) iterations; the history and gain."""
    import torch
    import torch.nn.functional as F

    from aitp.policies.base import SamplingParams
    from aitp.policies.tiny import TinyConfig, TinyPolicy, TinyTransformer, chat_example
    from aitp.tokenizer import ByteTokenizer

    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.set_num_threads(1)
    rng = random.Random(cfg.get("seed", 0))
    tok = ByteTokenizer()
    tasks = [(key, n) for key, n in cfg["tasks"]]

    def messages(q: str) -> list[dict[str, str]]:
        return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": q}]

    torch.manual_seed(cfg.get("seed", 0))
    model = TinyTransformer(TinyConfig.from_dict(cfg["model"])).to(device)
    demos = [(x["q"], f"<answer>{x['a']}</answer>") for key, n in tasks for x in pools[key]["train"][:n]]
    cursor = dict(tasks)

    def fit(net, examples, steps: int, lr: float, warmup: int, batch: int = 32) -> None:
        net.train()
        opt = torch.optim.AdamW(net.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.0)
        encoded = [chat_example(tok, messages(q), c) for q, c in examples]
        order: list[int] = []
        for step in range(steps):
            rows = []
            while len(rows) < batch:
                if not order:
                    order = list(range(len(encoded)))
                    rng.shuffle(order)
                rows.append(encoded[order.pop()])
            width = max(len(ids) for ids, _ in rows)
            ids = torch.full((batch, width), tok.pad_id)
            target = torch.zeros((batch, width), dtype=torch.bool)
            for r, (i, t) in enumerate(rows):
                ids[r, : len(i)], target[r, : len(t)] = torch.tensor(i), torch.tensor(t)
            ids, target = ids.to(device), target.to(device)
            logits = net(ids[:, :-1]).float()
            loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), ids[:, 1:].reshape(-1), reduction="none")
            mask = target[:, 1:].reshape(-1).float()
            loss = (loss * mask).sum() / mask.sum()
            for group in opt.param_groups:
                group["lr"] = lr * min(1.0, (step + 1) / (warmup + 1))
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
            opt.step()
        net.eval()

    def evaluate(net) -> dict[str, list[bool]]:
        policy = TinyPolicy(net, tok, max_rows=512)
        out = {}
        for key, _ in tasks:
            items = pools[key]["eval"]
            done = policy.sample([messages(x["q"]) for x in items], SamplingParams(n=1, temperature=0.0, max_tokens=24))
            out[key] = [is_right(pools[key]["task"], d[0].text, x["a"]) for d, x in zip(done, items)]
        return out

    def rate(result: dict[str, list[bool]]) -> dict[str, float]:
        return {k: round(sum(v) / len(v), 3) for k, v in result.items()}

    fit(model, demos, cfg["warm_steps"], cfg.get("warm_lr", 3e-3), 20)
    champion, champion_eval = model, evaluate(model)
    first = champion_eval
    history = [{"iteration": 0, **rate(first)}]
    kept: list[tuple[str, str]] = []
    for k in range(1, cfg.get("iterations", 4) + 1):
        if cfg.get("control"):
            data = demos
        else:
            policy = TinyPolicy(champion, tok, max_rows=512)
            for key, _ in tasks:
                items = pools[key]["train"][cursor[key] : cursor[key] + cfg.get("items", 150)]
                cursor[key] += len(items)
                params = SamplingParams(n=cfg.get("group", 8), temperature=cfg.get("temp", 1.0), max_tokens=24)
                for x, group in zip(items, policy.sample([messages(x["q"]) for x in items], params)):
                    right = [c.text for c in group if is_right(pools[key]["task"], c.text, x["a"])]
                    kept += [(x["q"], text) for text in (dict.fromkeys(right) if cfg.get("distinct") else right)]
            data = kept
        if not data:
            history.append({"iteration": k, "trained": False})
            continue
        model = copy.deepcopy(champion)
        fit(model, data, cfg.get("self_steps", 50), cfg.get("self_lr", 1e-3), 0)
        result = evaluate(model)
        promoted = sum(map(sum, result.values())) > sum(map(sum, champion_eval.values()))
        if promoted:
            champion, champion_eval = model, result
        history.append({"iteration": k, "examples": len(data), "promoted": promoted, **rate(result)})
    before = [x for key in first for x in first[key]]
    after = [x for key in champion_eval for x in champion_eval[key]]
    diffs = [int(b) - int(a) for a, b in zip(before, after)]
    boot = random.Random(0)
    means = sorted(sum(diffs[boot.randrange(len(diffs))] for _ in diffs) / len(diffs) for _ in range(2000))
    return {"cfg": cfg, "history": history, "gain": sum(diffs) / len(diffs), "ci95": [means[50], means[1949]]}


def run_grid(pools_path: Path, grid: Path, parallel: int, out: Path) -> None:
    """Each config in its own process (one torch thread each), results appended as JSON lines."""
    configs = [json.loads(line) for line in grid.read_text().splitlines() if line.strip()]

    def one(cfg: dict[str, Any]) -> None:
        cmd = [sys.executable, __file__, "one", str(pools_path), json.dumps(cfg)]
        done = subprocess.run(cmd, capture_output=True, text=True)
        line = (
            done.stdout.strip().splitlines()[-1]
            if done.returncode == 0
            else json.dumps({"cfg": cfg, "error": done.stderr[-500:]})
        )
        with out.open("a") as fh:
            fh.write(line + "\n")

    with ThreadPoolExecutor(parallel) as pool:
        list(pool.map(one, configs))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("pools", help="make the item pools (needs reasoning-gym)")
    p.add_argument("path", type=Path)
    r = sub.add_parser("run", help="run a grid of configs side by side")
    r.add_argument("pools", type=Path)
    r.add_argument("grid", type=Path)
    r.add_argument("--parallel", type=int, default=8)
    r.add_argument("--out", type=Path, default=Path("results.jsonl"))
    o = sub.add_parser("one", help="run one config (JSON) and print its result")
    o.add_argument("pools", type=Path)
    o.add_argument("config")
    args = parser.parse_args()
    if args.command == "pools":
        make_pools(args.path)
    elif args.command == "run":
        run_grid(args.pools, args.grid, args.parallel, args.out)
    else:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        print(json.dumps(simulate(json.loads(args.pools.read_text()), json.loads(args.config))))


if __name__ == "__main__":
    main()
