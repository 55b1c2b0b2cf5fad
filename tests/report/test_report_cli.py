"""`aitp report` through the typer app: prints the path it wrote; a wrong experiment fails in one line."""

from pathlib import Path

from typer.testing import CliRunner

from aitp.cli import app  # importing the package registers every command
from aitp.report import UnknownExperimentError
from tests.report.lake_rows import EXPERIMENT


def _invoke(*args: str):
    return CliRunner().invoke(app, ["report", *args])


def test_default_out_is_under_home_reports(lake):
    home, _ = lake
    result = _invoke("--experiment", EXPERIMENT, "--home", str(home))
    assert result.exit_code == 0, result.output
    path = Path(result.stdout.strip())
    assert path == home.resolve() / "reports" / f"{EXPERIMENT}.html"
    assert path.read_text().startswith("<!DOCTYPE html>")


def test_out_option(lake, tmp_path):
    home, _ = lake
    result = _invoke("--experiment", EXPERIMENT, "--home", str(home), "--out", str(tmp_path / "r.html"))
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == str(tmp_path / "r.html") and (tmp_path / "r.html").is_file()


def test_unreachable_registry_leaves_aliases_out(lake, tmp_path):
    home, _ = lake
    out = tmp_path / "r.html"
    args = ["--experiment", EXPERIMENT, "--home", str(home), "--out", str(out), "--tracking-uri", "http://127.0.0.1:9"]
    result = _invoke(*args)
    assert result.exit_code == 0, result.output
    assert "registry aliases left out" in result.stderr and "registry aliases" not in out.read_text()


def test_unknown_experiment_is_one_line_naming_known_ones(lake, tmp_path):
    home, _ = lake
    result = _invoke("--experiment", "nope", "--home", str(home), "--out", str(tmp_path / "r.html"))
    assert isinstance(result.exception, UnknownExperimentError)
    message = str(result.exception)
    assert "\n" not in message and "'nope'" in message and message.endswith(f"use one of {EXPERIMENT}")
    assert not (tmp_path / "r.html").exists()


def test_empty_home_says_to_run_the_loop(tmp_path):
    result = _invoke("--experiment", "nope", "--home", str(tmp_path))
    assert isinstance(result.exception, UnknownExperimentError)
    assert "no experiment has iterations" in str(result.exception)
    assert not (tmp_path / "reports").exists()
