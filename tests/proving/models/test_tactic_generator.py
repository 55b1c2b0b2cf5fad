"""The generative tactic model's data and training: re-checked train proofs only, a real tiny training run, real Coq."""

from __future__ import annotations

import json

import pytest

from aitp.proving.coq.tactics import parse_coq_tactic
from aitp.proving.data.theorem_set import split_of
from aitp.proving.data.trace_queries import LeakageError
from aitp.proving.data.training_data import TacticExample, TrainingData, select_training_data
from aitp.proving.env import Goal
from aitp.proving.models.generative import goal_prompt, goal_tail
from aitp.proving.models.tactic_generator import (
    GeneratorSettings,
    dpo_examples,
    generator_settings,
    load_tactic_generator,
    sft_examples,
    train_tactic_generator,
)
from aitp.train.config import TrainConfig
from aitp.train.data import NoTrainingDataError

SMALL = {"n_layer": 2, "n_head": 2, "n_kv_head": 1, "d_model": 64, "max_seq_len": 384}


def _goals(outcome) -> set[str]:
    return {r["goal"] for r in outcome.rows.get("proof_nodes", [])}


def test_generator_examples_come_from_rechecked_train_proofs_only(coq_trace_lake):
    home, library, searched, evaluated, unverified = coq_trace_lake
    data = select_training_data(home, "e", 2, library)
    settings = GeneratorSettings()
    sft, pairs = sft_examples(data.tactics, "coq", settings), dpo_examples(data.pairs, "coq", settings)
    proved_train = {a.theorem for a in searched.attempts if a.proved}
    assert sft and pairs
    assert {e["theorem"] for e in sft + pairs} <= proved_train
    assert all(split_of(e["theorem"]) == "train" for e in sft + pairs)
    # leakage: no goal of a valid search (nor of the mislabelled copy) and no unchecked proof's goal is a prompt
    prompts = {json.loads(e["prompt"])[-1]["content"] for e in sft + pairs}
    assert not prompts & {goal_tail(g, settings.max_goal_chars) for g in _goals(evaluated) | _goals(unverified)}
    assert not {e["theorem"] for e in sft} & {a.theorem for a in evaluated.attempts + unverified.attempts}
    # each proof step once, prompted exactly as search prompts it; alternatives only when asked for
    steps = [e for e in sft if e["source"] == "proof_step"]
    assert len(steps) == len({(t.goal, t.tactic) for t in data.tactics})
    example = data.tactics[0]
    assert sft[0]["prompt"] == json.dumps(goal_prompt(Goal(example.goal, example.theorem), "coq", 256))
    without = sft_examples(data.tactics, "coq", GeneratorSettings(with_alternatives=False))
    assert {e["source"] for e in without} == {"proof_step"}
    assert all(p["completion"] != p["rejected"] for p in pairs)


def test_a_valid_theorem_in_generator_data_is_refused():
    valid_name = next(f"Coq.Init.Nat.t{i}" for i in range(1000) if split_of(f"Coq.Init.Nat.t{i}") == "valid")
    leaked = TacticExample(valid_name, "train", "⊢ True", "auto", 1, "s", "0")
    with pytest.raises(LeakageError, match="valid"):
        sft_examples([leaked], "coq", GeneratorSettings())


def test_no_examples_is_a_typed_error(tmp_path):
    with pytest.raises(NoTrainingDataError, match="re-checked train proofs"):
        train_tactic_generator(TrainingData([], [], [], []), "coq", "tiny", TrainConfig(steps=1), tmp_path / "g")


def test_goal_tail_keeps_the_conclusion():
    goal = "\n".join(f"H{i} : x{i} = {i}" for i in range(40)) + "\n⊢ forall n, n + 0 = n"
    tail = goal_tail(goal, 100)
    assert tail.endswith("⊢ forall n, n + 0 = n") and len(tail) <= 100 and tail.startswith("H")
    assert goal_tail(goal, None) == goal_tail(goal, 10_000) == goal


