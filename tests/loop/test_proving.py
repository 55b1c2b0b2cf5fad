"""The prover environment in the loop engine: its config, the protocol, one in-process iteration on real Coq."""

from __future__ import annotations

import copy

import pytest

from aitp.configs import ConfigError, load_config
from aitp.lake import connect
from aitp.loop import Environment, LoopConfig, LoopRun, open_experiment, run_iteration
from aitp.loop.stats import champion_gain
from aitp.proving.environment import ProverEnvironment
from tests.loop.helpers import MINI, REPO

PROVE = {
    "experiment": "prove-mini",
    "seed": 0,
    "iterations": 1,
    "fanout": {"chunk_items": 6, "workers": 1},
    "environment": {
        "type": "proving",
        "train_slice": 6,
        "train_expansions": 4,
        "train_tactics_per_goal": 8,
        "valid_theorems": 6,
        "eval_expansions": 4,
        "eval_tactics_per_goal": 8,
        "epochs": 2,
    },
}


def test_the_shipped_proving_configs_load():
    for name, backend in (
        ("prove-coq.yaml", "coq"),
        ("prove-coq-control.yaml", "coq"),
        ("prove-coq-generative.yaml", "coq"),
        ("prove-coq-closing.yaml", "coq"),
        ("prove-hol.yaml", "hol-light"),
    ):
        path = REPO / "configs" / name
        assert (
            path.read_text()
            .splitlines()[0]
            .startswith(f"# bash scripts/setup.sh && .venv/bin/aitp run --config configs/{name}")
        )
        config = load_config(LoopConfig, path)
        assert config.environment.type == "proving" and config.environment.backend == backend
        assert config.iterations >= 3  # issue 17: at least 3 iterations after the untrained iteration 0
        assert config.environment.learn == (name != "prove-coq-control.yaml")  # the control learns nothing
        recorded = config.model_dump(mode="json")
        assert "tasks" not in recorded and LoopConfig.model_validate(recorded) == config  # the record reloads


def test_the_closing_config_is_prove_coq_with_coqhammer_and_sauto_closing():
    plain = load_config(LoopConfig, REPO / "configs" / "prove-coq.yaml").model_dump()
    closing = load_config(LoopConfig, REPO / "configs" / "prove-coq-closing.yaml").model_dump()
    for config in (plain, closing):
        config.pop("experiment"), config.pop("iterations")
    assert closing["environment"].pop("automation_tactics") and not plain["environment"].pop("automation_tactics")
    assert closing["environment"].pop("closing_tactics") == [{"tactic": "sauto", "timeout": 2.0, "max_depth": None}]
    plain["environment"].pop("closing_tactics")
    assert closing == plain


def test_reasoning_keys_are_refused_for_proving_and_proving_keys_for_reasoning(tmp_path):
    import yaml

    for key, value in (
        ("tasks", MINI["environment"]["tasks"]),
        ("rollouts", {"group_size": 4}),
        ("system_prompt", "x"),
    ):
        data = copy.deepcopy(PROVE)
        data["environment"][key] = value
        path = tmp_path / f"{key}.yaml"
        path.write_text(yaml.safe_dump(data))
        with pytest.raises(ConfigError, match=f"unknown config key 'environment.{key}'"):
            load_config(LoopConfig, path)
    reasoning = LoopConfig.model_validate(MINI).model_dump(mode="json")
    reasoning["environment"]["train_slice"] = 3
    with pytest.raises(ValueError, match="train_slice"):
        LoopConfig.model_validate(reasoning)
    with pytest.raises(ValueError, match="tasks: list at least one"):
        LoopConfig.model_validate({**MINI, "environment": {"type": "reasoning"}})


def test_the_prover_environment_implements_the_protocol(tmp_path, bool_theorems):
    from aitp.proving.learning import train_slice

    config = LoopConfig.model_validate(
        {**PROVE, "environment": {**PROVE["environment"], "theorems": str(bool_theorems)}}
    )
    env = LoopRun(tmp_path, config).environment
    assert isinstance(env, ProverEnvironment)
    for name in Environment.__annotations__:
        assert hasattr(env, name), name
    for name in ("acts", "commits_items", "items", "item_rows", "act", "prepare", "summarize", "train"):
        assert callable(getattr(env, name)), name
    # an untrained start: iteration 0 neither searches nor commits items; iteration 1 searches the first slice
    assert not env.acts(0) and not env.commits_items(0) and list(env.items(0)) == []
    assert env.acts(1) and [t.name for t in env.items(1)] == [t.name for t in train_slice(env.library, 0, 6, 0)]
    assert [t.name for t in env.items(1)] == [t.name for t in env.items(1)] and len(env.items(1)) == 6
    trained = config.model_copy(
        update={"environment": config.environment.model_copy(update={"first_champion": "trained"})}
    )
    env = LoopRun(tmp_path, trained).environment
    assert env.acts(0) and env.commits_items(0) and [t.name for t in env.items(0)] == [t.name for t in env.items(1)]


