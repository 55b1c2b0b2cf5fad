"""The proving loop SIGKILLed mid-search, resumed, SIGKILLed again mid-training, resumed, ends like an uninterrupted
run; a prover session killed mid-search is replaced and no theorem of its shard is lost."""

from __future__ import annotations

import copy
import os
import signal
import threading
import time
from pathlib import Path

import pytest
import yaml

from aitp.checkpoints import CheckpointError, verify_checkpoint
from aitp.lake import committed_shards, connect, read_iteration
from aitp.train.checkpoint import checkpoint_dir
from tests.loop.helpers import env, run_aitp, run_and_kill
from tests.loop.test_proving import PROVE

EXPERIMENT = PROVE["experiment"]
TABLES = ("items", "proof_nodes", "proof_edges", "proofs", "evals", "eval_samples", "iterations")


@pytest.fixture(scope="module")
def prove_config(bool_theorems, tmp_path_factory) -> Path:
    """Iterations 0 (untrained) and 1: a search of two chunks of 3 theorems (a kill can fall between them), 40 epochs
    so training lasts a moment, 3 valid theorems (the evaluation only has to run, and end the same)."""
    data = copy.deepcopy(PROVE)
    data["iterations"] = 1
    data["fanout"] = {"chunk_items": 3, "workers": 1}
    data["environment"].update(theorems=str(bool_theorems), epochs=40, valid_theorems=3)
    path = tmp_path_factory.mktemp("prove-config") / "prove.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _args(config: Path, home: Path) -> list[str]:
    return ["run", "--config", str(config), "--home", str(home), "--no-report"]


def _resume(home: Path, prefect_server: str) -> None:
    done = run_aitp(["run", "--resume", EXPERIMENT, "--home", str(home), "--no-report"], env(prefect_server))
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture(scope="module")
def clean_run(prove_config, prefect_server, tmp_path_factory) -> Path:
    home = tmp_path_factory.mktemp("prove-clean") / "home"
    done = run_aitp(_args(prove_config, home), env(prefect_server))
    assert done.returncode == 0, done.stdout + done.stderr
    return home


def _counts(home: Path) -> dict[str, int]:
    con = connect(home)
    try:
        return {
            t: con.execute(f"SELECT count(*) FROM {t} WHERE experiment = $e", {"e": EXPERIMENT}).fetchone()[0]
            for t in TABLES
        }
    finally:
        con.close()


def _ended(home: Path) -> tuple:
    """How a run ended, bit for bit: rows per table, committed shards, the iteration rows' content, the champion.

    Model ids are content ids, so equal ids mean the resumed run searched, trained and evaluated to the same
    weights and figures as the uninterrupted one.
    """
    from aitp.registry import Registry

    con = connect(home)
    try:
        rows = con.execute(
            "SELECT iteration, status, config_hash, model_in, model_out, promoted, promote_reason, champion_version, "
            "champion_model, eval_pass_rate, champion_pass_rate, kept_group_rate FROM iterations "
            "WHERE experiment = $e ORDER BY iteration",
            {"e": EXPERIMENT},
        ).fetchall()
    finally:
        con.close()
    shards = {t: [committed_shards(home, t, EXPERIMENT, k) for k in (0, 1)] for t in TABLES}
    champion = Registry(home).get(EXPERIMENT, "champion")
    return _counts(home), shards, rows, (champion.version, champion.model_version)


def _chunks(home: Path) -> list[str]:
    """The search chunks of iteration 1 committed so far (its eval commits proofs too, under another name)."""
    return [s for s in committed_shards(home, "proofs", EXPERIMENT, 1) if s.startswith("chunk-")]


