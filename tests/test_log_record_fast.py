"""log_record's fast paths on the app thread (issue 33, "the costs that came back") give what
the general paths give: the same record (contexts, ground truths, drops noted and counted, the
session), the same errors, the same sampling decisions and hash, the same id checks.

Each fast path is compared with the general one it stands for, on real records, a real
client and its SQLite store."""

from __future__ import annotations

import dataclasses
import hashlib
import math
import random
import re
from pathlib import Path
from typing import Any

import pytest

from tracescore import Context, RagRecord
from tracescore._client import manual
from tracescore._client.manual import (
    MAX_LOG_CONTEXT_CHARS,
    MAX_LOG_CONTEXTS,
    _bounded,
    _check_ground_truth,
    _manual_record,
)
from tracescore._internal.frozen import fast_constructor
from tracescore._internal.ids import new_ids
from tracescore._internal.validate import check_context, hot_reason, valid_ids
from tracescore.sampling import DEFAULT_RULES, FORCE_SAMPLE_KEY, Decision, Sampler, trace_fraction
from tracescore.store import open_store

TID, SID = "0123456789abcdef0123456789abcdef", "fedcba9876543210"


def _fields(obj: Any) -> dict[str, Any]:
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}


# -- the slot-setting constructor ---------------------------------------------------------------
def test_fast_constructor_builds_what_the_class_builds() -> None:
    params = ("trace_id", "span_id", "query", "answer", "contexts", "ground_truths",
              "metadata", "session_id", "user_id", "end_time_ns", "source")
    build = fast_constructor(RagRecord, params)
    values = (TID, SID, "q", "a", (Context("c"),), ("g",), {"k": 1}, "s", "u", 5, "manual")
    got, want = build(*values), RagRecord(**dict(zip(params, values, strict=True)))
    assert type(got) is RagRecord and got == want and _fields(got) == _fields(want)
    assert got.record_id == want.record_id and repr(got) == repr(want)
    # fields left to their defaults get them; a default factory's, a new object each time
    ids_only = fast_constructor(RagRecord, ("trace_id", "span_id"))
    a, b = ids_only(TID, SID), ids_only(TID, SID)
    assert _fields(a) == _fields(RagRecord(TID, SID)) and a.metadata is not b.metadata
    c1, c2 = (fast_constructor(Context, ("text",))("t") for _ in range(2))
    assert c1 == Context("t") and c1.metadata == {} and c1.metadata is not c2.metadata
    with pytest.raises(dataclasses.FrozenInstanceError):
        got.query = "x"  # type: ignore[misc]


def test_fast_constructor_runs_post_init_unless_told_and_falls_back() -> None:
    with_score = fast_constructor(Context, ("text", "score"))
    assert with_score("t", math.nan).score is None  # Context.__post_init__ ran
    assert with_score("t", 0.5) == Context("t", score=0.5)
    # log_record's context builder leaves __post_init__ out: it changes nothing for a text
    texts = ["", "x", "é" * 3, "a\x00b", "x" * 10_000]
    assert [manual._new_context(t) for t in texts] == [Context(t) for t in texts]
    assert [_fields(manual._new_context(t)) for t in texts] == [_fields(Context(t))
                                                               for t in texts]

    @dataclasses.dataclass(frozen=True)  # not slotted: the class's own constructor
    class Plain:
        a: int
        b: list[int] = dataclasses.field(default_factory=list)

    build = fast_constructor(Plain, ("a",))
    assert build(3) == Plain(3) and type(build(3)) is Plain


# -- the plain-str fast path of _manual_record --------------------------------------------------
def _general(query: Any, answer: Any, contexts: Any, ground_truths: Any, metadata: Any
             ) -> tuple[RagRecord, int]:
    """What _manual_record makes of the same input through its general path (generators:
    no fast path)."""
    return _manual_record(query, answer, (c for c in contexts), (g for g in ground_truths),
                          metadata, TID, SID)