@pytest.fixture(scope="module")
def two_iterations(tmp_path_factory, bool_theorems):
    """Iterations 0 (the untrained models registered as first champion) and 1 (search, train, eval) in process."""
    home = tmp_path_factory.mktemp("prove-loop")
    data = copy.deepcopy(PROVE)
    data["environment"]["theorems"] = str(bool_theorems)
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("MLFLOW_TRACKING_URI", raising=False)
        run = open_experiment(home, LoopConfig.model_validate(data))
        rows = [run_iteration(run, 0), run_iteration(run, 1)]
        yield home, run, rows


def _one(home, sql):
    con = connect(home)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def test_iteration_0_registers_the_untrained_models_as_first_champion(two_iterations):
    import json

    home, run, (first, _) = two_iterations
    assert first["status"] == "done" and first["promoted"] and first["champion_version"] == "1", first
    assert _one(home, "SELECT count(*) FROM proof_nodes WHERE iteration = 0 AND split = 'train'") == [(0,)]
    assert _one(home, "SELECT count(*) FROM items WHERE iteration = 0") == [(0,)]  # nothing searched, no items
    record = json.loads((home / "checkpoints" / "prove-mini" / "iter-000" / "training.json").read_text())
    assert record["untrained"] is True
    (rate,) = _one(home, "SELECT pass_rate FROM evals WHERE iteration = 0")[0]
    assert rate == first["eval_pass_rate"] == first["champion_pass_rate"]


def test_aitp_prove_searches_with_a_registered_model_as_the_loop_evaluated_it(
    two_iterations, bool_theorems, monkeypatch, capsys
):
    """`aitp prove --model HOME:EXPERIMENT:VERSION` proves what the loop's evaluation proved with that model, at the
    same budget; a spec it cannot use is refused in one line."""
    from tests.proving.test_cli import run_cli

    home, run, (_, row) = two_iterations
    passed = {t for (t,) in _one(home, "SELECT item_id FROM eval_samples WHERE iteration = 1 AND passed")}
    assert passed, "the model proves some valid theorems"
    args = ["prove", "--theorems", str(bool_theorems), "--split", "valid", "--limit", "6", "--home", str(home)]
    budget = ["--budget-expansions", "4", "--tactics-per-goal", "8", "--tactic-timeout", "2", "--no-traces"]
    code, out, err = run_cli(monkeypatch, capsys, *args, *budget, "--model", f"{home}:prove-mini:2")
    assert code == 0, err
    proved = {line.split("\t")[1] for line in out.splitlines() if line.startswith("proved\t")}
    assert f"proved {len(passed)}/6" in out and {p.split(":", 1)[-1] for p in passed} == proved, (out, passed)
    for spec, needle in (
        (f"{home}:prove-mini:9", "model '9' of experiment 'prove-mini' is not registered"),
        (f"{home}/nowhere:prove-mini", "no aitp home at"),
        ("prove-mini", "write HOME:EXPERIMENT[:ALIAS|:VERSION]"),
    ):
        code, _, err = run_cli(monkeypatch, capsys, *args, "--model", spec)
        assert code != 0 and needle in err and err.count("\n") == 1, err
    code, _, err = run_cli(monkeypatch, capsys, *args, "--model", f"{home}:prove-mini", "--tactics", "intros")
    assert code != 0 and "which a --model replaces" in err


