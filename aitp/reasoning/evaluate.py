"""Evaluation on a fixed, versioned eval set: pass rate with 95% intervals, format violations, tokens.

The eval set is the `eval` split of each configured task (deterministic items). Its version hashes
the item identities (their ids) and the sampling protocol (system prompt, temperature, top-p,
token cap, samples per item), so two numbers with one version were measured the same way on the
same questions. The first evaluation of an experiment pins the version (its `evals` rows carry
`eval_name = <name>@<version>`); a later evaluation under another version is refused. Every
prompt gets a seed derived from its item, so champion and challenger see the same randomness.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from aitp.errors import AitpError
from aitp.evals import EvalResult, EvalSetChangedError, load_eval, pinned_eval_name


class EvalConfig(BaseModel):
    """Which fixed questions to ask and how to sample the answers."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    name: str = Field("heldout", pattern=r"^[A-Za-z0-9_-]+$", max_length=100)
    """Name of the eval set; an experiment may pin several, one version per name."""
    tasks: list[str] = Field(default_factory=lambda: ["basic_arithmetic"], min_length=1)
    n_per_task: int = Field(50, ge=1)
    seed: int = 0
    difficulty: str | int = "none"
    """none, random, or a curriculum level."""
    task_configs: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """Per-task overrides of the reasoning-gym config (e.g. `leg_counting: {max_animals: 2}`)."""
    temperature: float = Field(0.0, ge=0.0)
    """0 is greedy."""
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    max_tokens: int = Field(256, ge=1)
    samples_per_item: int = Field(1, ge=1)
    batch_size: int = Field(32, ge=1)
    """Prompts per sampling call."""
    system_prompt: str | None = None
    """None: the environment's system prompt."""


@dataclass
class EvalSet:
    """The fixed items of an eval config and the version that names them."""

    name: str
    items: list[Any]
    protocol: dict[str, Any]
    version: str

    @property
    def eval_name(self) -> str:
        return f"{self.name}@{self.version}"


def build_eval_set(config: EvalConfig) -> EvalSet:
    """Generate the eval items of a config and hash their identities and the protocol into a version."""
    from aitp.reasoning.items import generate_items, parse_difficulty
    from aitp.reasoning.prompt import SYSTEM_PROMPT

    items = [
        it
        for task in config.tasks
        for it in generate_items(
            task,
            config.n_per_task,
            config.seed,
            "eval",
            parse_difficulty(config.difficulty),
            task_config=config.task_configs.get(task),
        )
    ]
    unknown = sorted(set(config.task_configs) - set(config.tasks))
    if unknown:
        raise AitpError(f"eval task_configs name tasks not in the eval set ({', '.join(unknown)}): add them to tasks")
    protocol = {
        "system_prompt": SYSTEM_PROMPT if config.system_prompt is None else config.system_prompt,
        "temperature": config.temperature,
        "top_p": config.top_p,
        "max_tokens": config.max_tokens,
        "samples_per_item": config.samples_per_item,
    }
    canonical = json.dumps({"items": [it.item_id for it in items], "protocol": protocol}, sort_keys=True)
    return EvalSet(config.name, items, protocol, hashlib.sha256(canonical.encode()).hexdigest()[:12])


def item_seed(item_id: str, seed: int) -> int:
    """The sampling seed of an eval item: the same for every model evaluated."""
    return int.from_bytes(hashlib.sha256(f"aitp-eval:{seed}:{item_id}".encode()).digest()[:4], "big")


def run_eval(policy: Any, eval_set: EvalSet, config: EvalConfig) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Sample and strictly score every eval item: (rows per task and level, one record per sample)."""
    from aitp.policies.base import SamplingParams
    from aitp.reasoning.scoring import score_completion

    params = SamplingParams(
        n=config.samples_per_item, temperature=config.temperature, top_p=config.top_p, max_tokens=config.max_tokens
    )
    system = eval_set.protocol["system_prompt"]
    samples = []
    for start in range(0, len(eval_set.items), config.batch_size):
        batch = eval_set.items[start : start + config.batch_size]
        prompts = [[{"role": "system", "content": system}, {"role": "user", "content": it.question}] for it in batch]
        groups = policy.sample(prompts, params, [item_seed(it.item_id, config.seed) for it in batch])
        for item, group in zip(batch, groups):
            for k, completion in enumerate(group):
                scored = score_completion(item, completion.text)
                samples.append(
                    {
                        "item_id": item.item_id,
                        "task": item.task,
                        "difficulty_level": item.level,
                        "sample_index": k,
                        "completion": completion.text,
                        "extracted_answer": scored.extracted,
                        "gold_answer": item.answer,
                        "score": scored.raw,
                        "passed": scored.raw >= 1.0,
                        "format_error": scored.format_error,
                        "completion_tokens": completion.completion_tokens,
                    }
                )
    return _rows(samples), samples


def _rows(samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    cells: dict[tuple[str, int | None], list[dict[str, Any]]] = {}
    for s in samples:
        cells.setdefault((s["task"], s["difficulty_level"]), []).append(s)
    rows = []
    for (task, level), group in sorted(cells.items(), key=lambda kv: (kv[0][0], -1 if kv[0][1] is None else kv[0][1])):
        n = len(group)
        rows.append(
            {
                "task": task,
                "difficulty_level": level,
                "n_items": len({s["item_id"] for s in group}),
                "n_samples": n,
                "n_pass": sum(s["passed"] for s in group),
                "pass_rate": sum(s["passed"] for s in group) / n,
                "mean_score": sum(s["score"] for s in group) / n,
                "format_error_rate": sum(s["format_error"] is not None for s in group) / n,
                "mean_completion_tokens": sum(s["completion_tokens"] for s in group) / n,
            }
        )
    return rows


def check_pinned(home: str | Path, experiment: str, eval_set: EvalSet) -> bool:
    """Whether the experiment already pinned this eval set; an error when it pinned another version."""
    pinned = pinned_eval_name(home, experiment, eval_set.name)
    if pinned is not None and pinned != eval_set.eval_name:
        raise EvalSetChangedError(
            f"eval set '{eval_set.name}' of experiment '{experiment}' changed: it was measured as {pinned}, the "
            f"config now gives {eval_set.eval_name}: restore the eval config (tasks, n, seed, difficulty, sampling) "
            "or start a new experiment"
        )
    return pinned is not None


def _shard(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "-", text)[:64].lstrip("-_") or "model"


def eval_shard(config: EvalConfig, model_version: str) -> str:
    """The shard a model's evaluation commits its `evals` and `eval_samples` rows under."""
    return _shard(f"{config.name}-{model_version}")


