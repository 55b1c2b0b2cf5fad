"""The main job SIGKILLed during rollouts, resumed, SIGKILLed again during training, resumed: it ends like an
uninterrupted run."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from aitp.checkpoints import CheckpointError, verify_checkpoint
from aitp.lake import committed_shards, read_iteration
from aitp.loop.experiment import resume_config
from aitp.train.checkpoint import checkpoint_dir
from tests.loop.helpers import MINI, champion_weights, env, lake_counts, run_aitp, run_and_kill, weights_hash

pytestmark = pytest.mark.slow  # real processes: a Prefect server, killed workers or writers

CHUNKS = (
    len(MINI["environment"]["tasks"])
    * MINI["environment"]["rollouts"]["items_per_task"]
    // MINI["fanout"]["chunk_items"]
)


def _run_args(config: Path, home: Path) -> list[str]:
    return ["run", "--config", str(config), "--home", str(home), "--no-report"]


def _resume(home: Path, prefect_server: str) -> None:
    done = run_aitp(["run", "--resume", "mini", "--home", str(home), "--no-report"], env(prefect_server))
    assert done.returncode == 0, done.stdout + done.stderr


def _complete(path: Path) -> bool:
    try:
        verify_checkpoint(path)
        return True
    except CheckpointError:
        return False


def test_killed_during_rollouts_then_again_during_training_then_resumed(baseline, prefect_server, tmp_path):
    """Two kills of one experiment: the run between rollout chunk commits, the resumed run while it trains.

    One run carries both faults (a resume that is killed again) so that iteration 0 and the rollouts before
    the first kill run once, not once per fault; each kill point is asserted, and the end is bit-exact.
    """
    home0, config, _ = baseline
    home = tmp_path / "home"

    def mid_rollouts() -> bool:
        return (home / "lake").exists() and len(committed_shards(home, "rollouts", "mini", 1)) >= 1

    run_and_kill(_run_args(config, home), env(prefect_server), mid_rollouts)
    assert 1 <= len(committed_shards(home, "rollouts", "mini", 1)) < CHUNKS  # killed between chunk commits

    started: list[float] = []

    def mid_training() -> bool:  # iteration 1 recorded its rollouts and went on to train
        if started:
            return time.monotonic() - started[0] > 0.8
        if len(committed_shards(home, "rollouts", "mini", 1)) < CHUNKS:
            return False  # a listing (1 ms), not a read (6 ms of the 2 cores the run needs), until rollouts end
        row = read_iteration(home, resume_config(home, "mini").experiment, 1)
        if row and row.get("stage") == "rollouts":
            started.append(time.monotonic())
        return False

    run_and_kill(["run", "--resume", "mini", "--home", str(home), "--no-report"], env(prefect_server), mid_training)
    assert not _complete(checkpoint_dir(home, "mini", 1))  # killed before the checkpoint was published
    _resume(home, prefect_server)
    assert lake_counts(home, "mini") == lake_counts(home0, "mini")
    assert champion_weights(home, "mini") == champion_weights(home0, "mini")
    # bit-exact: the retrained iteration has the clean run's weights, and model ids are content ids
    retrained = [weights_hash(checkpoint_dir(h, "mini", 1)) for h in (home, home0)]
    assert retrained[0] == retrained[1]
    assert _model_ids(home) == _model_ids(home0)


def _model_ids(home: Path) -> list[tuple]:
    from aitp.lake import connect

    con = connect(home)
    try:
        return con.execute(
            "SELECT iteration, model_in, model_out, champion_model FROM iterations WHERE experiment = 'mini' "
            "ORDER BY iteration"
        ).fetchall()
    finally:
        con.close()