def test_a_proving_iteration_searches_trains_evaluates_and_gates(two_iterations):
    home, run, (first, row) = two_iterations
    assert row["status"] == "done" and row["model_in"] == first["model_out"] != row["model_out"], row
    searched = _one(home, "SELECT count(DISTINCT theorem_id) FROM proof_nodes WHERE is_root AND split = 'train'")
    proved = _one(home, "SELECT count(*) FROM proofs WHERE verified AND split = 'train'")
    assert searched == [(6,)] and proved[0][0] >= 1  # one committed chunk, searched over Dask
    n_items, n_pass, rate = _one(home, "SELECT n_items, n_pass, pass_rate FROM evals WHERE iteration = 1")[0]
    samples = _one(home, "SELECT count(*), count(*) FILTER (WHERE passed) FROM eval_samples WHERE iteration = 1")
    assert n_items == 6 and samples == [(6, n_pass)] and rate == row["eval_pass_rate"] == n_pass / 6
    assert (home / "checkpoints" / "prove-mini" / "iter-001" / "prover_models.json").is_file()
    gain = champion_gain(home, "prove-mini")  # paired over the valid theorems' eval_samples
    assert gain.n_items == 6 and gain.gain == (row["champion_pass_rate"] - first["eval_pass_rate"])
    assert run_iteration(run, 1)["model_out"] == row["model_out"]  # done: reused


def test_proof_search_figures_reach_the_lake_mlflow_and_the_report(two_iterations):
    from aitp.report.html import write_report

    home, run, (first, row) = two_iterations
    figures = _one(
        home,
        "SELECT iteration, split, n_searched, n_proved, n_new + n_retained, expansions_per_proof IS NOT NULL"
        " FROM proof_search ORDER BY ALL",
    )
    valid_proved = _one(home, "SELECT iteration, n_pass FROM evals ORDER BY iteration")
    assert [(f[0], f[3]) for f in figures if f[1] == "valid"] == valid_proved  # the eval's searches are in the lake
    assert all(f[2] == 6 and f[3] == f[4] and f[5] == (f[3] > 0) for f in figures)
    metrics = run.registry.client.get_run(row["mlflow_run_id"]).data.metrics
    assert metrics["loop/act/theorems_searched"] == 6 and "loop/act/n_proved_to_date" in metrics
    assert metrics["eval/challenger/search/n_searched"] == 6
    out = write_report(home, "prove-mini", home / "report.html")
    page = out.read_text()
    assert "<h2>Proof search</h2>" in page
    links = [p for p in (home / "report-proofs").iterdir()]
    n_proofs = _one(home, "SELECT count(*) FROM proofs WHERE verified")[0][0]
    assert len(links) == n_proofs >= 1 and all(f"report-proofs/{p.name}" in page for p in links)


def test_no_valid_theorem_or_unchecked_proof_reaches_training_data(two_iterations):
    from aitp.proving.data.theorem_set import split_of
    from aitp.proving.data.training_data import select_training_data

    home, run, _ = two_iterations
    env = run.environment
    # the lake does hold valid-split searches and proofs (the evaluations'), and failed searches of train theorems
    assert _one(home, "SELECT count(*) > 0 FROM proofs WHERE split = 'valid' AND verified") == [(True,)]
    data = select_training_data(home, "prove-mini", 1, env.library)
    checked = {t for (t,) in _one(home, "SELECT DISTINCT theorem_id FROM proofs WHERE verified AND split = 'train'")}
    names = {ex.theorem for ex in data.tactics} | {p.theorem for p in data.premises}
    assert data.tactics and names
    valid = {t.name for t in env.evaluator.valid}
    assert not names & valid and all(split_of(n) == "train" for n in names)
    assert {f"coq:{n}" for n in {ex.theorem for ex in data.tactics}} <= checked  # only re-checked proofs


def test_a_cut_prover_checkpoint_is_refused(two_iterations, tmp_path):
    import shutil

    from aitp.checkpoints import CheckpointError, verify_checkpoint

    home, _, _ = two_iterations
    cut = shutil.copytree(home / "checkpoints" / "prove-mini" / "iter-001", tmp_path / "cut")
    assert verify_checkpoint(cut) == "prover"
    (cut / "tactic_ranker.npy").unlink()
    with pytest.raises(CheckpointError, match="tactic_ranker.npy"):  # the registry will not take it
        verify_checkpoint(cut)


def test_the_control_is_the_learning_run_with_learning_switched_off():
    learn, control = (
        load_config(LoopConfig, REPO / "configs" / n) for n in ("prove-coq.yaml", "prove-coq-control.yaml")
    )
    assert control.environment.model_copy(update={"learn": True}) == learn.environment
    assert control.model_copy(update={"experiment": learn.experiment, "environment": learn.environment}) == learn