CASES = {
    "within the bounds": (["c1", "c2", "c3" * 100], ["g"]),
    "empty": ([], []),
    "tuples": (("a", "b"), ("g1", "g2")),
    "a str subclass": ([type("S", (str,), {})("sub"), "b"], ["g"]),
    "Contexts and str": ([Context("a", id="1", score=0.5), "b"], ["g"]),
    "beyond the count": ([f"c{i}" for i in range(MAX_LOG_CONTEXTS + 7)],
                         [f"g{i}" for i in range(MAX_LOG_CONTEXTS + 2)]),
    "beyond the characters": (["x" * 900_000] * 3, ["y" * (MAX_LOG_CONTEXT_CHARS + 1)]),
    "exactly at the bounds": (["x" * (MAX_LOG_CONTEXT_CHARS // MAX_LOG_CONTEXTS)]
                              * MAX_LOG_CONTEXTS, ["g" * MAX_LOG_CONTEXT_CHARS]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_lists_give_the_record_the_general_path_gives(case: str) -> None:
    contexts, gts = CASES[case]
    got, dropped = _manual_record("q", "a", contexts, gts, {"k": 1}, TID, SID)
    want, want_dropped = _general("q", "a", contexts, gts, {"k": 1})
    assert dropped == want_dropped and _fields(got) == _fields(want)
    assert all(type(c) is Context for c in got.contexts)
    assert type(got.contexts) is tuple and type(got.ground_truths) is tuple
    # and what _bounded keeps of them, item for item
    kept, cut = _bounded(list(contexts), check_context)
    assert list(got.contexts) == kept and got.metadata.get(
        "tracescore.contexts_dropped", 0) == dropped
    kept_g, cut_g = _bounded(list(gts), _check_ground_truth)
    assert list(got.ground_truths) == kept_g and dropped == cut + cut_g


def test_the_bounds_note_in_the_metadata() -> None:
    rec, dropped = _manual_record("q", None, ["x"] * (MAX_LOG_CONTEXTS + 3), ["g"],
                                  {"tracescore.truncated": ["items"]}, TID, SID)
    assert dropped == 3 and len(rec.contexts) == MAX_LOG_CONTEXTS
    assert rec.metadata["tracescore.contexts_dropped"] == 3
    assert rec.metadata["tracescore.truncated"] == ["contexts", "items"]
    rec, dropped = _manual_record("q", None, ["x", "y"], ["g" * 1_500_000] * 2, None, TID, SID)
    assert dropped == 1 and rec.ground_truths == ("g" * 1_500_000,)
    assert rec.metadata == {"tracescore.contexts_dropped": 1,
                            "tracescore.truncated": ["ground_truths"]}


def test_the_caller_list_is_read_once() -> None:
    contexts = ["a", "b"]
    rec, _ = _manual_record("q", "a", contexts, [], None, None, None)
    contexts.append("c")
    contexts[0] = "z"
    assert [c.text for c in rec.contexts] == ["a", "b"]


@pytest.mark.parametrize("kw, exc, error", [
    ({"query": 3}, TypeError, r"query must be a str or None, got int"),
    ({"answer": b"a"}, TypeError, r"answer must be a str or None, got bytes"),
    ({"contexts": "one str"}, TypeError,
     r"contexts must be a sequence \(list or tuple\), not a single str"),
    ({"contexts": None}, TypeError, r"contexts must be a sequence .*NoneType"),
    ({"ground_truths": {"a": 1}}, TypeError, r"ground_truths must be a sequence .*dict"),
    ({"contexts": ["a", 4]}, TypeError, r"contexts\[1\] must be a str or Context, got int"),
    ({"contexts": ("a", Context(5))}, TypeError,  # type: ignore[arg-type]
     r"contexts\[1\]\.text must be a str"),
    ({"ground_truths": ("a", None)}, TypeError, r"ground_truths\[1\] must be a str, got NoneType"),
    ({"metadata": [1]}, TypeError, r"metadata must be a mapping"),
    ({"trace_id": "XYZ"}, ValueError, r"trace_id must be 32 hex characters"),
    ({"span_id": "0" * 16}, ValueError, r"span_id must not be all zeros"),
    ({"session_id": 5}, TypeError, r"session_id must be a str or None, got int"),
    ({"user_id": 0}, TypeError, r"user_id must be a str or None, got int"),
    # the arguments are checked in the order they were: ids before the session, the query
    # before the contexts
    ({"trace_id": "XYZ", "session_id": 5}, ValueError, r"trace_id must be 32"),
    ({"contexts": ["a", 4], "query": 1}, TypeError, r"query must be"),
])
def test_bad_input_gets_the_clear_error(make_ts: Any, kw: dict[str, Any], exc: type,
                                        error: str) -> None:
    ts, _ = make_ts(metrics=["token_f1"])
    with pytest.raises(exc, match=error):
        ts.log_record(**{"query": "q", **kw})
    with ts.run(session_id="s"), pytest.raises(exc, match=error):  # a scope changes nothing
        ts.log_record(**{"query": "q", **kw})
    assert ts.stats()["records_seen"] == 0  # nothing went in


def test_new_ids_are_lower_hex_and_fresh() -> None:
    ids = [new_ids() for _ in range(2_000)]
    assert len({t for t, _ in ids}) == len(ids) and len({s for _, s in ids}) == len(ids)
    for t, s in ids:
        assert re.fullmatch(r"[0-9a-f]{32}", t) and re.fullmatch(r"[0-9a-f]{16}", s)
        assert t != "0" * 32 and s != "0" * 16
    rec, _ = _manual_record("q", "a", [], [], None, None, SID)
    assert rec.span_id == SID and re.fullmatch(r"[0-9a-f]{32}", rec.trace_id)
    rec, _ = _manual_record("q", "a", [], [], None, TID.upper(), None)
    assert rec.trace_id == TID and re.fullmatch(r"[0-9a-f]{16}", rec.span_id)


# -- end to end: stored, counted, sessions ------------------------------------------------------
def test_stored_records_and_drop_counts(make_ts: Any, db_path: Path) -> None:
    ts, _ = make_ts(metrics=["token_f1"], sample_rate=1.0)
    within = ts.log_record(query="q1", answer="a", contexts=["c1", "c2"], ground_truths=["a"],
                           metadata={"k": "v"})
    beyond = ts.log_record(query="q2", answer="a",
                           contexts=[f"c{i}" for i in range(MAX_LOG_CONTEXTS + 4)],
                           ground_truths=["g"] * (MAX_LOG_CONTEXTS + 1))
    same_beyond = ts.log_record(query="q2", answer="a",
                                contexts=(f"c{i}" for i in range(MAX_LOG_CONTEXTS + 4)),
                                ground_truths=iter(["g"] * (MAX_LOG_CONTEXTS + 1)))
    assert ts.stats()["contexts_dropped"] == 10
    assert ts.flush(60)
    store = open_store(str(db_path))
    try:
        loaded = store.load_records([within.record_id, beyond.record_id,
                                     same_beyond.record_id])
    finally:
        store.close()
    for rec in (within, beyond, same_beyond):
        back = loaded[rec.record_id]
        assert back.query == rec.query and back.contexts == rec.contexts
        assert back.ground_truths == rec.ground_truths and dict(back.metadata) == dict(
            rec.metadata)
    assert [c.text for c in within.contexts] == ["c1", "c2"] and within.metadata == {"k": "v"}
    assert dict(loaded[beyond.record_id].metadata) == {
        "tracescore.contexts_dropped": 5, "tracescore.truncated": ["contexts", "ground_truths"]}
    assert _fields(beyond) | {"trace_id": 0, "span_id": 0} == _fields(same_beyond) | {
        "trace_id": 0, "span_id": 0}


def test_session_and_user_from_the_call_or_the_scope(make_ts: Any) -> None:
    ts, _ = make_ts(metrics=["token_f1"])
    plain = ts.log_record(query="q", answer="a")
    assert (plain.session_id, plain.user_id, plain.end_time_ns) == (None, None, None)
    turn = ts.log_record(query="q", answer="a", session_id="s1", user_id="u1")
    assert (turn.session_id, turn.user_id) == ("s1", "u1") and turn.end_time_ns
    user_only = ts.log_record(query="q", answer="a", user_id="u2")
    assert (user_only.session_id, user_only.user_id, user_only.end_time_ns) == (None, "u2",
                                                                                None)
    blank = ts.log_record(query="q", answer="a", session_id="", user_id="")
    assert (blank.session_id, blank.user_id, blank.end_time_ns) == (None, None, None)
    with ts.run(session_id="s9", user_id="u9"):
        scoped = ts.log_record(query="q", answer="a")
        own = ts.log_record(query="q", answer="a", session_id="s3")
    assert (scoped.session_id, scoped.user_id) == ("s9", "u9") and scoped.end_time_ns
    assert (own.session_id, own.user_id) == ("s3", "u9")
    later = ts.log_record(query="q", answer="a", session_id="s1")
    assert later.end_time_ns >= turn.end_time_ns


# -- sampling: the inlined default rules and single rate --------------------------------------
class _General(Sampler):
    """The same sampler through the general path (a subclass: no fast path)."""


def _reference_fraction(trace_id: str) -> float:
    digest = hashlib.sha256(trace_id.encode("ascii", "replace")).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def test_trace_fraction_is_the_sha256_fraction() -> None:
    rng = random.Random(3)
    ids = [f"{rng.getrandbits(128):032x}" for _ in range(20_000)] + ["", "é", "f" * 32]
    assert [trace_fraction(t) for t in ids] == [_reference_fraction(t) for t in ids]


@pytest.mark.parametrize("rate, rates", [(0.01, {}), (0.5, {}), (0.0, {}), (1.0, {}), (1, {}),
                                         (0.3, {"b": 0.6, "c": 0.0})])
def test_decide_fast_path_equals_the_general_path(rate: float, rates: dict[str, float]) -> None:
    fast, general = Sampler(rate, rates), _General(rate, rates)
    metrics = ("a", "b", "c")
    rng = random.Random(11)
    for i in range(3_000):
        tid = f"{rng.getrandbits(128):032x}"
        md = {FORCE_SAMPLE_KEY: True} if i % 50 == 0 else (
            {FORCE_SAMPLE_KEY: 0} if i % 7 == 0 else {})
        rec = RagRecord(tid, SID, metadata=md, error="boom" if i % 97 == 0 else None)
        got, want = fast.decide(rec, metrics), general.decide(rec, metrics)
        assert got == want and type(got) is Decision and type(got.metrics) is tuple
        assert fast.decide(rec, metrics, got.u) == want
    assert fast.decide(RagRecord(TID, SID, error="x"), ()).forced == "error"


def test_decide_follows_a_changed_rate_and_custom_rules() -> None:
    s = Sampler(0.0)
    rec = RagRecord(TID, SID, metadata={"flag": 1})
    u = trace_fraction(TID)
    assert s.decide(rec, ("m",)).metrics == ()
    s.rate = min(1.0, u + 1e-9)  # changed after construction: read on every call
    assert s.decide(rec, ("m",)).metrics == ("m",)
    s.rules = list(DEFAULT_RULES) + [lambda r: "flag" if r.metadata.get("flag") else None]
    s.rate = 0.0
    assert s.decide(rec, ("m",)) == Decision(u, ("m",), "flag")


# -- the hot path's id check ------------------------------------------------------------------
class _Str(str):
    pass


@pytest.mark.parametrize("t, s", [
    (TID, SID), (TID.upper(), SID.upper()), (TID[:-1], SID), (TID + "0", SID),
    (TID, SID[:-1]), (TID[:-1], SID + "0"), (TID[:-1] + "g", SID), (TID, SID[:-1] + " "),
    ("0" * 32, "0" * 16), (TID, "\u0663" * 16), (_Str(TID), SID), (TID, _Str("xyz")),
    (TID.encode(), SID), (None, SID), (TID, 5),
])
def test_valid_ids_agrees_with_the_two_patterns(t: Any, s: Any) -> None:
    want = (isinstance(t, str) and isinstance(s, str)
            and re.fullmatch(r"[0-9a-fA-F]{32}", t) is not None
            and re.fullmatch(r"[0-9a-fA-F]{16}", s) is not None)
    assert valid_ids(t, s) is want


def test_hot_reason_keys() -> None:
    assert hot_reason(RagRecord(TID, SID)) is None
    assert hot_reason("not a record") == "not_a_record"
    assert hot_reason(RagRecord("x", SID)) == "invalid_id"
    assert hot_reason(RagRecord(TID, SID, metadata=[1])) == "invalid_metadata"  # type: ignore
    from types import MappingProxyType

    assert hot_reason(RagRecord(TID, SID, metadata=MappingProxyType({"a": 1}))) is None
