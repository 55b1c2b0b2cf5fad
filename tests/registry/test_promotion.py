"""MLflow runs, versions and aliases; the promotion gate on real eval numbers (trained vs untrained); rollback."""

from types import SimpleNamespace

import pytest
import torch

from aitp.lake import connect
from aitp.loop.evaluation import gate
from aitp.loop.stats import paired_gain
from aitp.reasoning.evaluate import EvalConfig, EvalSetEvaluator, evaluate
from aitp.registry import (
    CHALLENGER,
    CHAMPION,
    PREVIOUS,
    Decision,
    ModelVersion,
    PromotionConfig,
    PromotionError,
    Registry,
    RegistryError,
    decide,
    judge,
    model_name,
    promote,
    rollback,
)
from aitp.registry.promotion import decide_paired, record_decision, weigh
from aitp.train.config import TrainConfig
from aitp.train.run import train
from tests.train.helpers import SYSTEM, tiny_base, write_items

EXP = "gate"
# Level 0 of basic_arithmetic ("Calculate 5 / 1."): short answers, so 150 CPU steps of demonstrations
# take the tiny model from 0% to a few percent pass rate (and from 100% to 0% format errors).
EVAL = EvalConfig(tasks=["basic_arithmetic"], n_per_task=100, difficulty=0, max_tokens=24, system_prompt=SYSTEM)
EVALUATOR = EvalSetEvaluator(EVAL)
DEMOS = TrainConfig(
    demonstrations_only=True, steps=150, batch_size=16, lr=3e-3, warmup_steps=10, max_len=128, system_prompt=SYSTEM
)


@pytest.fixture(scope="module")
def loop(tmp_path_factory):
    """A home with items, an untrained base, a model trained on demonstrations, and another untrained one."""
    home = tmp_path_factory.mktemp("home")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        write_items(home, EXP, 0, 400, level=0)
        untrained = tiny_base(home / "untrained", seed=0)
        trained = train(home, EXP, 0, untrained, DEMOS)
        worse = tiny_base(home / "worse", seed=1)
    finally:
        torch.set_num_threads(threads)
    return home, Registry(home), untrained, trained, worse


def test_decide_needs_a_positive_gain_of_at_least_the_margin():
    assert decide(0.3, None, 0.1)[0]
    assert decide(0.3, 0.2, 0.05)[0] and not decide(0.3, 0.2, 0.2)[0]
    assert not decide(0.2, 0.2, 0.0)[0] and not decide(0.1, 0.2, 0.0)[0]


class _Eval:
    def __init__(self, model_version: str, eval_name: str, pass_rate: float, item_pass: dict | None = None):
        self.model_version, self.eval_name, self.pass_rate = model_version, eval_name, pass_rate
        self.item_pass = item_pass or {}

    def score(self, metric: str) -> float:
        return {"pass_rate": self.pass_rate}[metric]


class _Registry:
    """Versions 1 (model ma) and 2 (model mb), a champion alias, and a list of every write."""

    def __init__(self, champion: str | None):
        self.champion, self.writes = champion, []
        self.client = SimpleNamespace(set_tag=lambda *args: self.writes.append(("run tag", *args)))

    def get(self, experiment, ref):
        ref = self.champion if ref == CHAMPION else ref
        return {
            "1": ModelVersion("m", "1", "ma", "", "", "", {}),
            "2": ModelVersion("m", "2", "mb", "", "", "", {}),
        }.get(ref or "")

    def tag_version(self, experiment, version, tags):
        self.writes.append(("version tags", version, tags))

    def iteration_run(self, experiment, iteration):
        return f"run-{iteration}"

    def log_metrics(self, run_id, metrics):
        self.writes.append(("metrics", run_id, metrics))

    def call(self, what, fn, *args):
        return fn(*args)