def evaluate(
    home: str | Path,
    experiment: str,
    iteration: int,
    checkpoint: str | Path | dict[str, Any],
    config: EvalConfig,
    device: str | None = None,
    policy: Any = None,
    model_version: str | None = None,
) -> EvalResult:
    """Evaluate a checkpoint (or policy spec) on the experiment's fixed eval set; write `evals` rows to the lake.

    `model_version` names the model in the lake (default: the policy's own version, its content id).
    """
    from aitp.home import resolve_home
    from aitp.lake import write_partition

    home = resolve_home(home)
    eval_set = build_eval_set(config)
    pinned = check_pinned(home, experiment, eval_set)
    if policy is None:
        policy = load_checkpoint_policy(checkpoint, device)
    start = time.perf_counter()
    rows, samples = run_eval(policy, eval_set, config)
    seconds = time.perf_counter() - start
    version = model_version or str(policy.version)
    result = EvalResult(experiment, iteration, version, eval_set.eval_name, rows, samples, seconds)
    if not pinned:  # eval questions join the lake, so training selections can leave them out
        write_partition(
            home,
            "items",
            experiment,
            iteration,
            [item_row(it) for it in eval_set.items],
            shard=_shard(f"eval-{eval_set.name}"),
        )
    lake_rows = [
        {
            **r,
            "eval_name": eval_set.eval_name,
            "model_version": result.model_version,
            "split": "eval",
            "seconds": seconds,
        }
        for r in rows
    ]
    shard = eval_shard(config, result.model_version)
    # per-sample rows first: the aggregate `evals` commit is what marks the evaluation as done
    write_partition(
        home,
        "eval_samples",
        experiment,
        iteration,
        [{**s, "eval_name": eval_set.eval_name, "model_version": result.model_version} for s in samples],
        shard=shard,
    )
    write_partition(home, "evals", experiment, iteration, lake_rows, shard=shard)
    return result


def load_checkpoint_policy(checkpoint: Any, device: str | None = None) -> Any:
    """The policy of a checkpoint directory (checked for completeness first) or of any policy spec."""
    from aitp.checkpoints import verify_checkpoint
    from aitp.policies.loading import load_policy
    from aitp.policies.spec import PolicySpec

    spec = PolicySpec.parse(checkpoint)
    path = spec.local_path() if spec.path else None
    if path is not None and path.suffix != ".gguf":
        verify_checkpoint(path)
    return load_policy(spec, device=device)


def item_row(item: Any) -> dict[str, Any]:
    """The `items` table row of an item (its split included)."""
    return {
        "item_id": item.item_id,
        "task": item.task,
        "config_json": item.config,
        "seed": item.seed,
        "item_index": item.index,
        "split": item.split,
        "difficulty_level": item.level,
        "question": item.question,
        "gold_answer": item.answer,
        "metadata_json": item.metadata,
    }


@dataclass
class EvalSetEvaluator:
    """The reasoning environment's evaluator: the fixed eval set of an `EvalConfig`, results in the lake."""

    config: EvalConfig
    device: str | None = None

    @cached_property
    def eval_name(self) -> str:
        return build_eval_set(self.config).eval_name

    def load(self, home: Path, experiment: str, model_version: str) -> EvalResult | None:
        """The model's committed evaluation on this eval set, if any."""
        return load_eval(home, experiment, model_version, self.eval_name)

    def shard(self, model_version: str) -> str:
        return eval_shard(self.config, model_version)

    def run(
        self, home: Path, experiment: str, iteration: int, checkpoint: Any, model_version: str | None
    ) -> EvalResult:
        """Evaluate the checkpoint now and commit the result."""
        return evaluate(home, experiment, iteration, checkpoint, self.config, self.device, model_version=model_version)
