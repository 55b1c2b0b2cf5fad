"""Two processes on the CPU (gloo): ZeRO-3 with DeepSpeed's real engine clips by the fused norm to DeepSpeed's own
steps, and compiled by block with the fused head takes ZeRO-2's (both skipped without DeepSpeed, the `gpu` extra);
the SIGTERM check read one step late stops both processes together."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LAUNCH = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
ENV = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    "CUDA_VISIBLE_DEVICES": "",  # the CPU and gloo, also on a GPU machine
}


def two_processes(script: str) -> subprocess.CompletedProcess:
    """`script` (beside this file) run in two processes; their output, once both succeeded."""
    done = subprocess.run(
        [*LAUNCH, str(REPO / "tests" / "train" / script)], env=ENV, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def test_two_processes_clip_by_the_fused_norm_to_deepspeed_s_steps():
    pytest.importorskip("deepspeed")
    done = two_processes("zero_two_processes.py")
    assert done.stdout.count("agree with DeepSpeed's") == 2, done.stdout[-3000:]


def test_zero3_compiled_by_block_with_the_fused_head_takes_zero2_s_steps():
    """Each block one graph gathering its weights, the head's weight (untied) gathered as the head's graph runs."""
    pytest.importorskip("deepspeed")
    done = two_processes("blocks_two_processes.py")
    assert done.stdout.count("took ZeRO-2's steps") == 2, done.stdout[-3000:]


def test_a_sigterm_read_one_step_late_stops_every_process_at_the_same_step():
    """Lightning's signal handler sets `received_sigterm`; process 0's flag is what every process obeys."""
    done = two_processes("sigterm_two_processes.py")
    stops = sorted(re.findall(r"process (\d) stopped at step (\d+|None)", done.stdout))  # lines may interleave
    assert stops == [("0", "4"), ("1", "4")], done.stdout[-3000:]


def test_the_check_read_one_step_late_is_installed_on_cuda_only():
    """A CPU fit keeps Lightning's own check (its host waits for nothing); CUDA has it replaced."""
    import types

    import torch

    from aitp.train.sigterm import ReadSigtermOneStepLate, SigtermOneStepLate

    def fit_on(device: str):
        loop = types.SimpleNamespace(_broadcast_sigterm_tensor=lambda: None)
        strategy = types.SimpleNamespace(root_device=torch.device(device))
        return types.SimpleNamespace(fit_loop=types.SimpleNamespace(epoch_loop=loop), strategy=strategy)

    from lightning.pytorch.loops.training_epoch_loop import _TrainingEpochLoop

    assert callable(_TrainingEpochLoop._broadcast_sigterm_tensor)  # the Lightning in use has the check replaced
    cpu, cuda = fit_on("cpu"), fit_on("cuda")
    callback = ReadSigtermOneStepLate()
    callback.setup(cpu, None, "fit")
    assert not callback.installed and not isinstance(
        cpu.fit_loop.epoch_loop._broadcast_sigterm_tensor, SigtermOneStepLate
    )
    callback.setup(cuda, None, "fit")
    assert callback.installed and isinstance(cuda.fit_loop.epoch_loop._broadcast_sigterm_tensor, SigtermOneStepLate)