def test_train_after_eval_checkpoints_are_registered_and_gated(tmp_path, monkeypatch, bool_theorems):
    import json
    import sys

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    data = copy.deepcopy(PROVE)
    command = [sys.executable, "-m", "aitp.proving.retrain", "--home", "{home}", "--experiment", "{experiment}"]
    command += ["--iteration", "{iteration}", "--out", "{out}", "--theorems", str(bool_theorems), "--epochs", "2"]
    data["environment"].update(theorems=str(bool_theorems), train_command=command)
    run = open_experiment(tmp_path, LoopConfig.model_validate(data))
    first, row = run_iteration(run, 0), run_iteration(run, 1)
    out = tmp_path / "checkpoints" / "prove-mini" / "iter-001"
    assert json.loads((tmp_path / "checkpoints" / "prove-mini" / "iter-001.log").read_text())["version"]
    assert json.loads((out / "training.json").read_text())["data"]["proofs"] >= 1  # the command's own record
    registered = run.registry.get("prove-mini", "challenger")
    assert registered.version == "2" and registered.model_version == row["model_out"] != first["model_out"]
    (rate,) = _one(tmp_path, f"SELECT pass_rate FROM evals WHERE model_version = '{row['model_out']}'")[0]
    assert rate == row["eval_pass_rate"] and row["promote_reason"]  # evaluated and gated like ours
    assert row["promoted"] == (rate > first["eval_pass_rate"])


def test_the_generative_policy_setting_takes_effect_or_is_refused():
    generative = {**PROVE, "environment": {**PROVE["environment"], "tactic_policy": "generative"}}
    config = LoopConfig.model_validate(generative)
    assert config.environment.generator is not None and config.environment.generator.steps >= 1
    assert config.model_dump(mode="json")["environment"]["tactic_policy"] == "generative"
    with pytest.raises(ValueError, match="tactic_policy: generative"):
        LoopConfig.model_validate({**PROVE, "environment": {**PROVE["environment"], "generator": {"steps": 5}}})
    assert LoopConfig.model_validate(PROVE).model_dump()["environment"]["tactic_policy"] == "ranked"


def test_a_generative_loop_trains_its_generator_on_rechecked_train_proofs(tmp_path, bool_theorems):
    """Iteration 0 registers the untrained generator; iteration 1 searches train theorems (generator beside the
    ranked exploration), fine-tunes the generator on the re-checked train proofs, evaluates it alone, gates it."""
    import json

    from aitp.checkpoints import GENERATOR_DIR
    from aitp.proving.data.theorem_set import split_of
    from aitp.proving.data.theorems import load_theorem_set
    from aitp.proving.models.generative import GenerativeTacticPolicy
    from aitp.proving.models.prover_models import load_prover_models

    data = copy.deepcopy(PROVE)
    data["experiment"] = "prove-gen"
    data["environment"] |= {"theorems": str(bool_theorems), "tactic_policy": "generative", "valid_theorems": 3}
    data["environment"]["generator"] = {"steps": 4, "batch_size": 4, "base": None}
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("MLFLOW_TRACKING_URI", raising=False)
        run = open_experiment(tmp_path, LoopConfig.model_validate(data))
        run_iteration(run, 0)
        run_iteration(run, 1)
    library = load_theorem_set(str(bool_theorems), tmp_path)
    first, second = (tmp_path / "checkpoints" / "prove-gen" / f"iter-{k:03d}" for k in (0, 1))
    untrained = json.loads((first / GENERATOR_DIR / "training.json").read_text())
    assert "steps" not in untrained and untrained["meta"]["tactic_generator"]["max_goal_chars"] == 256
    record = json.loads((second / GENERATOR_DIR / "training.json").read_text())
    assert record["steps"] == 4 and record["examples"] > 0
    lines = (second / GENERATOR_DIR / "examples.jsonl").read_text().splitlines()
    assert lines and all(split_of(json.loads(line)["theorem"]) == "train" for line in lines)
    assert isinstance(load_prover_models(second, library).policy(library), GenerativeTacticPolicy)
    evals = _one(tmp_path, "SELECT iteration, n_items FROM evals WHERE experiment = 'prove-gen' ORDER BY iteration")
    assert evals == [(0, 3), (1, 3)]  # both generators evaluated alone on the same valid theorems and gated


