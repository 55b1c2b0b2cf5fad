"""Deterministic reasoning-gym items, identified by (task, config, seed, index) and regenerable from it.

reasoning-gym builds item `idx` of seed `s` from `Random(s + idx)`, so seed `s + 1` is seed `s`
shifted by one item. Splits therefore get seeds derived by hashing, far apart, and the train split
also skips any item whose question text occurs in the eval set (small problem spaces repeat).
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from typing import Any, Literal

import numpy as np

from aitp.errors import BadInputError
from aitp.reasoning.tasks import gym_factory, task_info

Split = Literal["train", "eval"]
SPLITS: tuple[str, ...] = ("train", "eval")
DEFAULT_EVAL_SIZE = 100

# `composite` has no usable default (it needs sub-datasets); this mixture makes it generate.
COMPOSITE_DEFAULT: dict[str, Any] = {
    "datasets": [
        {"name": "basic_arithmetic", "weight": 1.0, "config": {}},
        {"name": "leg_counting", "weight": 1.0, "config": {}},
        {"name": "spell_backward", "weight": 1.0, "config": {}},
    ]
}


@dataclass
class Item:
    """One question with its identity (task, config, seed, index) and what the verifier needs."""

    task: str
    config: dict[str, Any]
    seed: int
    index: int
    split: str
    level: int | None
    question: str
    answer: str | None
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def identity(self) -> dict[str, Any]:
        return {"task": self.task, "config": self.config, "seed": self.seed, "index": self.index}

    @property
    def item_id(self) -> str:
        """A stable id: the hash of the identity, so equal identities give equal ids anywhere."""
        return hashlib.sha256(_canonical(self.identity).encode()).hexdigest()[:20]

    def entry(self) -> dict[str, Any]:
        """The reasoning-gym entry that `score_answer` expects."""
        return {"question": self.question, "answer": self.answer, "metadata": self.metadata}

    def to_dict(self) -> dict[str, Any]:
        return {"item_id": self.item_id, **asdict(self)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Item:
        """Rebuild an item from a JSON line; a line with only the identity is regenerated."""
        missing = [k for k in ("task", "seed", "index") if k not in data]
        if missing:
            raise BadInputError(f"item is missing field(s) {', '.join(missing)}: pass lines from `aitp items`")
        if "question" not in data or "metadata" not in data:
            return regenerate(data["task"], data.get("config") or {}, int(data["seed"]), int(data["index"]))
        return cls(
            task=data["task"],
            config=data.get("config") or {},
            seed=int(data["seed"]),
            index=int(data["index"]),
            split=data.get("split", "train"),
            level=data.get("level"),
            question=data["question"],
            answer=data.get("answer"),
            metadata=data.get("metadata") or {},
        )


def _canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


def split_seed(seed: int, split: str, task: str) -> int:
    """The dataset seed of a (seed, split, task): hashed so splits and tasks sit far apart."""
    digest = hashlib.sha256(f"aitp:{split}:{task}:{seed}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def _dataset_kwargs(task: str, config: dict[str, Any]) -> dict[str, Any]:
    kwargs = {k: v for k, v in config.items() if not k.startswith("_")}
    if task == "composite":
        specs = kwargs.get("datasets") or COMPOSITE_DEFAULT["datasets"]
        from reasoning_gym.composite import DatasetSpec

        kwargs["datasets"] = [DatasetSpec(s["name"], float(s["weight"]), dict(s.get("config", {}))) for s in specs]
    return kwargs


@lru_cache(maxsize=128)
def _dataset_cached(task: str, config_json: str, seed: int) -> Any:
    return gym_factory().create_dataset(task, seed=seed, **_dataset_kwargs(task, json.loads(config_json)))


def dataset_for(task: str, config: dict[str, Any], seed: int) -> Any:
    """The reasoning-gym dataset object of an identity (cached: some datasets precompute at creation)."""
    task_info(task)  # an unknown name fails naming the closest tasks, not deep inside reasoning-gym
    try:
        return _dataset_cached(task, _canonical(config), seed)
    except (TypeError, ValueError, AssertionError, KeyError) as exc:  # reasoning-gym's config checks
        message = " ".join(str(exc).split())[:200] or type(exc).__name__
        raise BadInputError(
            f"bad config for task '{task}' ({message}): fix it to match reasoning-gym's config"
        ) from None


def _jsonable(value: Any) -> Any:
    """Metadata made JSON-safe (tuples to lists, odd objects to str), as it will be stored."""
    return json.loads(json.dumps(value, default=str))


@contextmanager
def _global_rngs_kept() -> Iterator[None]:
    """Put Python's and numpy's global RNGs back as they were after a block of pinned draws.

    Saving and restoring them costs more than drawing an item (numpy's state is large): a batch of
    items saves once around the batch instead of once per item.
    """
    state, np_state = random.getstate(), np.random.get_state()
    try:
        yield
    finally:
        random.setstate(state)
        np.random.set_state(np_state)


def _pin_prefix(task: str, config: dict[str, Any], seed: int) -> str:
    """`_canonical([task, config, seed, index])` up to the index, so an item's pin hashes without re-encoding."""
    return _canonical([task, config, seed])[:-1] + ","


def _pinned_entry(dataset: Any, pin_prefix: str, index: int) -> dict[str, Any]:
    """Entry `index` with the global RNGs seeded from its identity (the caller restores them)."""
    pin = int.from_bytes(hashlib.sha256(f"{pin_prefix}{int(index)}]".encode()).digest()[:4], "big")
    random.seed(pin)
    np.random.seed(pin)
    return dataset[index]


def raw_entry(task: str, config: dict[str, Any], seed: int, index: int) -> dict[str, Any]:
    """The reasoning-gym entry of an identity, with global RNGs pinned to it.

    A few generators (codeio runs sample programs that call `random`) read the global RNG, which
    would make an item depend on what ran before it; pinning it keeps every item regenerable.
    """
    dataset = dataset_for(task, config, seed)
    with _global_rngs_kept():
        return _pinned_entry(dataset, _pin_prefix(task, config, seed), index)


def _item(task: str, config: dict, seed: int, index: int, split: str, level: int | None, entry: dict) -> Item:
    answer = entry.get("answer")
    return Item(
        task=task,
        config=config,
        seed=seed,
        index=index,
        split=split,
        level=level,
        question=str(entry["question"]),
        answer=None if answer is None else str(answer),
        metadata=_jsonable(entry.get("metadata") or {}),
    )


def regenerate(task: str, config: dict[str, Any], seed: int, index: int, split: str = "train") -> Item:
    """Rebuild an item from its identity alone."""
    task_info(task)
    level = config.get("_level") if isinstance(config, dict) else None
    return _item(task, config, seed, index, split, level, raw_entry(task, config, seed, index))


def top_level(task: str) -> int:
    """The highest curriculum level of a task (0 when it has no curriculum)."""
    if not gym_factory().has_curriculum(task):
        return 0
    curriculum = gym_factory().create_curriculum(task)
    return max((len(a.levels) - 1 for a in curriculum.attributes.values()), default=0)


def level_config(task: str, level: int) -> dict[str, Any]:
    """Config overrides that reasoning-gym's curriculum gives a task at a global level."""
    info = task_info(task)
    if not info.has_curriculum:
        raise BadInputError(f"task '{task}' has no curriculum: use --difficulty none")
    top = top_level(task)
    if not 0 <= level <= top:
        raise BadInputError(f"difficulty level {level} is out of range for '{task}': use 0..{top}")
    curriculum = gym_factory().create_curriculum(task)
    curriculum.set_global_level(level)
    config = curriculum.generate_configuration({"seed": 0, "size": 1})
    fields: list[str] = []
    for attr in curriculum.attributes.values():
        fields += [getattr(attr, n) for n in ("lower_field_name", "upper_field_name", "field_name") if hasattr(attr, n)]
    overrides = {name: _jsonable(getattr(config, name)) for name in fields}
    return {**overrides, "_level": level}


def parse_difficulty(difficulty: str | int) -> str | int:
    """'none', 'random', or a curriculum level (an int)."""
    if isinstance(difficulty, int) or str(difficulty).isdigit():
        return int(difficulty)
    if difficulty in ("none", "random"):
        return difficulty
    raise BadInputError(f"unknown difficulty '{difficulty}': use none, random or a level number like 2")


def _plan(task: str, n: int, seed: int, difficulty: str | int) -> list[tuple[dict[str, Any], int | None]]:
    """The (config, level) of each of n items: one shared config, or a random level per item."""
    mode = parse_difficulty(difficulty)
    if mode == "none":
        return [({}, None)] * n
    if isinstance(mode, int):
        return [(level_config(task, mode), mode)] * n
    if not gym_factory().has_curriculum(task):
        return [({}, None)] * n
    rng = random.Random(f"aitp-levels:{task}:{seed}")
    top = top_level(task)
    levels = [rng.randint(0, top) for _ in range(n)]
    configs = {lvl: level_config(task, lvl) for lvl in set(levels)}
    return [(configs[lvl], lvl) for lvl in levels]


Picked = tuple[dict[str, Any], "int | None", int, dict[str, Any]]


def _pick(
    task: str, plan: list[tuple[dict[str, Any], int | None]], base: int, size: int, n: int, skip: set[str]
) -> list[Picked] | None:
    """One attempt at a dataset size: per planned item, the next index whose question is not in `skip`.

    Returns (config, level, index, entry) per item, or None when the `size` indices run out first.
    Only entries are drawn here; items are built for the picks alone (most draws are skipped when
    the eval set covers a small problem space).
    """
    sources: dict[str, tuple[dict[str, Any], Any, str]] = {}
    picked: list[Picked] = []
    cursor = 0
    with _global_rngs_kept():
        for config, level in plan:
            cfg = {**config, "size": size}
            key = _canonical(cfg)
            if key not in sources:
                sources[key] = (cfg, _dataset_cached(task, key, base), _pin_prefix(task, cfg, base))
            cfg, dataset, prefix = sources[key]
            while cursor < size:
                entry = _pinned_entry(dataset, prefix, cursor)
                cursor += 1
                if str(entry["question"]) not in skip:
                    picked.append((cfg, level, cursor - 1, entry))
                    break
            if cursor >= size and len(picked) < n:
                return None
    return picked if len(picked) == n else None


def _generate(
    task: str, n: int, seed: int, split: str, difficulty: str | int, skip: set[str], task_config: dict[str, Any]
) -> list[Item]:
    """n items of one split; items whose question is in `skip` are passed over for the next index."""
    base = split_seed(seed, split, task)
    plan = [({**config, **task_config}, level) for config, level in _plan(task, n, base, difficulty)]
    # Items of one config live in one dataset; the size is part of the identity, since a few
    # datasets sample without replacement and so depend on it.
    size = n if not skip else 2 * n + 16
    for _attempt in range(6):
        picked = _pick(task, plan, base, size, n, skip)
        if picked is not None:
            return [_item(task, dict(cfg), base, index, split, level, entry) for cfg, level, index, entry in picked]
        size *= 4
    raise BadInputError(
        f"task '{task}' has too few distinct questions outside the eval set for {n} train items: lower --n"
    )


@lru_cache(maxsize=32)
def _eval_items(task: str, n: int, seed: int, difficulty: str | int, task_config_json: str) -> tuple[Item, ...]:
    """The eval split of a task, cached: every train generation and every eval set asks for it again."""
    return tuple(_generate(task, n, seed, "eval", difficulty, set(), json.loads(task_config_json)))


def generate_items(
    task: str,
    n: int,
    seed: int,
    split: str = "train",
    difficulty: str | int = "none",
    eval_size: int = DEFAULT_EVAL_SIZE,
    task_config: dict[str, Any] | None = None,
) -> list[Item]:
    """n deterministic items of a task; train items never repeat a question of the eval set.

    `task_config` overrides fields of the task's reasoning-gym config (e.g. `max_animals: 2`); it
    becomes part of every item's identity.
    """
    task_info(task)
    task_config = dict(task_config or {})
    bad = [k for k in task_config if k in ("seed", "size") or k.startswith("_")]
    if bad:
        raise BadInputError(f"task config of '{task}' may not set {', '.join(bad)}: aitp derives them")
    if n < 0:
        raise BadInputError(f"--n must be zero or more, got {n}")
    if split not in SPLITS:
        raise BadInputError(f"unknown split '{split}': use train or eval")
    if n == 0:
        return []
    config_json = _canonical(task_config)
    if split == "eval":
        return list(_eval_items(task, n, seed, difficulty, config_json))
    held_out = {item.question for item in _eval_items(task, eval_size, seed, difficulty, config_json)}
    return _generate(task, n, seed, "train", difficulty, held_out, task_config)
