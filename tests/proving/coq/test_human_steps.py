"""Human proof replay on real Coq: structure is no step, chains stay whole, no valid or test theorem in the lake."""

from __future__ import annotations

import json

import pytest

from aitp.proving.coq.human_steps import Replay, human_step_rows, parse_script, replay_theorems
from aitp.proving.coq.tactics import parse_coq_tactic
from aitp.proving.data.theorem_set import TheoremSet, split_of
from aitp.proving.env import Theorem
from aitp.proving.errors import TacticRejectedError, UnknownTheoremError
from tests.lake.helpers import cli
from tests.proving.cases import require

# train theorems: bullets three deep; braces after a `;` chain with branches; bullets and `now`
TRAIN = ("Coq.Init.Logic.unique_existence", "Coq.Init.Logic.or_cancel_l", "Coq.Arith.Compare_dec.le_dec")
HELD_OUT = ("Coq.Init.Logic.neg_false", "Coq.Arith.PeanoNat.Nat.eqb_eq", "Coq.Arith.PeanoNat.Nat.shiftr_specif")
FILES = {
    "Coq.Init.Logic": "Init/Logic.v",
    "Coq.Arith.Compare_dec": "Arith/Compare_dec.v",
    "Coq.Arith.PeanoNat": "Arith/PeanoNat.v",
}


def test_the_chosen_theorems_sit_in_the_splits_the_tests_assume():
    assert {split_of(n) for n in TRAIN} == {"train"}
    assert {split_of(n) for n in HELD_OUT} == {"valid", "test"}


def test_a_script_splits_into_structure_and_whole_tactic_sentences_and_stops_at_qed():
    script = parse_script(
        "intros; split. - { simpl; [auto | ]. } 2: { auto. } -- now left. } Qed. Lemma other : True. exact I."
    )
    assert script.sentences == [
        ("tactic", "intros; split."),
        ("structure", "-"),
        ("structure", "{"),
        ("tactic", "simpl; [auto | ]."),
        ("structure", "}"),
        ("structure", "2: {"),
        ("tactic", "auto."),
        ("structure", "}"),
        ("structure", "--"),
        ("tactic", "now left."),
        ("structure", "}"),
    ]


def test_proof_with_is_kept_proof_using_dropped_and_a_proof_term_unsupported():
    with_auto = parse_script("Proof with auto. induction n... - simpl...")
    assert with_auto.proof_with == "auto"
    assert with_auto.sentences == [("tactic", "induction n..."), ("structure", "-"), ("tactic", "simpl...")]
    assert parse_script("Proof using A dec. now right.").sentences == [("tactic", "now right.")]
    assert parse_script("Proof proof_irrelevance_cci classic.").sentences[0][0] == "unsupported"
    assert parse_script("Opaque f. simpl. }").sentences == [
        ("command", "Opaque f."),
        ("tactic", "simpl."),
        ("structure", "}"),
    ]


def test_valid_and_test_theorems_are_refused_before_any_replay():
    held_out = [Theorem(n, "", "coq", "trivial.", module=n.rsplit(".", 1)[0]) for n in HELD_OUT]
    for theorem in held_out:
        with pytest.raises(UnknownTheoremError, match="train theorems only"):
            replay_theorems([theorem])  # refused before Coq starts
        with pytest.raises(UnknownTheoremError, match="must not reach the lake"):
            human_step_rows([Replay(theorem)], "e")


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    """`aitp prove-steps` once over a set of the train theorems mixed with valid and test ones."""
    require("coq")
    from aitp.proving.coq.extract import coq_theories_dir, parse_v_file

    theories = coq_theories_dir()
    wanted = set(TRAIN + HELD_OUT)
    theorems = []
    for logical, path in FILES.items():
        for found in parse_v_file(theories / path, logical):
            if found["name"] in wanted:
                theorems.append(Theorem(backend="coq", position=len(theorems), module=logical, **found))
    assert {t.name for t in theorems} == wanted
    home = tmp_path_factory.mktemp("human-steps")
    TheoremSet("mixed", "coq", theorems, [t.name for t in theorems]).save(home / "mixed.jsonl")
    result = cli("prove-steps", "--theorems", str(home / "mixed.jsonl"), "--home", str(home), "--experiment", "h")
    assert result.exit_code == 0, result.output
    assert "replayed 3: complete 3, partial 0, failed 0" in result.output
    return home


def sql(home, query: str) -> list[dict]:
    """Rows of a query through `aitp sql`, as users read the tables."""
    result = cli("sql", "--home", str(home), "--format", "json", query)
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_no_valid_or_test_theorem_reaches_either_table(lake):
    for table in ("human_steps", "human_replays"):
        rows = sql(lake, f"SELECT DISTINCT theorem, split FROM {table} ORDER BY theorem")
        assert {r["theorem"] for r in rows} == set(TRAIN)
        assert {r["split"] for r in rows} == {"train"}


def steps_of(home, theorem: str) -> list[dict]:
    return sql(home, f"SELECT * FROM human_steps WHERE theorem = '{theorem}' ORDER BY step_index")


def test_bullets_are_structure_and_the_steps_are_the_tactic_sentences(lake):
    steps = steps_of(lake, "Coq.Init.Logic.unique_existence")
    assert [s["step_index"] for s in steps] == list(range(len(steps)))
    assert [s["tactic"] for s in steps][:3] == [
        "intros A P; split",
        "intros ((x,Hx),Huni); exists x; red; auto",
        "intros (x,(Hx,Huni)); split",
    ]
    assert len(steps) == 7 and not any(s["tactic"].startswith(("-", "+", "*")) for s in steps)
    assert steps[0]["n_goals_after"] == 2 and "forall (A : Type) (P : A -> Prop)" in steps[0]["goal_before"]
    assert steps[1]["goal_before"] == steps[0]["goals_after"][0]  # the first bullet focuses the first goal
    assert steps[-1]["goals_after"] == [] and steps[-1]["n_goals_after"] == 0


