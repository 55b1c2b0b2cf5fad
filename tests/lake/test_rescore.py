"""`aitp rescore`: new scores land in `rescores` beside untouched originals, with changes per task."""

import hashlib

import pytest

from aitp.lake import connect, rescore, write_partition
from aitp.lake.errors import UnknownPartitionError
from tests.lake.helpers import cli, rollout_rows


def _everyone_passes(item, completion):
    return 1.0, 1.0, None, "x"


def _fingerprint(home):
    files = sorted((home / "lake/rollouts").rglob("*"))
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in files if p.is_file()}


@pytest.fixture
def home(tmp_path):
    home = tmp_path / "h"
    write_partition(home, "rollouts", "e", 0, rollout_rows(3, 2))
    write_partition(home, "rollouts", "e", 1, rollout_rows(2, 2, task="leg_counting"), shard="w1")
    return home


def test_changes_are_counted_per_task_and_originals_are_untouched(home):
    before = _fingerprint(home)
    changes = rescore(home, "e", score_fn=_everyone_passes)
    assert [(c.task, c.n_rollouts, c.n_raw_changed, c.n_lenient_changed, c.n_format_changed) for c in changes] == [
        ("basic_arithmetic", 6, 3, 3, 3),
        ("leg_counting", 4, 2, 2, 2),
    ]
    assert _fingerprint(home) == before
    con = connect(home)
    assert con.execute("SELECT sum(raw_score), sum(rescored_raw_score) FROM rollouts_rescored").fetchone() == (
        5.0,
        10.0,
    )
    rows = con.execute("SELECT iteration, task, n_rollouts, n_raw_changed FROM rescore_changes").fetchall()
    assert rows == [(0, "basic_arithmetic", 6, 3), (1, "leg_counting", 4, 2)]


def test_rescoring_again_replaces_instead_of_adding(home):
    rescore(home, "e", score_fn=_everyone_passes)
    rescore(home, "e", iteration=1, score_fn=_everyone_passes)
    rescore(home, "e", iteration=1, score_fn=_everyone_passes)
    con = connect(home)
    assert con.execute("SELECT count(*) FROM rescores").fetchone() == (10,)
    assert con.execute("SELECT count(*) FROM rollouts_rescored").fetchone() == (10,)


def test_unknown_experiment_is_a_one_line_error(home):
    with pytest.raises(UnknownPartitionError, match="unknown experiment 'x'.*known: e$"):
        rescore(home, "x", score_fn=_everyone_passes)


def test_the_current_verifier_finds_the_stored_scores_that_were_wrong(tmp_path):
    """Real items, the real verifier: two stored scores are deliberately wrong, and only those change."""
    from aitp.reasoning.items import generate_items
    from aitp.reasoning.prompt import build_messages

    home = tmp_path / "h"
    items = generate_items("basic_arithmetic", 2, seed=1)
    write_partition(  # the first item sits in the items table, the second is regenerated from identity
        home,
        "items",
        "e",
        0,
        [{"item_id": items[0].item_id, "task": "basic_arithmetic", "question": items[0].question,
          "gold_answer": items[0].answer, "metadata_json": items[0].metadata}],
    )  # fmt: skip
    rows = []
    for it in items:
        # both samples stored as failed: the right answer's 0.0 is the lie the verifier must catch
        for s, completion in enumerate([f"<answer>{it.answer}</answer>", "<answer>-1</answer>"]):
            rows.append({
                "item_id": it.item_id, "task": it.task, "config_json": it.config, "seed": it.seed,
                "item_index": it.index, "split": it.split, "difficulty_level": it.level,
                "gold_answer": it.answer, "group_id": "g", "sample_index": s, "prompt": build_messages(it),
                "completion": completion, "raw_score": 0.0, "lenient_score": 0.0,
            })  # fmt: skip
    write_partition(home, "rollouts", "e", 0, rows)

    result = cli("rescore", "--home", str(home), "--experiment", "e", "--iteration", "0")
    assert result.exit_code == 0, result.exception
    assert result.stdout.splitlines()[2].split() == ["basic_arithmetic", "4", "2", "2", "0", "0"]
    changed = (
        connect(home)
        .execute("SELECT item_id, sample_index FROM rollouts_rescored WHERE raw_changed ORDER BY ALL")
        .fetchall()
    )
    assert changed == sorted((it.item_id, 0) for it in items)
