"""ZeRO-3 over two processes on the CPU (gloo), DeepSpeed's real engine: the fused clipping norm that several
processes take is DeepSpeed's own norm. Skipped without DeepSpeed (the `gpu` extra)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def test_two_processes_clip_by_the_fused_norm_to_deepspeed_s_steps():
    pytest.importorskip("deepspeed")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    done = subprocess.run(
        [*command, str(REPO / "tests" / "train" / "zero_two_processes.py")],
        env={**env, "CUDA_VISIBLE_DEVICES": ""},  # the CPU and gloo, also on a GPU machine
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert done.stdout.count("agree with DeepSpeed's") == 2, done.stdout[-3000:]
