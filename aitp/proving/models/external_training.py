"""The seed's `train_after_eval` and `update_checkpoints`: a user's own training command, run after evaluation.

After an iteration's evaluation the loop may run a command the user configured (an argv list, never
a shell line) with the location of the new traces and a fresh output directory. Placeholders in
the argv — `{home}`, `{lake}`, `{experiment}`, `{iteration}`, `{out}` — are filled in, and the same
values are in the environment (`AITP_HOME`, `AITP_LAKE`, `AITP_EXPERIMENT`, `AITP_ITERATION`,
`AITP_OUTPUT_DIR`). Its stdout and stderr go to a log file. The checkpoint it writes into the
output directory is then loaded and validated like one of ours (`update_checkpoints`); nothing is
ever parsed from its logs.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from aitp.errors import AitpError
from aitp.proving.data.theorem_set import TheoremSet
from aitp.proving.models.prover_models import ProverModels, load_prover_models


class TrainCommandError(AitpError):
    """The user's training command failed, timed out, or wrote no valid checkpoint."""


@dataclass(frozen=True)
class TrainCommand:
    """A training command to run after each iteration's evaluation."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    timeout_s: float = 3600.0


@dataclass(frozen=True)
class TrainRun:
    """What the command did: where its checkpoint and log are, how long it took."""

    out_dir: Path
    log: Path
    seconds: float


def _values(home: Path, experiment: str, iteration: int, out_dir: Path) -> dict[str, str]:
    return {
        "home": str(home),
        "lake": str(home / "lake"),
        "experiment": experiment,
        "iteration": str(iteration),
        "out": str(out_dir),
    }


def train_after_eval(
    command: TrainCommand,
    home: str | Path,
    experiment: str,
    iteration: int,
    out_dir: str | Path,
    log: str | Path | None = None,
) -> TrainRun:
    """Run the user's command on the lake's traces up to `iteration`; it must write its checkpoint into `out_dir`."""
    if not command.argv:
        raise TrainCommandError("train_after_eval has an empty command: give the argv list of your training command")
    home, out_dir = Path(home).resolve(), Path(out_dir).resolve()
    if out_dir.exists() and any(out_dir.iterdir()):
        raise TrainCommandError(f"output directory {out_dir} is not empty: give a fresh directory per iteration")
    out_dir.mkdir(parents=True, exist_ok=True)
    log = Path(log) if log is not None else out_dir.parent / f"{out_dir.name}.log"
    values = _values(home, experiment, iteration, out_dir)
    try:
        argv = [arg.format(**values) for arg in command.argv]
    except (KeyError, IndexError) as exc:
        raise TrainCommandError(
            f"unknown placeholder {exc} in the training command: use "
            "{home} {lake} {experiment} {iteration} {out}"
        ) from exc
    env = os.environ | command.env | {f"AITP_{k.upper()}": v for k, v in values.items() if k != "out"}
    env["AITP_OUTPUT_DIR"] = values["out"]
    start = time.perf_counter()
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as sink:
        try:  # its own session, so a timeout kills everything it started
            proc = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        except OSError as exc:
            raise TrainCommandError(f"cannot start training command {argv[0]!r} ({exc}): check the path") from exc
        try:
            code = proc.wait(timeout=command.timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise TrainCommandError(
                f"training command timed out after {command.timeout_s:g} s (log: {log}): raise its timeout_s"
            ) from None
    if code != 0:
        raise TrainCommandError(f"training command exited with status {code}: see its log {log}")
    return TrainRun(out_dir, log, time.perf_counter() - start)


def update_checkpoints(run: TrainRun, library: TheoremSet) -> ProverModels:
    """Pick up and validate the checkpoint the command wrote (never parsed from its logs)."""
    try:
        return load_prover_models(run.out_dir, library)
    except AitpError as exc:
        raise TrainCommandError(f"training command wrote no valid prover checkpoint ({exc}); log: {run.log}") from exc
