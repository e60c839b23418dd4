"""The cheap session metrics on hand-built turns: repeats (text, words, embeddings),
unanswered turns and abandonment, and the turn-level aggregates (pass share from labels or a
declared threshold, the worst turn in the score's direction)."""

from __future__ import annotations

from typing import Any

import pytest

from tracescore.record import RagRecord
from tracescore.sessions.metrics import is_unanswered, normalise, repeated_turns, session_scores


def turn(i: int, q: str | None, a: str | None = "ok", **kw: Any) -> RagRecord:
    return RagRecord(trace_id=f"{i + 1:032x}", span_id=f"{i + 1:016x}", query=q, answer=a,
                     session_id="s", **kw)


def by_name(scores: list[Any]) -> dict[str, Any]:
    return {s.name: s for s in scores}


def test_normalise() -> None:
    assert normalise("  What's the RANGE…?? ") == "what s the range"
    assert normalise("Ｃａｒｇｏ battery?") == "cargo battery"  # NFKC: full-width letters
    assert normalise(None) == ""


@pytest.mark.parametrize("questions, want", [
    (["How far can it go?", "how far can it go"], [(1, 0, "text")]),
    (["What battery does the Cargo have?", "The Cargo: what battery does it have?"],
     [(1, 0, "words")]),
    (["Range?", "Charging time?", "range"], [(2, 0, "text")]),
    (["How far?", "How long?"], []),
    # Jaccard 4/6 < 0.8: a follow-up on the same topic, not a repeat
    (["What battery does the Cargo have?", "What battery does the Trail have?"], []),
    ([None, None], []),  # no question captured: never a repeat
])
def test_repeats(questions: list[str | None], want: list[tuple[int, int, str]]) -> None:
    assert repeated_turns(questions) == want


def test_repeats_by_embedding() -> None:
    vectors = [[1.0, 0.0], [0.0, 1.0], [0.99, 0.1]]
    got = repeated_turns(["How far does it go?", "Colours?", "What's the range?"], vectors)
    assert got == [(2, 0, "embedding")]


def test_repeated_questions_share_and_one_turn_sessions() -> None:
    got = by_name(session_scores([turn(0, "a b c"), turn(1, "x"), turn(2, "A, b c!")], {}, {}))
    assert got["session.repeated_questions"].value == 1 / 2
    assert got["session.repeated_questions"].details["repeats"] == [
        {"turn": 3, "repeats_turn": 1, "how": "text"}]
    one = by_name(session_scores([turn(0, "a")], {}, {}))
    assert one["session.repeated_questions"].status == "skipped"
    assert one["session.turns"].value == 1


def test_embedder_is_used_for_repeats() -> None:
    seen: list[list[str]] = []

    def embed(texts: list[str]) -> list[list[float]]:
        seen.append(texts)
        return [[1.0, 0.0], [1.0, 0.01]]

    got = by_name(session_scores([turn(0, "How far?"), turn(1, "Range?")], {}, {}, embed))
    assert seen == [["How far?", "Range?"]]
    assert got["session.repeated_questions"].value == 1.0


def test_a_failing_embedder_leaves_the_text_checks() -> None:
    def embed(texts: list[str]) -> list[list[float]]:
        raise ConnectionError("embedding server down")

    got = by_name(session_scores([turn(0, "Range?"), turn(1, "range")], {}, {}, embed))
    rep = got["session.repeated_questions"]
    assert rep.value == 1.0 and "embedding server down" in rep.details["embedding_failed"]


def test_unanswered_and_abandoned() -> None:
    assert is_unanswered(turn(0, "q", "a")) is None
    assert is_unanswered(turn(0, "q", "  ")) == "empty answer"
    assert is_unanswered(turn(0, "q", None, error="Timeout")) == "error"
    assert is_unanswered(turn(0, "q", "half", complete=False)) == "cut off"
    assert is_unanswered(turn(0, None, None, content_captured=False)) is None  # not known
    turns = [turn(0, "q1"), turn(1, "q2", None, error="boom"), turn(2, "q3", "")]
    got = by_name(session_scores(turns, {}, {}))
    assert got["session.unanswered_turns"].value == 2 / 3
    assert got["session.abandoned"].value == 1.0
    assert "empty answer" in got["session.abandoned"].explanation
    got = by_name(session_scores(turns[:2] + [turn(2, "q3", "fine")], {}, {}))
    assert got["session.abandoned"].value == 0.0


def ok(name: str, value: float, label: str | None = None) -> dict[str, Any]:
    return {"name": name, "value": value, "label": label, "status": "ok"}


def test_turn_level_aggregates() -> None:
    turns = [turn(i, f"q{i}") for i in range(4)]
    rid = [t.record_id for t in turns]
    scores = {
        rid[0]: [ok("faithfulness", 0.9, "pass"), ok("toxicity", 0.1), ok("free", 3.0)],
        rid[1]: [ok("faithfulness", 0.4, "fail"), ok("toxicity", 0.7)],
        rid[2]: [{"name": "faithfulness", "value": None, "label": None, "status": "error"},
                 ok("toxicity", 0.2)],
        rid[3]: [ok("faithfulness", 0.8, "pass"), ok("session.turns", 9.0)],
    }
    declared = {"faithfulness": (True, 0.5), "toxicity": (False, 0.5), "free": (None, None)}
    got = by_name(session_scores(turns, scores, declared))
    f = got["session.faithfulness.passing"]
    assert f.value == pytest.approx(2 / 3)
    assert f.details == {"scored_turns": 3, "error_turns": 1, "failing_turns": [2]}
    assert got["session.faithfulness.worst"].value == 0.4
    assert got["session.faithfulness.worst"].details["record_id"] == rid[1]
    # lower is better: the worst is the highest; pass by the declared threshold
    assert got["session.toxicity.worst"].value == 0.7
    assert got["session.toxicity.passing"].value == pytest.approx(2 / 3)
    # no direction, no threshold: neither aggregate
    assert "session.free.passing" not in got and "session.free.worst" not in got
    assert "session.session.turns.worst" not in got  # session scores are not turn scores
