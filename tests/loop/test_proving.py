"""The prover environment in the loop engine: its config, the protocol, one in-process iteration on real Coq."""

from __future__ import annotations

import copy

import pytest

from aitp.configs import ConfigError, load_config
from aitp.lake import connect
from aitp.loop import Environment, LoopConfig, LoopRun, open_experiment, run_iteration
from aitp.loop.proving import ProverEnvironment
from aitp.loop.stats import champion_gain
from tests.loop.helpers import MINI, REPO

PROVE = {
    "experiment": "prove-mini",
    "seed": 0,
    "iterations": 1,
    "environment": "proving",
    "rollouts": {"chunk_items": 6, "workers": 1},
    "proving": {
        "train_slice": 6,
        "train_expansions": 4,
        "train_tactics_per_goal": 8,
        "valid_theorems": 6,
        "eval_expansions": 4,
        "eval_tactics_per_goal": 8,
        "epochs": 2,
    },
}


@pytest.fixture(scope="module")
def bool_theorems(tmp_path_factory):
    """A JSONL theorem set of 6 train and 6 valid theorems of Coq's Bool library (extracted once, ~10 s)."""
    from tests.proving.cases import require

    require("coq")
    from aitp.proving.theorem_set import TheoremSet
    from aitp.proving.theorems import load_theorem_set

    root = tmp_path_factory.mktemp("bool-theorems")
    library = load_theorem_set("coq-stdlib", home=root)
    pick = [t for t in library.split("train") if t.module == "Coq.Bool.Bool"][10:16]
    pick += [t for t in library.split("valid") if t.module == "Coq.Bool.Bool"][:6]
    small = TheoremSet("bool-mini", "coq", pick, library.premise_names, library.version)
    path = root / "bool-mini.jsonl"
    small.save(path)
    return path


def test_the_shipped_proving_configs_load():
    for name, backend in (("prove-coq.yaml", "coq"), ("prove-hol.yaml", "hol-light")):
        path = REPO / "configs" / name
        assert (
            path.read_text()
            .splitlines()[0]
            .startswith(f"# bash scripts/setup.sh && .venv/bin/aitp run --config configs/{name}")
        )
        config = load_config(LoopConfig, path)
        assert config.environment == "proving" and config.proving.backend == backend
        assert config.iterations >= 4
        recorded = config.model_dump(mode="json")
        assert "tasks" not in recorded and LoopConfig.model_validate(recorded) == config  # the record reloads


def test_reasoning_keys_are_refused_for_proving_and_proving_keys_for_reasoning(tmp_path):
    import yaml

    for key, value in (("tasks", MINI["tasks"]), ("rollouts", {"group_size": 4}), ("system_prompt", "x")):
        data = {**copy.deepcopy(PROVE), key: value}
        path = tmp_path / f"{key}.yaml"
        path.write_text(yaml.safe_dump(data))
        with pytest.raises(ConfigError, match="only apply to environment: reasoning"):
            load_config(LoopConfig, path)
    with pytest.raises(ValueError, match="proving is read only with environment: proving"):
        LoopConfig.model_validate({**copy.deepcopy(MINI), "proving": {"train_slice": 3}})
    with pytest.raises(ValueError, match="tasks: list at least one"):
        LoopConfig.model_validate({k: v for k, v in MINI.items() if k != "tasks"})
    assert "environment" not in LoopConfig.model_validate(MINI).model_dump()  # reasoning hashes as before


def test_the_prover_environment_implements_the_protocol(tmp_path, bool_theorems):
    config = LoopConfig.model_validate({**PROVE, "proving": {**PROVE["proving"], "theorems": str(bool_theorems)}})
    env = LoopRun(tmp_path, config).environment
    assert isinstance(env, ProverEnvironment)
    for name in Environment.__annotations__:
        assert hasattr(env, name), name
    for name in ("acts", "commits_items", "items", "item_rows", "act", "summarize", "train"):
        assert callable(getattr(env, name)), name
    assert env.acts(0) and env.commits_items(0)
    assert [t.name for t in env.items(0)] == [t.name for t in env.items(0)] and len(env.items(0)) == 6


def test_one_proving_iteration_runs_in_process_without_prefect(tmp_path, monkeypatch, bool_theorems):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    data = copy.deepcopy(PROVE)
    data["proving"]["theorems"] = str(bool_theorems)
    run = open_experiment(tmp_path, LoopConfig.model_validate(data))
    row = run_iteration(run, 0)
    assert row["status"] == "done" and row["promoted"] and row["champion_version"] == "1", row
    con = connect(tmp_path)
    try:
        searched = con.execute("SELECT count(DISTINCT theorem_id) FROM proof_nodes WHERE is_root").fetchone()[0]
        proved = con.execute("SELECT count(*) FROM proofs WHERE verified AND split = 'train'").fetchone()[0]
        n_items, n_pass, rate = con.execute("SELECT n_items, n_pass, pass_rate FROM evals").fetchone()
        samples = con.execute("SELECT count(*), count(*) FILTER (WHERE passed) FROM eval_samples").fetchone()
    finally:
        con.close()
    assert searched == 6 and proved >= 1  # one committed chunk, searched over Dask
    assert n_items == 6 and samples == (6, n_pass) and rate == row["eval_pass_rate"] == n_pass / 6
    record = run.registry.get("prove-mini", "champion")
    assert (tmp_path / "checkpoints" / "prove-mini" / "iter-000" / "prover_models.json").is_file()
    assert record.model_version == row["model_out"]
    gain = champion_gain(tmp_path, "prove-mini")  # paired over the valid theorems' eval_samples
    assert gain.n_items == 6 and gain.gain == 0.0
    assert run_iteration(run, 0)["model_out"] == row["model_out"]  # done: reused

    import shutil

    from aitp.train.checkpoint import CheckpointError, verify_checkpoint

    cut = shutil.copytree(tmp_path / "checkpoints" / "prove-mini" / "iter-000", tmp_path / "cut")
    assert verify_checkpoint(cut) == "prover"
    (cut / "tactic_ranker.npy").unlink()
    with pytest.raises(CheckpointError, match="tactic_ranker.npy"):  # the registry will not take it
        verify_checkpoint(cut)
