"""Discovery of every task reasoning-gym registers, with its category and curriculum."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from aitp.errors import AitpError, UnknownTaskError


def gym_factory() -> Any:
    """reasoning-gym's task factory, imported on first use: importing it builds every task, a wait that the
    commands that never touch a task (`aitp --help`, `aitp sql`, `aitp lake`) should not pay."""
    from reasoning_gym import factory

    return factory


# Tasks whose scorer checks a solution instead of comparing with one gold answer: the stored
# answer is one valid solution among many (or none at all), so "gold" means "an accepted example".
SOLUTION_CHECKED_TASKS: frozenset[str] = frozenset(
    {"boxnet", "graph_color", "propositional_logic", "rubiks_cube", "rush_hour"}
)


@dataclass(frozen=True)
class TaskInfo:
    """A registered reasoning-gym task."""

    name: str
    category: str
    has_curriculum: bool
    solution_checked: bool


@lru_cache(maxsize=1)
def list_tasks() -> tuple[TaskInfo, ...]:
    """Every registered task, sorted by name; the category is the reasoning-gym package it lives in."""
    infos = []
    for name, (dataset_cls, _config_cls) in gym_factory().DATASETS.items():
        parts = dataset_cls.__module__.split(".")
        category = parts[1] if len(parts) > 2 else parts[-1]
        infos.append(TaskInfo(name, category, gym_factory().has_curriculum(name), name in SOLUTION_CHECKED_TASKS))
    return tuple(sorted(infos, key=lambda t: t.name))


def task_info(name: str) -> TaskInfo:
    """Look a task up by name, or fail naming the closest registered names."""
    by_name = {t.name: t for t in list_tasks()}
    if name in by_name:
        return by_name[name]
    close = difflib.get_close_matches(name, by_name, n=3, cutoff=0.5)
    hint = f"did you mean {', '.join(close)}?" if close else "run `aitp tasks` for the list."
    raise UnknownTaskError(f"unknown task '{name}': {hint}")


class TaskConfigError(AitpError):
    """A task config that reasoning-gym refuses (unknown keys or values out of range)."""


def check_task_config(name: str, config: dict[str, Any]) -> None:
    """Refuse a task config reasoning-gym would refuse, naming the task and its valid keys."""
    task_info(name)
    if name == "composite" or not config:
        return
    config_cls = gym_factory().DATASETS[name][1]
    try:
        built = config_cls(**{k: v for k, v in config.items() if not k.startswith("_")})
        validate = getattr(built, "validate", None)
        if validate is not None:
            validate()
    except TypeError as exc:
        keys = ", ".join(sorted(getattr(config_cls, "__dataclass_fields__", {}))) or "see reasoning-gym"
        raise TaskConfigError(f"task '{name}' config: {exc} (its keys: {keys})") from None
    except (AssertionError, ValueError) as exc:
        raise TaskConfigError(f"task '{name}' config is out of range: {exc or 'refused by its validate()'}") from None