@pytest.mark.slow  # a whole run killed and resumed (> 30 s): run on purpose with -m slow
def test_killed_mid_search_then_again_mid_training_then_resumed(clean_run, prove_config, prefect_server, tmp_path):
    """Two kills of one experiment: the run between the search's chunk commits, the resumed run while it trains.

    One run carries both faults (a resume that is killed again) so that iteration 0 and the search before the
    first kill run once, not once per fault; each kill point is asserted, and the end is bit-exact.
    """
    home = tmp_path / "home"

    def mid_search() -> bool:  # one of iteration 1's two chunks committed
        return (home / "lake").exists() and len(_chunks(home)) >= 1

    run_and_kill(_args(prove_config, home), env(prefect_server), mid_search)
    assert len(_chunks(home)) == 1

    started: list[float] = []

    def mid_training() -> bool:  # iteration 1 recorded its search and went on to train
        if started:
            return time.monotonic() - started[0] > 0.3
        if len(_chunks(home)) < 2:
            return False  # a listing (1 ms), not a read (6 ms of the 2 cores the run needs), until the search ends
        row = read_iteration(home, EXPERIMENT, 1)
        if row and row.get("stage") == "rollouts":
            started.append(time.monotonic())
        return False

    resume = ["run", "--resume", EXPERIMENT, "--home", str(home), "--no-report"]
    run_and_kill(resume, env(prefect_server), mid_training)
    with pytest.raises(CheckpointError):  # killed before the checkpoint was published
        verify_checkpoint(checkpoint_dir(home, EXPERIMENT, 1))
    _resume(home, prefect_server)
    assert _ended(home) == _ended(clean_run)


def test_a_prover_killed_mid_search_loses_no_theorem_and_is_reported(bool_theorems, capsys):
    from aitp.proving.backends import open_env
    from aitp.proving.data.theorems import load_theorem_set
    from aitp.proving.learning import search_theorems
    from aitp.proving.models.prover_models import ProverModels
    from aitp.proving.search import Budget, SearchConfig, make_search

    library = load_theorem_set(str(bool_theorems))
    theorems = library.split("train")
    search = make_search("bestfs", SearchConfig(budget=Budget(4, 60, 120), tactics_per_goal=8, tactic_timeout=2.0))
    with open_env("coq", tactic_timeout=2.0) as prover:
        prover.set_premises(library.premise_map())
        killed: list[int] = []

        def kill_once_busy() -> None:  # SIGKILL the live coqtop while the search is under way (a real crash)
            while not killed:
                coq = getattr(prover, "_coq", None)
                if coq is not None and coq.proc.poll() is None and prover.crashes == 0:
                    time.sleep(0.05)  # early enough that the search still has theorems left to send it
                    os.killpg(coq.proc.pid, signal.SIGKILL)
                    killed.append(coq.proc.pid)
                time.sleep(0.01)

        killer = threading.Thread(target=kill_once_busy, daemon=True)
        killer.start()
        outcome = search_theorems(prover, theorems, search, ProverModels.untrained("coq", library).policy(library))
        killer.join(timeout=5)
    assert killed and prover.crashes >= 1  # the session died mid-search and was replaced
    assert [a.theorem for a in outcome.attempts] == [t.name for t in theorems]  # every theorem searched or failed
    roots = {r["theorem_id"] for r in outcome.rows["proof_nodes"] if r["is_root"]}
    assert roots == {f"coq:{t.name}" for t in theorems}
    # Reported: one line naming the prover and the theorem, counted per theorem in the results and the lake's rows.
    died = [a for a in outcome.attempts if a.restarts]
    assert sum(a.restarts for a in outcome.attempts) == prover.crashes == outcome.summary()["prover_restarts"]
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning: the coq prover died")]
    assert [line.split(" while searching ")[1].split(";")[0] for line in lines] == [a.theorem for a in died]
    restarts = {r["theorem_id"]: r["prover_restarts"] for r in outcome.rows["proof_nodes"] if r["is_root"]}
    assert restarts == {f"coq:{a.theorem}": a.restarts for a in outcome.attempts}
    assert all(r["prover_restarts"] is None for r in outcome.rows["proof_nodes"] if not r["is_root"])