def test_weigh_decides_without_writing_and_record_decision_writes_it():
    registry = _Registry(champion="1")
    decision = weigh(registry, EXP, "2", _Eval("mb", "ev", 0.3), _Eval("ma", "ev", 0.25), PromotionConfig(margin=0.1))
    reason = "kept champion: v2 pass_rate 0.3000 vs champion v1 0.2500; does not win: +0.0500 vs margin 0.1"
    assert decision == Decision(False, reason, "2", "1", 0.3, 0.25, "pass_rate", 0.1, "ev")
    assert registry.writes == []
    record_decision(registry, EXP, 4, decision)
    tags = {
        "aitp.decision": "rejected",
        "aitp.decision_reason": reason,
        "aitp.metric": "pass_rate",
        "aitp.margin": 0.1,
        "aitp.eval_name": "ev",
        "aitp.challenger_score": 0.3,
        "aitp.champion_score": 0.25,
        "aitp.champion_version": "1",
        "aitp.decided_at_iteration": 4,
        "aitp.rule": "margin",
    }
    metrics = {"promotion/challenger_score": 0.3, "promotion/champion_score": 0.25, "promotion/promoted": 0.0}
    assert registry.writes == [
        ("version tags", "2", tags),
        ("metrics", "run-4", metrics),
        ("run tag", "run-4", "aitp.promotion", reason),
    ]


def _passing(n_pass: int, n: int = 100) -> dict[str, float]:
    return {f"item-{i:03d}": float(i < n_pass) for i in range(n)}


def _evals(champion_passes: int, challenger_passes: int) -> tuple[_Eval, _Eval]:
    """Champion and challenger on the same 100 items, the challenger passing every item the champion passes."""
    champion, challenger = _passing(champion_passes), _passing(challenger_passes)
    return (
        _Eval("mb", "ev", challenger_passes / 100, challenger),
        _Eval("ma", "ev", champion_passes / 100, champion),
    )


def test_the_paired_rule_refuses_a_gain_the_margin_rule_promotes_and_records_its_interval():
    """+2 of 100 items (+0.02) is a strict gain, promoted by `margin`; its paired interval reaches zero, so `paired`
    keeps the champion. +20 of 100 is evidence: promoted, the interval tagged and logged."""
    small = _evals(30, 32)
    assert weigh(_Registry(champion="1"), EXP, "2", *small, PromotionConfig()).promoted
    kept = weigh(_Registry(champion="1"), EXP, "2", *small, PromotionConfig(rule="paired"))
    assert not kept.promoted and kept.rule == "paired" and kept.gain_low <= 0 < kept.gain_high
    assert "not above zero" in kept.reason and "+0.020" in kept.reason and "100 items" in kept.reason

    registry = _Registry(champion="1")
    won = weigh(registry, EXP, "2", *_evals(30, 50), PromotionConfig(rule="paired"))
    assert won.promoted and 0 < won.gain_low < 0.2 < won.gain_high and "above zero" in won.reason
    record_decision(registry, EXP, 3, won)
    tags, metrics = registry.writes[0][2], registry.writes[1][2]
    assert tags["aitp.rule"] == "paired" and tags["aitp.gain_ci95"] == f"{won.gain_low:+.4f} {won.gain_high:+.4f}"
    assert metrics["promotion/gain_ci95_low"] == won.gain_low and metrics["promotion/gain_ci95_high"] == won.gain_high


def test_the_paired_rule_is_refused_without_per_item_results_or_for_another_metric():
    with pytest.raises(PromotionError, match="per-item results"):
        weigh(
            _Registry(champion="1"),
            EXP,
            "2",
            _Eval("mb", "ev", 0.5),
            _Eval("ma", "ev", 0.3),
            PromotionConfig(rule="paired"),
        )
    with pytest.raises(ValueError, match="set promotion.metric: pass_rate"):
        PromotionConfig(rule="paired", metric="mean_score")


