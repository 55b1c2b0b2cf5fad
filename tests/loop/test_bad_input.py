"""Bad input to `aitp run` / `aitp services up`: one line on stderr, exit 2, nothing started or half-written."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from aitp.loop import LoopConfig, open_experiment
from tests.loop.helpers import MINI, env, run_aitp, write_config


def _fails(args: list[str], *needles: str) -> str:
    done = run_aitp(args, env(), timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def _untouched(home: Path) -> None:
    assert not (home / "lake").exists() and not (home / "prefect").exists() and not (home / "mlflow.db").exists()


def test_unknown_key_is_named(tmp_path):
    config = write_config(tmp_path / "c.yaml")
    _fails(
        ["run", "--config", str(config), "--home", str(tmp_path), "--set", "environment.self_train.stepz=3"],
        "environment.self_train.stepz",
    )
    _untouched(tmp_path)


def test_bad_value_names_key_and_allowed_values(tmp_path):
    config = write_config(tmp_path / "c.yaml")
    line = _fails(
        ["run", "--config", str(config), "--home", str(tmp_path), "--set", "environment.self_train.objective=ppo"]
    )
    assert "environment.self_train.objective" in line and "'sft'" in line and "'dpo'" in line
    _untouched(tmp_path)


def test_unknown_key_in_file(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text(json.dumps({**MINI, "rollout": {"group_size": 4}}))
    _fails(["run", "--config", str(config), "--home", str(tmp_path)], "rollout")
    _untouched(tmp_path)


def test_changed_config_needs_new_version(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    open_experiment(home, LoopConfig.model_validate(MINI))
    record = (home / "experiments" / "mini" / "config.json").read_text()
    config = write_config(tmp_path / "c.yaml")
    _fails(
        ["run", "--config", str(config), "--home", str(home), "--set", "environment.self_train.lr=0.01"],
        "mini",
        "environment.self_train.lr",
        "--new-version",
    )
    assert (home / "experiments" / "mini" / "config.json").read_text() == record
    assert not (home / "lake").exists()


def test_resume_of_unknown_experiment_lists_known(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    open_experiment(home, LoopConfig.model_validate(MINI))
    _fails(["run", "--resume", "nope", "--home", str(home)], "nope", "mini")


def test_home_that_is_not_writable(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    _fails(["run", "--home", str(blocker / "home")], "not writable", "--home")


@pytest.mark.parametrize("option", ["--prefect-port", "--mlflow-port"])
def test_port_already_taken(tmp_path, option):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        _fails(["services", "up", "--home", str(tmp_path), option, str(port)], str(port), option)
    assert not (tmp_path / "services.json").exists()
    assert not (tmp_path / "prefect").exists()


def test_keys_of_an_optional_section_can_be_set_and_unknown_ones_are_named():
    from aitp.configs import ConfigError, apply_overrides
    from aitp.loop import LoopConfig

    data = apply_overrides({}, ["environment.train_slice=7", "environment.generator.human_steps=true"], LoopConfig)
    assert data == {"environment": {"train_slice": 7, "generator": {"human_steps": True}}}
    with pytest.raises(ConfigError, match="environment.train_slize"):
        apply_overrides({}, ["environment.train_slize=7"], LoopConfig)
