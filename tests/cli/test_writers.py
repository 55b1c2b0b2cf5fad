"""Every writer command takes its writer lock: while a real other process holds it, the command is refused in one
line naming the holder and writes nothing; once the holder lets go, it does its work. Readers are never blocked."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from aitp.lake import write_partition
from aitp.registry import CHAMPION, PREVIOUS, Registry
from tests.lake.helpers import rollout_rows
from tests.loop.helpers import REPO, env, lock_held
from tests.train.helpers import SYSTEM, tiny_base


def _aitp(home: Path, *args: str) -> subprocess.CompletedProcess:
    """`aitp ARGS --home HOME` as a real process of its own."""
    command = [sys.executable, "-m", "aitp", *args, "--home", str(home)]
    return subprocess.run(command, cwd=REPO, env=env(), capture_output=True, text=True, timeout=300)


def _refused(done: subprocess.CompletedProcess, holder: subprocess.Popen, what: str) -> None:
    lines = done.stderr.strip().splitlines()
    assert done.returncode != 0 and len(lines) == 1, done.stdout + done.stderr
    assert lines[0].startswith(f"error: {what} ") and f"is already being written by PID {holder.pid} " in lines[0]
    assert f"kill {holder.pid} and try again" in lines[0]


def test_promote_and_rollback_are_refused_while_a_run_holds_the_experiment(tmp_path):
    home = tmp_path / "home"
    registry = Registry(home)
    v1 = registry.register("e", 0, tiny_base(tmp_path / "v1", seed=0))
    v2 = registry.register("e", 1, tiny_base(tmp_path / "v2", seed=1))
    registry.set_alias("e", PREVIOUS, v1.version)
    registry.set_alias("e", CHAMPION, v2.version)
    before = registry.aliases("e")
    evals = tmp_path / "eval.yaml"
    evals.write_text(
        yaml.safe_dump({"tasks": ["basic_arithmetic"], "n_per_task": 2, "max_tokens": 4, "system_prompt": SYSTEM})
    )
    promote = ["promote", "--experiment", "e", "--eval-config", str(evals)]

    with lock_held(home, "e") as run:
        _refused(_aitp(home, "promote", "--experiment", "e", "--rollback"), run, f"experiment 'e' in {home}")
        _refused(_aitp(home, *promote), run, f"experiment 'e' in {home}")
        assert run.poll() is None, "the holder ended before the commands were refused: nothing was tested"
        assert Registry(home).aliases("e") == before  # no alias moved

    back = _aitp(home, "promote", "--experiment", "e", "--rollback")
    assert back.returncode == 0 and "rolled back: champion v2 -> v1" in back.stdout, back.stdout + back.stderr
    judged = _aitp(home, *promote)  # the challenger (v2) judged against the restored champion (v1)
    assert judged.returncode == 0 and "aliases: challenger=v2, champion=v1" in judged.stdout, judged.stderr


def test_lake_repair_vacuum_and_rescore_are_refused_while_a_writer_works_and_readers_are_not(tmp_path):
    home = tmp_path / "home"
    write_partition(home, "rollouts", "e", 0, rollout_rows(2, 2))
    (replaced,) = write_partition(home, "rollouts", "e", 0, rollout_rows(3, 2)).superseded  # for vacuum to delete
    orphan = home / "lake/rollouts/experiment=e/iteration=0/0.stray.parquet"  # for a repair to quarantine
    orphan.write_bytes(b"PAR1")
    repair = ["lake", "check", "--repair", "--grace-seconds", "0"]
    vacuum = ["lake", "vacuum", "--older-than-seconds", "0"]

    with lock_held(home, "e") as run:  # a run of experiment e
        for writer in (repair, vacuum, ["rescore", "--experiment", "e"]):
            _refused(_aitp(home, *writer), run, f"experiment 'e' in {home}")
        check = _aitp(home, "lake", "check", "--grace-seconds", "0")  # readers go on
        assert check.returncode == 1 and check.stdout.startswith(f"orphan\t{orphan}\t"), check.stderr
        assert _aitp(home, "sql", "SELECT count(*) FROM rollouts", "--format", "csv").stdout.splitlines()[-1] == "6"
        assert run.poll() is None, "the holder ended before the commands were refused: nothing was tested"
    with lock_held(home) as other_repair:  # a home-wide writer blocks every experiment's writers too
        _refused(_aitp(home, *vacuum), other_repair, f"home {home}")
    assert orphan.exists() and Path(replaced).exists() and not (home / "lake/_quarantine").exists()

    repaired = _aitp(home, *repair)
    assert repaired.returncode == 0 and f"orphan\t{orphan}\t" in repaired.stdout, repaired.stderr
    assert not orphan.exists() and (home / "lake/_quarantine").exists()
    vacuumed = _aitp(home, *vacuum)
    assert vacuumed.returncode == 0 and f"deleted\t{replaced}" in vacuumed.stdout, vacuumed.stderr
    rescored = _aitp(home, "rescore", "--experiment", "e")
    assert rescored.returncode == 0 and "originals untouched" in rescored.stdout, rescored.stderr


def test_train_and_eval_are_refused_while_a_run_holds_the_experiment(tmp_path):
    """`aitp train` writes the experiment's checkpoints and moves `challenger`; `aitp eval` commits its `evals`
    rows: both wait for no one and are refused while a run writes the experiment, and run once it is gone."""
    home = tmp_path / "home"
    base = tiny_base(tmp_path / "base", seed=0)
    evals = tmp_path / "eval.yaml"
    evals.write_text(
        yaml.safe_dump({"tasks": ["basic_arithmetic"], "n_per_task": 2, "max_tokens": 4, "system_prompt": SYSTEM})
    )
    evaluate = ["eval", "--experiment", "e", "--iteration", "0", "--checkpoint", str(base), "--config", str(evals)]
    train = ["train", "--experiment", "e", "--iteration", "0", "--base", str(base), "--no-register"]

    with lock_held(home, "e") as run:
        _refused(_aitp(home, *evaluate, "--no-track"), run, f"experiment 'e' in {home}")
        _refused(_aitp(home, *train), run, f"experiment 'e' in {home}")
        assert run.poll() is None, "the holder ended before the commands were refused: nothing was tested"
    assert not (home / "lake" / "evals").exists() and not (home / "checkpoints").exists()  # nothing written

    done = _aitp(home, *evaluate, "--no-track")
    assert done.returncode == 0 and "overall" in done.stdout, done.stdout + done.stderr