def test_judge_records_every_decision_but_that_of_a_version_already_champion():
    first = _Registry(champion=None)
    decision = judge(first, EXP, 0, "2", _Eval("mb", "ev", 0.3), None)
    assert (
        decision.promoted
        and decision.reason == "promoted: v2 pass_rate 0.3000 vs no champion; first model: becomes champion"
    )
    assert [w[0] for w in first.writes] == ["version tags", "metrics", "run tag"]
    wins = _Registry(champion="1")
    decision = judge(wins, EXP, 1, "2", _Eval("mb", "ev", 0.3), _Eval("ma", "ev", 0.25))
    assert decision.promoted and decision.reason.endswith("; wins by +0.0500 (margin 0)")
    held = _Registry(champion="2")
    decision = judge(held, EXP, 2, "2", _Eval("mb", "ev", 0.3), None)
    assert decision == Decision(False, "version 2 is already champion", "2", "2", 0.3, 0.3, "pass_rate", 0.0, "ev")
    assert held.writes == []
    with pytest.raises(PromotionError, match="different eval sets"):
        judge(wins, EXP, 1, "2", _Eval("mb", "ev", 0.3), _Eval("ma", "other", 0.25))


def test_gate_accepts_a_better_challenger_refuses_a_worse_one_and_rolls_back(loop):
    home, registry, untrained, trained, worse = loop
    client = registry.client

    v1 = registry.register(EXP, 0, untrained)
    first = gate(registry, EXP, 0, EVALUATOR)
    assert first.promoted and first.champion is None and "first model" in first.reason
    assert registry.aliases(EXP) == {CHALLENGER: v1.version, CHAMPION: v1.version}

    registry.log_training(EXP, 1, trained)
    v2 = registry.register(EXP, 1, trained)
    better = gate(registry, EXP, 1, EVALUATOR, PromotionConfig(margin=0.01))
    assert better.promoted, better.reason
    assert better.challenger_score > better.champion_score == 0.0  # real numbers: trained beats untrained
    # The paired rule reads both evaluations' items back from the lake: the same gain `aitp` reports for them.
    loaded = [EVALUATOR.load(home, EXP, v.model_version) for v in (v2, v1)]
    _, _, gain = decide_paired(*loaded, 0.0)
    reported = paired_gain(home, EXP, v1.model_version, v2.model_version)
    assert (gain.n_items, gain.gain, gain.low, gain.high) == (100, reported.gain, reported.low, reported.high)
    assert registry.aliases(EXP) == {CHALLENGER: v2.version, CHAMPION: v2.version, PREVIOUS: v1.version}

    v3 = registry.register(EXP, 2, worse)
    refused = gate(registry, EXP, 2, EVALUATOR, PromotionConfig(margin=0.01))
    assert not refused.promoted and refused.challenger_score < refused.champion_score
    assert registry.aliases(EXP) == {CHALLENGER: v3.version, CHAMPION: v2.version, PREVIOUS: v1.version}

    # The decisions and both scores are on the versions and in the lake's iterations table.
    tags = client.get_model_version(model_name(EXP), v3.version).tags
    assert tags["aitp.decision"] == "rejected" and float(tags["aitp.champion_score"]) == refused.champion_score
    assert client.get_model_version(model_name(EXP), v2.version).tags["aitp.previous_champion"] == v1.version
    rows = (
        connect(home)
        .execute(
            "SELECT iteration, promoted, model_out, promote_reason FROM iterations WHERE experiment = $e ORDER BY 1",
            {"e": EXP},
        )
        .fetchall()
    )
    assert [(r[0], r[1]) for r in rows] == [(0, True), (1, True), (2, False)]
    assert rows[1][2] == v2.model_version and "pass_rate" in rows[1][3]

    back = rollback(registry, EXP)
    assert back.promoted and back.challenger == v1.version
    assert registry.aliases(EXP) == {CHALLENGER: v3.version, CHAMPION: v1.version}
    assert client.get_model_version(model_name(EXP), v2.version).tags["aitp.rolled_back"] == "true"
    with pytest.raises(PromotionError, match="no previous champion"):
        rollback(registry, EXP)


