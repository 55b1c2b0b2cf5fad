"""`aitp train`, `aitp eval`, `aitp promote` on their own, each on the lake and registry of `--home`."""

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from aitp.registry import Registry
from tests.train.helpers import SYSTEM, rollout_rows, tiny_base, write_items, write_rollouts

REPO = Path(__file__).resolve().parents[2]


def cli(*args: str):
    from typer.testing import CliRunner

    from aitp.cli import app

    return CliRunner().invoke(app, list(args))


pytestmark = pytest.mark.usefixtures("one_thread")


def test_train_eval_promote_and_rollback_from_the_shell(tmp_path):
    home = str(tmp_path)
    items = write_items(tmp_path, "c", 0, 8)
    write_rollouts(tmp_path, "c", 0, rollout_rows(items, [[1.0, 0.0]] * 8))
    base = tiny_base(tmp_path / "base")
    eval_config = tmp_path / "eval.yaml"
    eval_config.write_text(
        yaml.safe_dump({"tasks": ["basic_arithmetic"], "n_per_task": 3, "max_tokens": 6, "system_prompt": SYSTEM})
    )
    common = ["--experiment", "c", "--home", home]

    trained = cli(
        "train",
        *common,
        "--iteration",
        "0",
        "--base",
        str(base),
        "--set",
        "steps=2",
        "--set",
        "batch_size=4",
        "--set",
        "max_len=96",
    )
    assert trained.exit_code == 0, trained.output
    assert "registered aitp-c version 1" in trained.output

    evaluated = cli("eval", *common, "--iteration", "0", "--version", "challenger", "--config", str(eval_config))
    assert evaluated.exit_code == 0, evaluated.output
    assert "basic_arithmetic\t-\t3\t" in evaluated.output and "overall" in evaluated.output

    first = cli("promote", *common, "--iteration", "0", "--eval-config", str(eval_config))
    assert first.exit_code == 0, first.output
    assert "first model" in first.output and "champion=v1" in first.output

    second = cli(
        "train",
        *common,
        "--iteration",
        "0",
        "--base",
        str(base),
        "--set",
        "steps=1",
        "--set",
        "batch_size=4",
        "--set",
        "max_len=96",
        "--out",
        str(tmp_path / "again"),
    )
    assert second.exit_code == 0, second.output
    tie = cli("promote", *common, "--iteration", "0", "--eval-config", str(eval_config), "--margin", "0.05")
    assert tie.exit_code == 0 and "kept champion" in tie.output  # both fail every item: no gain
    assert Registry(tmp_path).aliases("c") == {"challenger": "2", "champion": "1"}

    no_previous = cli("promote", *common, "--rollback")
    assert "no previous champion" in str(no_previous.exception)


def test_errors_are_one_line_and_exit_non_zero(tmp_path):
    env = {"MLFLOW_TRACKING_URI": "http://127.0.0.1:9", "PATH": "/usr/bin:/bin", "AITP_HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "aitp", "promote", "--experiment", "x"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert lines[-1].startswith("error: MLflow tracking server http://127.0.0.1:9 is unreachable"), done.stderr
    missing = cli(
        "eval",
        "--experiment",
        "x",
        "--iteration",
        "0",
        "--checkpoint",
        str(tmp_path / "nope"),
        "--home",
        str(tmp_path),
        "--no-track",
    )
    assert "does not exist" in str(missing.exception)
