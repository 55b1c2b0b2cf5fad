"""`aitp run` refuses a CUDA config on a machine without CUDA: one line, non-zero, nothing started or written."""

from __future__ import annotations

import pytest

from aitp.fanout.cluster import visible_gpus
from tests.loop.helpers import REPO, env, run_aitp


@pytest.mark.skipif(visible_gpus() > 0, reason="checks the refusal on a machine without CUDA")
def test_gpu_config_without_cuda_fails_before_anything_starts(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "keep.txt").write_text("was here")
    done = run_aitp(["run", "--config", str(REPO / "configs" / "gpu.yaml"), "--home", str(home)], env(), timeout=120)
    assert done.returncode != 0, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "no CUDA device" in lines[0] and "--set device=cpu" in lines[0], lines[0]
    assert "Prefect API" not in done.stdout  # no server was started
    assert sorted(p.relative_to(home).as_posix() for p in home.rglob("*")) == ["keep.txt"]


def test_the_live_display_prints_what_a_release_gave_back():
    import io

    from aitp.cli.run import LiveDisplay

    out = io.StringIO()
    show = LiveDisplay(out)
    show("released", {"iteration": 3, "text": "released 1 decoder engine(s) on 1 GPU worker(s): 8.5 GiB back"})
    show("stage", {"iteration": 3, "stage": "train", "state": "start"})  # a start prints nothing
    assert out.getvalue().count("\n") == 1
    assert out.getvalue().rstrip().endswith("iter  3  released 1 decoder engine(s) on 1 GPU worker(s): 8.5 GiB back")