def test_runs_metrics_and_artifacts_are_in_mlflow(loop):
    home, registry, untrained, trained, worse = loop
    client = registry.client
    if not registry.aliases(EXP):
        pytest.skip("runs after the gate test")
    experiment = client.get_experiment_by_name(EXP)
    assert experiment.artifact_location.startswith((home / "mlartifacts").as_uri())
    runs = client.search_runs([experiment.experiment_id])
    parents = [r for r in runs if r.data.tags.get("aitp.role") == "experiment"]
    children = {r.data.tags["aitp.iteration"]: r for r in runs if r.data.tags.get("aitp.role") == "iteration"}
    assert len(parents) == 1 and sorted(children) == ["0", "1", "2"]
    assert all(r.data.tags["mlflow.parentRunId"] == parents[0].info.run_id for r in children.values())
    one = children["1"]
    assert (
        "eval/challenger/pass_rate" in one.data.metrics
        and "eval/challenger/basic_arithmetic/pass_rate" in one.data.metrics
    )
    assert one.data.params["train.steps"] == "150" and "train/loss" in one.data.metrics
    assert one.data.metrics["promotion/promoted"] == 1.0
    names = {a.path for a in client.list_artifacts(one.info.run_id, "checkpoint")}
    assert {"checkpoint/model.safetensors", "checkpoint/config.json", "checkpoint/training.json"} <= names
    version = client.get_model_version(model_name(EXP), "2")
    assert version.source.endswith("/checkpoint") and version.run_id == one.info.run_id


def test_errors_never_move_the_champion(loop, monkeypatch):
    home, registry, untrained, trained, worse = loop
    exp = "gate-errors"
    registry.register(exp, 0, untrained)
    gate(registry, exp, 0, EVALUATOR)
    challenger = registry.register(exp, 1, trained)
    before = registry.aliases(exp)
    champion_eval = evaluate(home, exp, 0, untrained, EVAL)
    challenger_eval = evaluate(home, exp, 1, trained, EVAL)

    # Evals on different eval sets, or of another model, are refused before anything is written.
    other = EVAL.model_copy(update={"name": "other"})
    with pytest.raises(PromotionError, match="different eval sets"):
        promote(registry, exp, 1, challenger.version, challenger_eval, evaluate(home, exp, 1, untrained, other))
    with pytest.raises(PromotionError, match="evaluate version"):
        promote(registry, exp, 1, challenger.version, champion_eval, champion_eval)
    assert registry.aliases(exp) == before

    # The registry fails while moving aliases: champion stays, the lake says not promoted.
    real = registry.set_alias

    def failing(experiment, alias, version):
        if alias == CHAMPION:
            raise RegistryError("MLflow at test failed to set an alias (boom): check the server")
        real(experiment, alias, version)

    monkeypatch.setattr(registry, "set_alias", failing)
    with pytest.raises(RegistryError, match="boom"):
        gate(registry, exp, 1, EVALUATOR, challenger=challenger.version)
    assert registry.aliases(exp)[CHAMPION] == before[CHAMPION]
    row = (
        connect(home)
        .execute("SELECT promoted, promote_reason FROM iterations WHERE experiment = $e AND iteration = 1", {"e": exp})
        .fetchone()
    )
    assert row[0] is False and row[1].startswith("registry error")


def test_an_unreachable_registry_is_a_one_line_error(loop, monkeypatch):
    home, registry, untrained, trained, worse = loop
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:9")
    away = Registry(home)
    with pytest.raises(RegistryError, match="unreachable") as err:
        away.register("gate-away", 0, untrained)
    assert "\n" not in str(err.value) and "MLFLOW_TRACKING_URI" in str(err.value)
    with pytest.raises(RegistryError):
        gate(away, "gate-away", 0, EVALUATOR)