def test_braces_focus_the_goals_a_whole_chain_left(lake):
    steps = steps_of(lake, "Coq.Init.Logic.or_cancel_l")
    chain, left, right = steps  # the extraction ran on into or_cancel_r: replay stopped at the `Qed`
    assert chain["tactic"] == "intros ? ? ? Fl Fr; split; [ | apply or_iff_compat_l]; intros [Hl Hr]; split; intros"
    assert chain["n_goals_after"] == 2
    assert left["goal_before"] == chain["goals_after"][0] and right["goal_before"] == chain["goals_after"][1]
    assert left["tactic"] == "destruct Hl; [ right | destruct Fl | ]; assumption" and left["goals_after"] == []


def test_allowlisted_says_whether_the_search_would_accept_the_tactic(lake):
    steps = sql(lake, "SELECT theorem, tactic, allowlisted FROM human_steps")
    for step in steps:
        try:
            parse_coq_tactic(step["tactic"], frozenset({step["theorem"], step["theorem"].rsplit(".", 1)[-1]}))
            accepted = True
        except TacticRejectedError:
            accepted = False
        assert step["allowlisted"] == accepted
    assert any(s["allowlisted"] for s in steps)


def test_replays_say_how_far_each_got(lake):
    rows = sql(lake, "SELECT theorem, status, n_steps, reason FROM human_replays ORDER BY theorem")
    assert {r["status"] for r in rows} == {"complete"} and all(r["reason"] is None for r in rows)
    counts = sql(lake, "SELECT theorem, count(*) AS n FROM human_steps GROUP BY theorem")
    assert {r["theorem"]: r["n_steps"] for r in rows} == {c["theorem"]: c["n"] for c in counts}


def test_a_failing_step_keeps_the_steps_before_it_and_says_why():
    require("coq")
    theorem = Theorem(
        "Coq.Init.Logic.unique_existence",
        "",
        "coq",
        "intros A P; split. - discriminate. - auto.",
        module="Coq.Init.Logic",
    )
    (replay,) = replay_theorems([theorem], tactic_timeout=5.0)
    assert replay.status == "partial" and len(replay.steps) == 1
    assert replay.reason.startswith("step: ") and replay.failed_sentence == "discriminate."


def test_the_generator_learns_the_allowlisted_train_steps_and_a_home_without_them_is_refused(lake, tmp_path):
    from aitp.loop.config import LoopConfig
    from aitp.proving.data.training_data import human_step_examples
    from aitp.proving.errors import MissingHumanStepsError
    from aitp.proving.models.tactic_generator import GeneratorSettings, sft_examples
    from tests.loop.test_proving import PROVE

    examples = human_step_examples(lake)
    allowlisted = sql(lake, "SELECT theorem, tactic FROM human_steps WHERE allowlisted ORDER BY theorem, step_index")
    assert [(e.theorem, e.tactic) for e in examples] == [(r["theorem"], r["tactic"]) for r in allowlisted]
    assert {e.source for e in examples} == {"human_step"} and {e.split for e in examples} == {"train"}
    rows = sft_examples(examples, "coq", GeneratorSettings())
    assert rows and {r["source"] for r in rows} == {"human_step"} and {r["theorem"] for r in rows} <= set(TRAIN)
    assert human_step_examples(tmp_path) == []
    proving = {**PROVE["environment"], "tactic_policy": "generative", "generator": {"human_steps": True}}
    config = LoopConfig.model_validate({**PROVE, "environment": proving})
    with pytest.raises(MissingHumanStepsError, match="aitp prove-steps --home"):
        config.build_environment(tmp_path)  # refused before anything runs
    assert len(config.build_environment(lake)._human_steps()) == len(examples)


def test_the_human_steps_alone_make_iteration_0s_first_champion(lake, tmp_path):
    """`first_champion: human_steps`: iteration 0 searches nothing and fine-tunes the generator on the human steps
    alone, the supervised warm start a user sets beside the untrained models; it needs the steps turned on."""
    from aitp.checkpoints import read_record
    from aitp.loop.config import LoopConfig
    from aitp.proving.data.training_data import human_step_examples
    from aitp.proving.models.prover_models import load_prover_models
    from tests.loop.test_proving import PROVE

    generator = {"human_steps": True, "steps": 2, "batch_size": 2}
    proving = {
        **PROVE["environment"],
        "theorems": str(lake / "mixed.jsonl"),
        "tactic_policy": "generative",
        "generator": generator,
        "first_champion": "human_steps",
    }
    env = LoopConfig.model_validate({**PROVE, "environment": proving}).build_environment(lake)
    assert not env.acts(0) and list(env.items(0)) == [] and env.acts(1)
    out = env.train(lake, "h", 0, None, tmp_path / "iter-000")
    models = load_prover_models(out, env.library)
    assert models.record["warm_start"] == "human_steps" and not models.record["untrained"]
    counts = read_record(models.generator)["meta"]["data"]
    assert counts["proofs"] == 0 and counts["tactic_examples"] == len(human_step_examples(lake)) > 0
    without_steps = {**proving, "generator": {**generator, "human_steps": False}}
    with pytest.raises(ValueError, match="generator.human_steps: true"):
        LoopConfig.model_validate({**PROVE, "environment": without_steps})
