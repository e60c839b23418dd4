"""Issue 11 §5: at noise ratio 1.0 the report gives both the rejection rate (refusals) and
RGB's all_rate (evalue.py: a refusal or a correct answer)."""

from __future__ import annotations

from tracescore.reports.rgb import RecordFacts, aggregate, format_rgb


def test_all_rate_matches_rgb_evalue_on_its_labels() -> None:
    # RGB labels at noise 1.0: [1] correct, [0] wrong, [-1] "insufficient information",
    # [1, 1] correct (both parts) → evalue.py's all_rate = 3 / 4
    facts = [
        RecordFacts("rejection", correct=True, refused=False),
        RecordFacts("rejection", correct=False, refused=False),
        RecordFacts("rejection", correct=None, refused=True),
        RecordFacts("rejection", correct=True, refused=False),
    ]
    live = aggregate(facts)
    got = live.to_json()["negative_rejection"]
    assert got["all_rate"]["rate"] == 0.75
    assert got["rejection_rate"]["rate"] == 0.25
    text = format_rgb(live)
    assert "RGB all_rate (refused or answered correctly): 3 of 4" in text
