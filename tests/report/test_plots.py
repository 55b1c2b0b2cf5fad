"""The plotted table equals what the lake holds, and the PNG is a real image of the expected size."""

import struct

import pytest

from aitp.report import OVERALL, UnknownExperimentError, iteration_table, plot_iterations
from aitp.report.plots import DPI, FIGSIZE
from tests.report.lake_rows import EXPERIMENT, TASKS, build_lake, kept_rate


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def _expected_rate(evals: dict, model: str, task: str) -> float:
    rows = [r for rs in evals.values() for r in rs if r["model_version"] == model and task in (OVERALL, r["task"])]
    return sum(r["n_pass"] for r in rows) / sum(r["n_samples"] for r in rows)


def test_table_has_a_row_per_iteration_and_task(lake):
    home, _ = lake
    table = iteration_table(home, EXPERIMENT)
    assert [(r["iteration"], r["task"]) for r in table] == [(k, t) for k in range(3) for t in (*TASKS, OVERALL)]


def test_pass_rates_come_from_each_models_evals(lake):
    home, written = lake
    for r in iteration_table(home, EXPERIMENT):
        row = written["iterations"][r["iteration"]]
        assert r["champion_model"] == row["champion_model"] and r["model_out"] == row["model_out"]
        assert r["champion_pass_rate"] == pytest.approx(
            _expected_rate(written["evals"], row["champion_model"], r["task"])
        )
        assert r["challenger_pass_rate"] == pytest.approx(_expected_rate(written["evals"], row["model_out"], r["task"]))


def test_champion_kept_after_a_rejection_keeps_its_old_numbers(lake):
    home, written = lake
    rows = {(r["iteration"], r["task"]): r for r in iteration_table(home, EXPERIMENT)}
    assert written["iterations"][1]["promoted"] is False
    assert rows[(1, OVERALL)]["champion_pass_rate"] == rows[(0, OVERALL)]["challenger_pass_rate"]
    assert rows[(1, OVERALL)]["champion_pass_rate"] != rows[(1, OVERALL)]["challenger_pass_rate"]


def test_kept_group_rate_missing_without_rollouts_else_from_row_or_rollouts(lake):
    home, written = lake
    kept = {r["iteration"]: r["kept_group_rate"] for r in iteration_table(home, EXPERIMENT)}
    assert kept[0] is None
    assert written["iterations"][1]["kept_group_rate"] is None  # computed from the rollouts
    assert kept[1] == pytest.approx(kept_rate(written["rollouts"][1]))
    assert kept[2] == pytest.approx(written["iterations"][2]["kept_group_rate"])
    assert kept[1] != kept[2]


def test_png_is_an_image_of_the_figure_size(lake, tmp_path):
    home, _ = lake
    out = plot_iterations(home, EXPERIMENT, tmp_path / "plots" / "exp.png")
    assert out == tmp_path / "plots" / "exp.png"
    assert _png_size(out.read_bytes()) == (int(FIGSIZE[0] * DPI), int(FIGSIZE[1] * DPI))
    assert [p.name for p in out.parent.iterdir()] == ["exp.png"]  # no temporary file left


def test_one_iteration_without_rollouts_plots(tmp_path):
    build_lake(tmp_path, iterations=1)
    table = iteration_table(tmp_path, EXPERIMENT)
    assert {r["iteration"] for r in table} == {0} and all(r["kept_group_rate"] is None for r in table)
    out = plot_iterations(tmp_path, EXPERIMENT, tmp_path / "one.png")
    assert _png_size(out.read_bytes()) == (int(FIGSIZE[0] * DPI), int(FIGSIZE[1] * DPI))


def test_unknown_experiment_names_the_known_ones(lake, tmp_path):
    home, _ = lake
    with pytest.raises(UnknownExperimentError, match=f"use one of {EXPERIMENT}$"):
        plot_iterations(home, "nope", tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()
