"""The HTML report: one file that opens offline, escapes model output, and covers every iteration."""

import base64
import re
from html import escape

import pytest

from aitp.report import UnknownExperimentError, write_report
from aitp.report.plots import DPI, FIGSIZE
from tests.report.lake_rows import EXPERIMENT, SCRIPT, TASKS, build_lake
from tests.report.test_plots import _png_size


@pytest.fixture(scope="module")
def page(lake, tmp_path_factory):
    home, _ = lake
    out = tmp_path_factory.mktemp("out") / "deep" / "report.html"
    assert write_report(home, EXPERIMENT, out, registry_aliases={"champion": "3", "previous-champion": "1"}) == out
    return out.read_text(encoding="utf-8")


def test_self_contained(page):
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", page, re.IGNORECASE)
    assert "<script" not in page.lower() and "<link" not in page.lower()
    png = re.search(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert png and _png_size(base64.b64decode(png.group(1))) == (int(FIGSIZE[0] * DPI), int(FIGSIZE[1] * DPI))


def test_completion_markup_is_escaped(page):
    assert SCRIPT not in page
    assert escape(SCRIPT) in page


def test_every_iteration_and_its_runs_appear(page, lake):
    _, written = lake
    for k, row in written["iterations"].items():
        for key in ("flow_run_name", "flow_run_id", "mlflow_run_id", "promote_reason"):
            assert escape(row[key]) in page, (k, key)
        assert f"<th>iter {k}</th>" in page and f"iteration {k}:" in page


def test_header_tasks_samples_and_aliases(page, lake):
    _, written = lake
    assert "cfg0" in page and "0.1.0+abc" in page and "2h 50m 00s" in page
    assert "champion → v3" in page and "previous-champion → v1" in page
    assert "Sample rollouts (iteration 2)" in page  # the latest iteration with rollouts
    for task in TASKS:
        assert f"<h3>{task}</h3>" in page
    assert "<span class=kept>kept</span>" in page and "<span class=dropped>dropped</span>" in page


def test_one_iteration_without_rollouts(tmp_path):
    build_lake(tmp_path, iterations=1)
    page = write_report(tmp_path, EXPERIMENT, tmp_path / "r.html").read_text()
    assert "No rollouts in the lake" in page and "iteration 0:" in page


def test_unknown_experiment_writes_nothing(lake, tmp_path):
    home, _ = lake
    with pytest.raises(UnknownExperimentError):
        write_report(home, "nope", tmp_path / "r.html")
    assert list(tmp_path.iterdir()) == []
