"""DeepEval's ToolCorrectnessMetric reproduced as the local ``tool_correctness`` metric.

Each vector's expected value was computed by DeepEval 4.3.1's own ``ToolCorrectnessMetric``
(deepeval/metrics/tool_correctness/tool_correctness.py, ``async_mode=False``, no
``available_tools`` so no model call): the last column. Where our documented divergences
apply (each call used once; ``args``/``output`` absent = any), a test of its own says so.
"""

from __future__ import annotations

from typing import Any

import pytest

from tracescore.metrics import get as get_metric
from tracescore.metrics.tool_correctness import ToolCorrectness, tool_correctness
from tracescore.metrics.trajectory import UNSET
from tracescore.record import AgentRun, RagRecord, ToolCall, ToolSpec


def c(name: str, args: dict[str, Any] | None = None, out: str | None = None
      ) -> tuple[str, Any, str | None]:
    return name, args if args is not None else {}, out


def e(name: str, args: dict[str, Any] | None = None, out: Any = UNSET) -> tuple[str, Any, Any]:
    return name, args if args is not None else {}, out


P, OUT = "input_parameters", "output"
W = {"city": "Paris", "unit": "C"}

# (called, expected, evaluation_params, exact, ordering, DeepEval's score)
VECTORS = [
    # the docs' example: one of two expected tools called
    ([c("WebSearch")], [e("WebSearch"), e("ToolQuery")], (), False, False, 0.5),
    ([c("WebSearch"), c("ToolQuery")], [e("WebSearch")], (), False, False, 1.0),
    ([c("WebSearch"), c("ToolQuery")], [e("WebSearch")], (), True, False, 0.0),
    ([c("WebSearch"), c("ToolQuery")], [e("WebSearch"), e("ToolQuery")], (), True, False, 1.0),
    ([c("ToolQuery"), c("WebSearch")], [e("WebSearch"), e("ToolQuery")], (), True, False, 0.0),
    ([c("ToolQuery"), c("WebSearch")], [e("WebSearch"), e("ToolQuery")], (), False, False, 1.0),
    # ordering: the weighted LCS over the expected count
    ([c("a"), c("c"), c("b")], [e("a"), e("b"), e("c")], (), False, True, 2 / 3),
    ([c("c"), c("b"), c("a")], [e("a"), e("b"), e("c")], (), False, True, 1 / 3),
    ([c("a"), c("x"), c("b"), c("c")], [e("a"), e("b"), e("c")], (), False, True, 1.0),
    # arguments: 1/|union of keys| per equal value, nested objects recursively
    ([c("w", {"city": "Paris", "unit": "F"})], [e("w", W)], (P,), False, False, 0.5),
    ([c("w", {"city": "Paris"})], [e("w", W)], (P,), False, False, 0.5),
    ([c("w", {"city": "Paris", "unit": "C", "x": 1})], [e("w", W)], (P,), False, False, 2 / 3),
    ([c("w", {"q": {"a": 1, "b": 3}, "k": 1})], [e("w", {"q": {"a": 1, "b": 2}, "k": 1})],
     (P,), False, False, 0.75),
    ([c("w", {"city": "Paris", "unit": "F"})], [e("w", W)], (P,), False, True, 0.5),
    ([c("w", {"city": "Paris", "unit": "F"})], [e("w", W)], (P,), True, False, 0.0),
    ([c("w", dict(W))], [e("w", W)], (P,), True, False, 1.0),
    # the best-scoring call of the name wins
    ([c("w", {"city": "Rome", "unit": "F"}), c("w", dict(W))], [e("w", W)], (P,), False, False,
     1.0),
    # outputs
    ([c("w", None, "sunny")], [e("w", None, "sunny")], (OUT,), False, False, 1.0),
    ([c("w", None, "rain")], [e("w", None, "sunny")], (OUT,), False, False, 0.0),
    ([c("w", None, "rain")], [e("w", None, "sunny")], (OUT,), True, False, 0.0),
    ([c("w", None, "rain")], [e("w", None, "sunny")], (), False, False, 1.0),
    # empty sides
    ([], [], (), False, False, 1.0),
    ([c("a")], [], (), False, False, 0.0),
    ([], [], (), False, True, 1.0),
    ([c("a")], [], (), False, True, 0.0),
    ([], [], (), True, False, 1.0),
    ([], [e("a")], (), False, False, 0.0),
]


@pytest.mark.parametrize("called, expected, params, exact, ordering, want", VECTORS)
def test_deepeval_vectors(called: Any, expected: Any, params: Any, exact: bool,
                          ordering: bool, want: float) -> None:
    got = tool_correctness(called, expected, evaluation_params=params,
                           should_exact_match=exact, should_consider_ordering=ordering)
    assert got == pytest.approx(want)


def test_divergences_each_call_used_once_and_unset_means_any() -> None:
    # DeepEval marks used calls by value: two identical calls match one expected (0.5)
    assert tool_correctness([c("a"), c("a")], [e("a"), e("a")]) == 1.0
    assert tool_correctness([c("a")], [e("a"), e("a")]) == 0.5
    # an expected call without args or output matches any
    assert tool_correctness([c("w", {"x": 1}, "r")], [("w", None, UNSET)],
                            evaluation_params=(P, OUT)) == 1.0


def record(calls: list[tuple[str, dict[str, Any], str | None]], **md: Any) -> RagRecord:
    return RagRecord(
        trace_id="a" * 32, span_id="b" * 16, query="q", answer="a", metadata=md,
        agent=AgentRun(tools=(ToolSpec("search"), ToolSpec("lookup")),
                       calls=tuple(ToolCall(n, a, step=i + 1, result=r)
                                   for i, (n, a, r) in enumerate(calls)),
                       model_calls=len(calls) + 1, steps=len(calls) + 1))


def test_the_metric_on_records_from_metadata_and_routes() -> None:
    m = get_metric("tool_correctness")
    assert isinstance(m, ToolCorrectness)
    rec = record([("search", {"q": "x"}, "hit")],
                 expected_tool_calls=[{"name": "search", "args": {"q": "x"}}, "lookup"])
    s = m(rec)
    assert s.value == 0.5 and "missing lookup" in (s.explanation or "")
    assert s.label == "pass"  # threshold 0.5, DeepEval's default
    strict = ToolCorrectness(strict_mode=True)
    assert strict(rec).value == 0.0
    routed = ToolCorrectness(routes={"faq": [{"name": "search", "args": {"q": "y"},
                                              "output": "hit"}]},
                             evaluation_params=["input_parameters", "output"])
    r2 = routed(record([("search", {"q": "x"}, "hit")], route="faq"))
    assert r2.value == 0.0
    r3 = routed(record([("search", {"q": "y"}, "hit")], route="faq"))
    assert r3.value == 1.0
    # no expected calls: skipped, never 0; not an agent run: skipped by the requirement
    assert m(record([("search", {}, None)])).status == "skipped"
    with pytest.raises(ValueError, match="evaluation_params"):
        ToolCorrectness(evaluation_params=["inputs"])
