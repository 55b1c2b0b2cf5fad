"""The curated views answer the usual questions with the right numbers."""

import math

import pytest

from aitp.lake import CURATED_VIEWS, TABLES, connect, write_partition
from aitp.lake.views import describe
from tests.lake.helpers import rollout_rows


def _wilson(k, n, z=1.959963984540054):
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


@pytest.fixture(scope="module")
def con(tmp_path_factory):
    home = tmp_path_factory.mktemp("views")
    write_partition(home, "rollouts", "e", 0, rollout_rows(4, 2))  # half pass; groups 0 and 2 kept
    write_partition(home, "rollouts", "e", 1, rollout_rows(2, 3, task="leg_counting"))
    proofs = {0: ["A", "B"], 1: ["B", "C"], 2: ["A"]}
    for it, theorems in proofs.items():
        rows = [{"theorem_id": t, "proof_id": f"{t}{it}", "verified": True} for t in theorems]
        rows += [{"theorem_id": "D", "proof_id": f"D{it}", "verified": False}]
        write_partition(home, "proofs", "e", it, rows)
    write_partition(
        home,
        "iterations",
        "e",
        0,
        [{"model_in": "m0", "model_out": "m1", "promoted": True, "mlflow_run_id": "run0", "config_hash": "c"}],
    )
    write_partition(
        home,
        "evals",
        "e",
        0,
        [
            {"model_version": "m0", "task": "basic_arithmetic", "n_samples": 100, "n_pass": 50},
            {"model_version": "m1", "task": "basic_arithmetic", "n_samples": 60, "n_pass": 40},
            {"model_version": "m1", "task": "leg_counting", "n_samples": 40, "n_pass": 30},
        ],
    )
    return connect(home)


def test_pass_rate_by_task_difficulty_iteration_with_a_95_interval(con):
    rows = con.execute(
        "SELECT iteration, task, difficulty_level, n, n_pass, pass_rate, ci95_low, ci95_high FROM pass_rate"
    ).fetchall()
    assert [r[:6] for r in rows] == [
        (0, "basic_arithmetic", 0, 4, 2, 0.5),
        (0, "basic_arithmetic", 1, 4, 2, 0.5),
        (1, "leg_counting", 0, 3, 1, 1 / 3),
        (1, "leg_counting", 1, 3, 1, 1 / 3),
    ]
    for *_, n, n_pass, _rate, low, high in rows:
        assert (low, high) == pytest.approx(_wilson(n_pass, n))
        assert low < n_pass / n < high


def test_format_violations_by_task(con):
    rows = con.execute("SELECT iteration, task, n_rollouts, n_format_errors, top_format_error FROM format_violations")
    assert rows.fetchall() == [
        (0, "basic_arithmetic", 8, 4, "no_answer_tag"),
        (1, "leg_counting", 6, 4, "no_answer_tag"),
    ]


def test_kept_and_dropped_groups_and_why(con):
    rows = con.execute("SELECT kept, keep_reason, n_groups, n_rollouts FROM group_decisions WHERE iteration = 0")
    assert rows.fetchall() == [(False, "all_same", 2, 4), (True, "mixed_scores", 2, 4)]


def test_cost_per_kept_group(con):
    row = con.execute(
        "SELECT n_groups, n_kept_groups, tokens, seconds, tokens_per_kept_group, seconds_per_kept_group"
        " FROM cost_per_kept_group WHERE iteration = 0"
    ).fetchone()
    assert row == (4, 2, 8 * 15, pytest.approx(4.0), 60.0, pytest.approx(2.0))


def test_new_versus_retained_proofs(con):
    rows = con.execute("SELECT iteration, n_proved, n_new, n_retained, n_proved_to_date FROM proof_progress")
    assert rows.fetchall() == [(0, 2, 2, 0, 2), (1, 2, 1, 1, 3), (2, 1, 0, 1, 3)]


def test_lineage_links_training_data_checkpoint_and_evaluation(con):
    row = con.execute(
        "SELECT iteration, model_in, model_out, promoted, mlflow_run_id, train_groups, train_rollouts,"
        " model_in_pass_rate, model_out_pass_rate FROM lineage"
    ).fetchone()
    assert row == (0, "m0", "m1", True, "run0", 2, 4, 0.5, 0.7)


def test_every_table_and_view_is_described(con):
    described = {name: kind for name, kind, _ in describe(con)}
    assert described == {**dict.fromkeys(TABLES, "table"), **dict.fromkeys(CURATED_VIEWS, "view")}


def test_proof_search_figures_per_iteration_and_split(tmp_path):
    """Two iterations of searches on two splits: proved, new vs retained per split, cost per proof."""

    def search(it, split, theorem, expanded, tactics, steps):
        sid = f"{theorem}-{it}"
        nodes = [
            {
                "theorem_id": theorem,
                "search_id": sid,
                "node_id": f"{sid}-{i}",
                "is_root": i == 0,
                "split": split,
                "expanded_at_step": i if i < expanded else None,
            }
            for i in range(expanded + 1)
        ]
        edges = [
            {
                "theorem_id": theorem,
                "search_id": sid,
                "edge_id": f"{sid}-e{i}",
                "src_node_id": f"{sid}-0",
                "outcome": outcome,
                "latency_s": 0.5,
            }
            for i, outcome in enumerate(tactics)
        ]
        proofs = (
            []
            if steps is None
            else [
                {
                    "theorem_id": theorem,
                    "proof_id": sid,
                    "search_id": sid,
                    "verified": True,
                    "split": split,
                    "n_steps": steps,
                }
            ]
        )
        return nodes, edges, proofs

    plan = {  # iteration -> searches (split, theorem, expansions, tactic outcomes, proof steps or None)
        0: [("train", "A", 2, ["success", "error"], 1), ("valid", "V", 4, ["error"] * 4, None)],
        1: [
            ("train", "A", 1, ["success"], 3),
            ("train", "B", 3, ["success", "error", "error"], 1),
            ("valid", "V", 2, ["success", "success"], 2),
        ],
    }
    for it, searches in plan.items():
        parts = [search(it, *s) for s in searches]
        for table, k in (("proof_nodes", 0), ("proof_edges", 1), ("proofs", 2)):
            write_partition(tmp_path, table, "p", it, [row for part in parts for row in part[k]])
    con = connect(tmp_path)
    try:
        rows = con.execute(
            "SELECT iteration, split, n_searched, n_proved, n_new, n_retained, n_proved_to_date, mean_proof_length,"
            " valid_tactic_rate, expansions_per_proof, prover_seconds_per_proof, ci95_low, ci95_high"
            " FROM proof_search ORDER BY iteration, split"
        ).fetchall()
    finally:
        con.close()
    assert [r[:11] for r in rows] == [
        (0, "train", 1, 1, 1, 0, 1, 1.0, 0.5, 2.0, 1.0),
        (0, "valid", 1, 0, 0, 0, 0, None, 0.0, None, None),
        (1, "train", 2, 2, 1, 1, 2, 2.0, 0.5, 2.0, 1.0),
        (1, "valid", 1, 1, 1, 0, 1, 2.0, 1.0, 2.0, 1.0),
    ]
    for _it, _split, n, k, *_, low, high in rows:
        assert (low, high) == pytest.approx(_wilson(k, n))