def test_workers_of_a_local_cluster_may_fork_the_loops_prover():
    from distributed import Client

    from aitp.fanout.cluster import local_cluster
    from aitp.proving.shards import workers_on_this_host

    with local_cluster(1) as cluster, Client(cluster, set_as_default=False) as client:
        assert workers_on_this_host(client)


def test_searches_with_a_model_to_run_on_cuda_are_placed_on_a_gpu_worker(tmp_path):
    """A generative policy's searches ask Dask for a worker declaring a GPU: the flow's CPU workers see no CUDA
    device, and a model placed there decodes on the CPU.
    The cluster is real; its GPU worker only declares the resource (this machine has no GPU)."""
    from distributed import Client

    from aitp.fanout.cluster import GPU, NoGpuWorkersError, local_cluster

    def env(policy: str, device: str | None) -> ProverEnvironment:
        data = copy.deepcopy(PROVE) | {"device": device}
        data["environment"] |= {"tactic_policy": policy}
        return LoopConfig.model_validate(data).build_environment(tmp_path)

    assert env("generative", "cuda").decodes_on_gpu and env("generative", None).decodes_on_gpu
    assert not env("generative", "cpu").decodes_on_gpu and not env("ranked", "cuda").decodes_on_gpu
    with local_cluster(gpus=1, cpu_workers=1) as cluster, Client(cluster, set_as_default=False) as client:
        client.wait_for_workers(2)
        assert env("generative", "cuda")._gpu_resources(client) == {GPU: 1}
    with local_cluster(1) as cluster, Client(cluster, set_as_default=False) as client:
        with pytest.raises(NoGpuWorkersError, match="no Dask worker declares a GPU"):
            env("generative", "cuda")._gpu_resources(client)
        assert env("generative", None)._gpu_resources(client) is None  # no GPU asked for: the CPU workers decode


def test_the_critic_keys_take_effect_or_are_refused():
    proving = PROVE["environment"]
    with pytest.raises(ValueError, match="no effect with search: bfs"):
        LoopConfig.model_validate({**PROVE, "environment": {**proving, "search": "bfs", "critic": "learned"}})
    with pytest.raises(ValueError, match="critic_min_visits labels a learned critic"):
        LoopConfig.model_validate({**PROVE, "environment": {**proving, "critic_min_visits": 3}})
    with pytest.raises(ValueError, match="critic"):
        LoopConfig.model_validate({**PROVE, "environment": {**proving, "critic": "neural"}})
    assert LoopConfig.model_validate(PROVE).environment.critic is None
    learned = LoopConfig.model_validate(
        {**PROVE, "environment": {**proving, "critic": "learned", "critic_min_visits": 2}}
    )
    assert (
        learned.model_dump()["environment"] | {"critic": "learned", "critic_min_visits": 2}
        == learned.model_dump()["environment"]
    )


def test_a_learned_critic_is_trained_into_the_checkpoint_and_values_the_htps_searches(two_iterations, tmp_path):
    from aitp.proving.env import Goal
    from aitp.proving.models.prover_models import load_prover_models
    from aitp.proving.shards import search_shard

    home, run, _ = two_iterations
    plain = run.environment
    proving = plain.proving.model_copy(update={"critic": "learned", "search": "htps", "critic_min_visits": 1})
    env = ProverEnvironment(proving, plain.loop, home)
    out = env.train(home, "prove-mini", 1, None, tmp_path / "ckpt")
    models = load_prover_models(out, env.library)
    assert models.critic is not None and models.record["data"]["critic_examples"] > 0
    assert models.record["critic_losses"][-1] < models.record["critic_losses"][0]
    assert load_prover_models(plain.train(home, "prove-mini", 1, None, tmp_path / "plain"), env.library).critic is None
    assert env.evaluator.eval_name != plain.evaluator.eval_name  # another protocol, another evaluation
    job = env.job(str(out), 1, train=False)
    assert job.critic == "learned" and job.search == "htps"
    shard = search_shard([t.name for t in env.evaluator.valid[:3]], job)
    nodes = shard["rows"]["proof_nodes"]
    expected = models.critic([Goal(n["goal"], "") for n in nodes])
    assert [n["critic_value"] for n in nodes] == pytest.approx(expected) and len(set(expected)) > 1
