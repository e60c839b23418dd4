"""The client by composition (issue 35): ``Tracescore`` holds parts (tracescore/_client/) with
explicit inputs; the request path calls the parts' bound methods themselves (no extra call
layer), and the client's documented methods give the same answers as the parts. Real
pipelines on SQLite (``make_ts``)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tracescore.client import Tracescore
from tracescore.record import Context, RagRecord
from tracescore.sampling import Decision

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 600


def test_no_module_of_the_library_or_the_adapters_is_over_600_lines() -> None:
    long = {p.relative_to(ROOT).as_posix(): n
            for base in ("tracescore", "integrations") for p in sorted((ROOT / base).rglob("*.py"))
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not long, f"over {MAX_LINES} lines (issue 35: split by composition): {long}"


def test_the_client_composes_its_parts_rather_than_mixing_them_in() -> None:
    assert Tracescore.__mro__ == (Tracescore, object)


@pytest.mark.parametrize("name,part", [
    ("trace_id_of", "feedback"), ("add_ground_truth", "feedback"), ("add_feedback", "feedback"),
    ("add_label", "feedback"), ("flush", "lifecycle"), ("close_sessions", "lifecycle"),
    ("shutdown", "lifecycle"), ("stats", "lifecycle")])
def test_the_documented_methods_keep_their_part_s_text_and_signature(name: str,
                                                                     part: str) -> None:
    import inspect

    from tracescore._client.feedback import Feedback
    from tracescore._client.lifecycle import Lifecycle

    method = getattr(Tracescore, name)
    done_by = getattr({"feedback": Feedback, "lifecycle": Lifecycle}[part], name)
    assert method.__doc__ and method.__doc__ == done_by.__doc__
    assert list(inspect.signature(method).parameters)[1:] == \
        list(inspect.signature(done_by).parameters)[1:]


def test_a_client_s_parts_see_what_it_says_and_does(make_ts: Any) -> None:
    ts, _ = make_ts(metrics=["token_f1"])
    with ts.run(ground_truths=["Ada"]):
        ts.log_record(query="who?", answer="Ada", trace_id="ef" * 16)
    ts.add_ground_truth("ef" * 16, ["Ada Lovelace"])
    ts.add_feedback("ef" * 16, "up", comment="fine")
    assert ts.flush(30)
    st = ts.stats()
    assert st["records_seen"] == ts.records_seen == 1 and st["scorer"]["alive"]
    assert st["written"] == 1 and st["scored_jobs"] >= 1
    assert ts.shutdown(10) and ts._closed
    assert ts.submit(RagRecord(trace_id="12" * 16, span_id="34" * 8, query="q")) is None
    with pytest.raises(TypeError):
        with ts.run(ground_truths="not a list"):
            pass


@pytest.mark.parametrize("name,part", [
    ("prepare", "privacy"), ("redact_text", "privacy"), ("redact_value", "privacy"),
    ("redact_id", "privacy"), ("redact_error", "privacy"),
    ("_jobs_to_run", "planner"), ("_plan_jobs", "planner"), ("recount_hold", "planner"),
])
def test_the_request_path_calls_the_parts_bound_methods_directly(make_ts: Any, name: str,
                                                                  part: str) -> None:
    ts, _ = make_ts(metrics=["token_f1"])
    method = getattr(ts, name)
    assert method.__self__ is getattr(ts, part)  # one call, straight into the part
    assert method.__func__ is getattr(type(getattr(ts, part)), name.lstrip("_"))
    if not name.startswith("_"):  # the documented method is still on the class
        assert getattr(Tracescore, name).__doc__


def _record() -> RagRecord:
    return RagRecord(trace_id="ab" * 16, span_id="cd" * 8, query="who is Ada?",
                     answer="Ada Lovelace", contexts=(Context("Ada wrote notes", id="d1",
                                                              metadata={"src": "wiki"}),),
                     ground_truths=("Ada",), metadata={"k": "v", "n": 3}, user_id="alice",
                     error="ValueError: alice's text")


@pytest.mark.parametrize("kwargs", [{"redact": lambda t: re.sub(r"[Aa]", "*", t)},
                                    {"capture_content": False}, {}])
def test_the_documented_methods_agree_with_the_part(make_ts: Any, kwargs: dict[str, Any]
                                                    ) -> None:
    ts, _ = make_ts(metrics=["token_f1"], **kwargs)
    rec, err = _record(), KeyError("alice")
    for name, arg in (("prepare", rec), ("redact_text", "alice"), ("redact_value", rec.metadata),
                      ("redact_id", "alice"), ("redact_error", err)):
        assert getattr(Tracescore, name)(ts, arg) == getattr(ts, name)(arg), name
    prepared = ts.prepare(rec)
    if "redact" in kwargs:
        assert prepared.query == "who is *d*?" and prepared.user_id == "*lice"
        assert prepared.contexts[0].text == "*d* wrote notes"
    elif kwargs.get("capture_content") is False:
        assert prepared.query is None and prepared.contexts == () and not prepared.content_captured
        assert prepared.user_id.startswith("sha256:") and prepared.error == "ValueError"
    else:
        assert prepared is rec  # nothing to do: the very record


def test_the_planner_counts_what_the_client_submits(make_ts: Any) -> None:
    ts, _ = make_ts(metrics=["token_f1", "rgb_rejection"])
    rec = _record()
    decision = Decision(0.0, ("token_f1", "rgb_rejection"))
    jobs = ts._plan_jobs(rec, decision)
    assert {j.metric for j in jobs} == {"token_f1", "rgb_rejection"}
    assert ts._jobs_to_run(rec, decision.metrics) == sum(j.status == "pending" for j in jobs) == 2
    no_answer = rec.replace(answer=None)
    assert ts._jobs_to_run(no_answer, decision.metrics) < 2  # token_f1 needs the answer
    assert ts.planner.plans  # plans are cached by the record's shape
