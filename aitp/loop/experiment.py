"""An experiment: its pinned config record, and the run context every stage is handed.

`<home>/experiments/<name>/config.json` lists the config versions an experiment ran with. A run
under an existing name with the same config continues it; with another config it is refused
(naming the keys that changed) unless the caller asks for a new version, which then applies to
the iterations not yet finished. `LoopRun` carries the validated config (never re-read from a
file), its hash, the code version, the registry and the environment through every stage.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cached_property
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from aitp.atomic import publish_json
from aitp.configs import (
    SHIPPED_CONFIGS,
    ConfigError,
    apply_overrides,
    config_hash,
    error_key,
    explain,
    flatten,
    load_config,
)
from aitp.errors import AitpError, BadInputError, UnknownExperimentError
from aitp.loop.config import LoopConfig, from_flat_layout

DEFAULT_CONFIG = SHIPPED_CONFIGS / "quickstart.yaml"
"""The embedded default: the quickstart of the checkout aitp runs from."""


class ExperimentConfigError(AitpError):
    """An experiment started again with a config other than the one it ran with."""


def now() -> datetime:
    return datetime.now(UTC)


def code_version() -> str:
    """aitp's version plus the git commit of the checkout it runs from (`.dirty` with local changes)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        base = version("aitp")
    except PackageNotFoundError:
        base = "0"
    root = Path(__file__).resolve().parents[2]
    try:
        commit = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short=10", "HEAD"], capture_output=True, text=True, timeout=5
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=5,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return base
    return f"{base}+g{commit}{'.dirty' if dirty else ''}" if commit else base


@dataclass
class LoopRun:
    """One experiment under one home: its validated config, hash, code version, registry and environment."""

    home: Path
    config: LoopConfig
    config_hash: str = ""
    code_version: str = field(default_factory=code_version)
    tracking_uri: str | None = None

    def __post_init__(self) -> None:
        self.config_hash = self.config_hash or config_hash(self.config)

    @property
    def experiment(self) -> str:
        return self.config.experiment

    @cached_property
    def registry(self):
        from aitp.registry import Registry

        return Registry(self.home, self.tracking_uri)

    @cached_property
    def environment(self):
        """The environment of the config's world: reasoning-gym tasks or theorem proving."""
        return self.config.build_environment(self.home)

    @property
    def version(self) -> str:
        """The flow runs' version: code version plus config hash."""
        return f"{self.code_version}-{self.config_hash[:12]}"

    def flow_run_name(self, iteration: int) -> str:
        return f"{self.experiment}-iter-{iteration:03d}"


def _record_path(home: Path, experiment: str) -> Path:
    return home / "experiments" / experiment / "config.json"


def changed_keys(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Dotted keys whose values differ between two configs."""
    a, b = flatten(old), flatten(new)
    return sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))


def known_experiments(home: Path) -> list[str]:
    root = home / "experiments"
    return sorted(p.name for p in root.iterdir() if (p / "config.json").exists()) if root.exists() else []


def check_experiment(home: Path, config: LoopConfig, new_version: bool = False) -> dict[str, Any]:
    """The experiment's record; an error when it ran with another config and no new version is asked for."""
    path = _record_path(home, config.experiment)
    data = json.loads(path.read_text()) if path.exists() else {"experiment": config.experiment, "versions": []}
    versions = data["versions"]
    if versions and not _same_recipe(versions[-1], config) and not new_version:
        keys = changed_keys(versions[-1]["config"], config.model_dump(mode="json"))
        shown = ", ".join(keys[:5]) + (" …" if len(keys) > 5 else "")
        raise ExperimentConfigError(
            f"experiment '{config.experiment}' exists with another config (changed: {shown}): continue it with "
            f"`aitp run --resume {config.experiment}`, pick another experiment name, or pass --new-version"
        )
    return data


def _same_recipe(version: dict[str, Any], config: LoopConfig) -> bool:
    """Whether a recorded version ran this config: the same hash, or a record written in an older layout (before
    each world had its `environment` section) that validates to this config."""
    digest = config_hash(config)
    if version["hash"] == digest:
        return True
    try:
        return config_hash(LoopConfig.model_validate(version["config"])) == digest
    except ValidationError:
        return False


def open_experiment(
    home: Path, config: LoopConfig, new_version: bool = False, tracking_uri: str | None = None
) -> LoopRun:
    """Start or continue an experiment with this config; refuse a changed config without `new_version`."""
    data = check_experiment(home, config, new_version)
    digest, versions = config_hash(config), data["versions"]
    if not versions or versions[-1]["hash"] != digest:
        versions.append(
            {
                "version": len(versions) + 1,
                "hash": digest,
                "config": config.model_dump(mode="json"),
                "created_at": now().isoformat(),
            }
        )
        publish_json(_record_path(home, config.experiment), data)
    return LoopRun(home, config, digest, tracking_uri=tracking_uri)


def recorded_config(home: Path, experiment: str) -> dict[str, Any]:
    """The latest config an experiment ran with, as recorded (not validated)."""
    path = _record_path(home, experiment)
    if not path.exists():
        known = known_experiments(home)
        raise UnknownExperimentError(
            f"no experiment '{experiment}' under {home}: known are {', '.join(known) or 'none'} "
            "(start one with aitp run --config FILE, or pass the --home it ran under)"
        )
    try:
        return dict(json.loads(path.read_text(encoding="utf-8"))["versions"][-1]["config"])
    except (ValueError, LookupError, TypeError):
        raise ExperimentConfigError(
            f"the config record {path} of experiment '{experiment}' is unreadable: restore it from a backup, "
            "or start the experiment under another name with --config FILE"
        ) from None


def resume_config(home: Path, experiment: str, overrides: list[str] | None = None) -> LoopConfig:
    """The latest config an experiment ran with, with overrides, for `aitp run --resume` (one line if invalid)."""
    data = apply_overrides(from_flat_layout(recorded_config(home, experiment)), overrides or [], LoopConfig)
    try:
        return LoopConfig.model_validate(data)
    except ValidationError as exc:
        key = error_key(exc, LoopConfig)
        if any(o.split("=", 1)[0].strip() == key for o in overrides or []):
            raise ConfigError(explain(exc, LoopConfig)) from None
        raise ExperimentConfigError(  # recorded by an older aitp, or edited: the record is the user's to fix
            f"experiment '{experiment}' has a recorded config that no longer validates ({explain(exc, LoopConfig)}): "
            f"resume with --set {key}=VALUE --new-version, or start a new experiment with --config FILE"
        ) from None


def experiment_config(root: Path, config: str | None, overrides: list[str], resume: str | None) -> LoopConfig:
    """The config to run: a resumed experiment's (with overrides applied), else the file's, else the default."""
    if not resume:
        return load_config(LoopConfig, config or DEFAULT_CONFIG, overrides)
    if config:
        raise BadInputError("pass either --config FILE or --resume EXPERIMENT, not both")
    return resume_config(root, resume, overrides)
