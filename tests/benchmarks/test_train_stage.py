"""The training-stage benchmark fits a config's iteration training twice in one process and times each by phase."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_two_fits_of_the_quickstart_s_self_training_are_timed_by_phase(tmp_path):
    out = tmp_path / "stage.json"
    args = ["--config", "configs/quickstart.yaml", "--per-task", "8", "--fits", "2", "--steps", "3", "--json", str(out)]
    done = subprocess.run(
        [sys.executable, "benchmarks/train_stage.py", *args], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    fits = json.loads(out.read_text())["fits"]
    assert [f["meta"]["fit"] for f in fits] == [0, 1] and all(f["steps"] == 3 and f["tokens"] > 0 for f in fits)
    assert all(list(f["phases"]) == ["load_s", "setup_s", "steps_s", "teardown_s", "save_s"] for f in fits)
    # the quickstart's three tasks, eight demonstrations each
    assert fits[0]["examples"] == 24 and "tokens/s over the steps" in done.stdout
