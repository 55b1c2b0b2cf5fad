"""Typed configs from YAML, with `--set key.sub=value` overrides and a stable hash.

A config is a pydantic model that forbids unknown keys, so a typo fails with the key's name
instead of being silently ignored. The hash covers the validated, defaulted config, so two files
that mean the same run hash the same.
"""

from __future__ import annotations

import difflib
import hashlib
import json
from pathlib import Path
from typing import Any, TypeVar, get_args

import yaml
from pydantic import BaseModel, ValidationError

from aitp.errors import AitpError
from aitp.user_yaml import parse_yaml, read_yaml

M = TypeVar("M", bound=BaseModel)

SHIPPED_CONFIGS = Path(__file__).resolve().parents[1] / "configs"
"""The repository's `configs/`: the embedded default run and each backend's proving loop live there."""
MAX_NAME_LENGTH = 100
"""Experiment and eval names become file and directory names (255 bytes at most) with prefixes and suffixes."""


class ConfigError(AitpError):
    """A config file or override that does not validate."""


def _parse_value(text: str, key: str) -> Any:
    """YAML scalar rules: 3 -> int, 0.5 -> float, true -> bool, [a, b] -> list, else the string."""
    try:
        return parse_yaml(text, f"the value of --set {key}")
    except yaml.YAMLError:
        return text


def _sections(annotation: Any) -> list[type[BaseModel]]:
    """The config classes a field holds: one, an optional one, or the members of a union of sections."""
    return [a for a in (annotation, *get_args(annotation)) if isinstance(a, type) and issubclass(a, BaseModel)]


def _known_keys(model: type[BaseModel], prefix: str = "") -> list[str]:
    keys = []
    for name, field in model.model_fields.items():
        keys.append(prefix + name)
        # a section that may be left out (`generator: GeneratorConfig | None`) takes overrides of its keys too,
        # and a union of sections (the loop's `environment`) takes the keys of each member
        for section in _sections(field.annotation):
            keys += _known_keys(section, prefix + name + ".")
    return list(dict.fromkeys(keys))


def apply_overrides(data: dict[str, Any], overrides: list[str], model: type[BaseModel]) -> dict[str, Any]:
    """Apply `a.b=value` overrides to a nested dict, refusing keys the model does not have."""
    known = set(_known_keys(model))
    data = json.loads(json.dumps(data))
    for override in overrides:
        if "=" not in override:
            raise ConfigError(f"override '{override}' is not key=value: write it like --set train.steps=200")
        key, value = override.split("=", 1)
        key = key.strip()
        if key not in known:
            close = difflib.get_close_matches(key, sorted(known), n=2)
            hint = f"did you mean {' or '.join(close)}?" if close else "see the config file for the keys"
            raise ConfigError(f"unknown config key '{key}': {hint}")
        node = data
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = _parse_value(value, key)
    return data


def error_key(error: ValidationError, model: type[BaseModel] | None = None) -> str:
    """The dotted key of a validation error's first failure (`environment.rollouts.threshold`).

    Inside a union of sections keyed by `type` (the loop's `environment`) pydantic names the member's tag as a
    key of its own (`environment.reasoning.tasks`); the user wrote no such key, so, walking the key along
    `model`, it is left out.
    """
    parts: list[str] = []
    here = [model] if model is not None else []
    for part in (str(p) for p in error.errors()[0]["loc"]):
        tags = {str(m.model_fields["type"].default): m for m in here if "type" in m.model_fields}
        if len(here) > 1 and part in tags:
            here = [tags[part]]
            continue
        parts.append(part)
        field = next((m.model_fields[part] for m in here if part in m.model_fields), None)
        here = _sections(field.annotation) if field is not None else []
    return ".".join(parts) or "(top level)"


def explain(error: ValidationError, model: type[BaseModel] | None = None) -> str:
    """A validation error as one line naming the key and what its value must be."""
    first = error.errors()[0]
    location = error_key(error, model)
    if first["type"] == "extra_forbidden":
        return f"unknown config key '{location}': remove it or fix its spelling"
    return f"bad config value for '{location}': {first['msg']}"


def load_config(model: type[M], path: str | Path | None = None, overrides: list[str] | None = None) -> M:
    """Load and validate a config: defaults, then the YAML file, then the overrides."""
    data: dict[str, Any] = {}
    if path is not None:
        path = Path(path)
        if not path.exists():
            raise ConfigError(
                f"config file {path} does not exist: pass an existing YAML file, e.g. configs/quickstart.yaml"
            )
        if not path.is_file():
            raise ConfigError(f"config path {path} is not a file: pass a YAML file, e.g. configs/quickstart.yaml")
        try:
            data = read_yaml(path, f"config file {path}") or {}
        except UnicodeDecodeError:
            raise ConfigError(f"config file {path} is not UTF-8 text: pass a YAML file") from None
        except yaml.YAMLError as exc:
            raise ConfigError(f"config file {path} is not valid YAML: {str(exc).splitlines()[0]}") from None
        if not isinstance(data, dict):
            raise ConfigError(f"config file {path} must hold a mapping of keys to values")
    data = apply_overrides(data, overrides or [], model)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(explain(exc, model)) from None


def config_hash(config: BaseModel) -> str:
    """A short stable hash of the validated config."""
    canonical = json.dumps(config.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:12]


def flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts as one dict of dotted keys (`train.lr`), leaves as they are."""
    if isinstance(obj, dict):
        out: dict[str, Any] = {}
        for key, value in obj.items():
            out.update(flatten(value, f"{prefix}{key}."))
        return out
    return {prefix.rstrip("."): obj}
