"""train_after_eval: a user's command writes a checkpoint from the lake; it is picked up and validated."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from aitp.proving.models.external_training import TrainCommand, TrainCommandError, train_after_eval, update_checkpoints
from aitp.proving.models.prover_models import load_prover_models

RETRAIN = [
    sys.executable,
    "-m",
    "aitp.proving.retrain",
    "--home",
    "{home}",
    "--experiment",
    "{experiment}",
    "--iteration",
    "{iteration}",
    "--out",
    "{out}",
    "--epochs",
    "2",
]


def test_an_external_command_trains_a_checkpoint_that_is_picked_up(coq_trace_lake, coq_theorem_home, tmp_path):
    home, library, *_ = coq_trace_lake
    command = TrainCommand(RETRAIN + ["--theorem-home", str(coq_theorem_home)], timeout_s=300)
    run = train_after_eval(command, home, "e", 2, tmp_path / "iter-002")
    models = update_checkpoints(run, library)
    assert models.ranker.trained and models.record["data"]["proofs"] > 0
    assert len(models.version) == 12 and load_prover_models(run.out_dir, library).version == models.version
    assert '"version"' in run.log.read_text()  # its output is in the log, but nothing is read from it


def test_failures_of_the_command_are_typed_and_logged(coq_trace_lake, tmp_path):
    home, library, *_ = coq_trace_lake
    fails = TrainCommand([sys.executable, "-c", "import sys; print('boom'); sys.exit(3)"])
    with pytest.raises(TrainCommandError, match="status 3"):
        train_after_eval(fails, home, "e", 2, tmp_path / "a")
    assert "boom" in (tmp_path / "a.log").read_text()
    slow = TrainCommand([sys.executable, "-c", "import time; time.sleep(30)"], timeout_s=0.5)
    with pytest.raises(TrainCommandError, match="timed out"):
        train_after_eval(slow, home, "e", 2, tmp_path / "b")
    silent = train_after_eval(TrainCommand([sys.executable, "-c", "pass"]), home, "e", 2, tmp_path / "c")
    with pytest.raises(TrainCommandError, match="no valid prover checkpoint"):
        update_checkpoints(silent, library)
    with pytest.raises(TrainCommandError, match="unknown placeholder"):
        train_after_eval(TrainCommand(["echo", "{nope}"]), home, "e", 2, tmp_path / "d")
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "keep.txt").write_text("earlier work")
    with pytest.raises(TrainCommandError, match="not empty"):
        train_after_eval(TrainCommand(["true"]), home, "e", 2, tmp_path / "used")
    assert (tmp_path / "used" / "keep.txt").read_text() == "earlier work"


def test_a_corrupt_checkpoint_is_refused(coq_trace_lake, tmp_path):
    _, library, *_ = coq_trace_lake
    from aitp.checkpoints import RANKER_FILE, CheckpointError
    from aitp.proving.models.prover_models import ProverModels

    models = ProverModels.untrained("coq", library)
    version = models.save(tmp_path / "ckpt")
    assert load_prover_models(tmp_path / "ckpt", library).version == version
    models.record = {"train_seconds": 1.5}  # how it came to be does not change what it is
    assert models.save(tmp_path / "again") == version
    assert load_prover_models(tmp_path / "again", library).record == {"train_seconds": 1.5}
    np.save(tmp_path / "ckpt" / RANKER_FILE, np.zeros(7, np.float32))
    with pytest.raises(CheckpointError, match="unreadable"):
        load_prover_models(tmp_path / "ckpt", library)
