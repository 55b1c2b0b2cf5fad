"""Keep/drop rules of groups: the seed's threshold, uniform groups kept for SFT and labelled."""

import pytest

from aitp.errors import BadInputError
from aitp.reasoning.filtering import decide_group, filter_rows, summarize


@pytest.mark.parametrize(
    "scores, kept, reason",
    [
        ([1.0, 0.0, 0.0], True, "above_threshold"),
        ([1.0, 1.0], True, "uniform_above_threshold"),
        ([0.5, 0.0], False, "below_threshold"),
        ([0.0, 0.0, 0.0], False, "uniform_below_threshold"),
        ([0.7, 0.7], False, "uniform_below_threshold"),  # the seed keeps only scores strictly above
        ([0.71, 0.7], True, "above_threshold"),
    ],
)
def test_seed_rule_keeps_a_group_when_any_score_exceeds_the_threshold(scores, kept, reason):
    decision = decide_group(scores, 0.7)
    assert (decision.kept, decision.reason) == (kept, reason)
    assert decision.preference_signal == (kept and not reason.startswith("uniform"))
    assert (decision.reason, decision.threshold) == (reason, 0.7)


def test_filter_rows_labels_every_row_of_a_group_alike():
    rows = (
        [{"item_id": "a", "group_id": "g1", "final_score": s} for s in (1.0, 0.0)]
        + [{"item_id": "b", "group_id": "g2", "final_score": s} for s in (1.0, 1.0)]
        + [{"item_id": "c", "group_id": "g3", "final_score": 0.0}]
    )
    out = filter_rows(rows, threshold=0.5)
    assert [r["keep_reason"] for r in out] == [
        "above_threshold",
        "above_threshold",
        "uniform_above_threshold",
        "uniform_above_threshold",
        "uniform_below_threshold",
    ]
    assert [r["group_kept"] for r in out] == [True, True, True, True, False]
    assert summarize(out) == {
        "above_threshold": 1,
        "uniform_above_threshold": 1,
        "below_threshold": 0,
        "uniform_below_threshold": 1,
    }
    assert "group_kept" not in rows[0]  # the input is not modified


def test_unscored_rows_are_refused():
    with pytest.raises(BadInputError, match="score rollouts before filtering"):
        filter_rows([{"item_id": "a", "group_id": "g", "final_score": None}])
    with pytest.raises(BadInputError):
        decide_group([])