def test_a_tiny_training_run_round_trips_into_a_search_policy(coq_trace_lake, tmp_path):
    """A few SFT steps through the training machinery: checkpoint, recorded prompt settings, a policy whose
    tactics all pass the allowlist (the protocol is real: the tiny model samples, the grammar filters)."""
    home, library, *_ = coq_trace_lake
    data = select_training_data(home, "e", 2, library)
    settings = GeneratorSettings(max_goal_chars=200, samples_per_tactic=3)
    base = {"backend": "tiny", "config": SMALL, "seed": 0}
    config = TrainConfig(steps=3, batch_size=4, lr=1e-3, max_len=320, threads=1)
    out = train_tactic_generator(data, "coq", base, config, tmp_path / "gen", settings)
    record = json.loads((out / "training.json").read_text())
    assert record["steps"] == 3 and record["meta"]["data"] == data.counts()
    assert generator_settings(out) == settings
    policy = load_tactic_generator(out, "coq")
    assert policy.max_goal_chars == 200 and policy.samples_per_tactic == 3
    goals = [Goal(e.goal, e.theorem) for e in data.tactics[:2]]
    suggestions = policy.suggest(goals, 4)
    assert len(suggestions) == 2 and all(len(s) <= 4 for s in suggestions)
    for s in suggestions:
        for t in s:
            assert parse_coq_tactic(t.tactic) == t.tactic


def test_trained_generator_proposes_the_proofs_tactics(coq_trace_lake, tmp_path):
    """Enough SFT steps make the tiny model propose, on train goals, the tactics that proved them."""
    home, library, *_ = coq_trace_lake
    data = select_training_data(home, "e", 2, library)
    settings = GeneratorSettings(with_alternatives=False)
    config = TrainConfig(steps=150, batch_size=8, lr=3e-3, max_len=384, threads=1)
    out = train_tactic_generator(data, "coq", {"backend": "tiny", "config": SMALL}, config, tmp_path / "g", settings)
    policy = load_tactic_generator(out, "coq")
    goals = [Goal(e.goal, e.theorem) for e in data.tactics]
    suggested = policy.suggest(goals, 4)
    hits = sum(e.tactic in {s.tactic for s in sug} for e, sug in zip(data.tactics, suggested))
    assert hits >= len(goals) // 2, f"{hits}/{len(goals)} proof tactics among the top 4"


def test_a_prover_checkpoint_carries_its_generator(coq_trace_lake, tmp_path):
    """Saved with the prover models, verified with them, loaded back as the policy of any search."""
    from aitp.checkpoints import GENERATOR_DIR, CheckpointError, verify_checkpoint
    from aitp.proving.models.generative import GenerativeTacticPolicy, InterleavedPolicy
    from aitp.proving.models.prover_models import ProverModels, load_prover_models
    from aitp.proving.models.ranked_policy import Exploration, RankedTacticPolicy
    from aitp.proving.models.tactic_generator import prepare_generator

    _, library, *_ = coq_trace_lake
    settings = GeneratorSettings(max_goal_chars=128)
    out = tmp_path / "prover"
    models = ProverModels.untrained("coq", library)
    staged = prepare_generator(None, "coq", {"backend": "tiny", "config": SMALL}, TrainConfig(), settings, out)
    models.generator = staged
    version = models.save(out)
    assert verify_checkpoint(out) == "prover" and (out / GENERATOR_DIR / "model.safetensors").is_file()
    loaded = load_prover_models(out, library)
    assert loaded.version == version and loaded.generator == out / GENERATOR_DIR
    policy = loaded.policy(library)
    assert isinstance(policy, GenerativeTacticPolicy) and policy.max_goal_chars == 128  # settings reach search
    assert isinstance(loaded.policy(library, Exploration(1.0)), InterleavedPolicy)
    assert isinstance(ProverModels.untrained("coq", library).policy(library), RankedTacticPolicy)
    (out / GENERATOR_DIR / "model.safetensors").write_bytes(b"cut")
    with pytest.raises(CheckpointError, match="truncated"):
        verify_checkpoint(out)
