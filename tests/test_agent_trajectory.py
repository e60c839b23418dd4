"""Reference-based tool-call matches against their sources' own published test vectors, and
the tool-schema validator against Pydantic (the library that wrote the schemas).

- Ragas ``ToolCallAccuracy``: explodinggradients/ragas ``tests/unit/test_tool_call_accuracy.py``
  (their tests mock the argument comparison with the values Ragas' default ``ExactMatch``
  gives, which we compute for real).
- Ragas ``ToolCallF1``: ``tests/unit/test_tool_call_f1.py``.
- agentevals trajectory match: langchain-ai/agentevals ``python/tests/test_trajectory.py``
  (the parametrised verdicts per mode; messages turned into steps of calls).
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, Field, ValidationError

from tracescore.metrics.agent_checks import analyse
from tracescore.metrics.jsonschema_lite import validate
from tracescore.metrics.trajectory import (
    Expected,
    ToolCallAccuracy,
    ToolCallF1,
    TrajectoryMatch,
    TrajectorySupersetMatch,
    expected_steps,
    match_trajectory,
    ragas_accuracy,
    ragas_f1,
)
from tracescore.record import AgentRun, RagRecord, ToolCall, ToolSpec


def tc(name: str, **args: Any) -> tuple[str, dict[str, Any]]:
    return name, args


def ex(name: str, **args: Any) -> Expected:
    return Expected(name, args)


# -- Ragas ToolCallAccuracy (test_tool_call_accuracy.py) ---------------------------------------
@pytest.mark.parametrize("pred, ref, want", [
    # test_perfect_match_scenario
    ([tc("search", query="python"), tc("filter", type="recent")],
     [ex("search", query="python"), ex("filter", type="recent")], 1.0),
    # test_no_predicted_tool_calls
    ([], [ex("search", query="python")], 0.0),
    # test_sequence_misalignment
    ([tc("filter", type="recent"), tc("search", query="python")],
     [ex("search", query="python"), ex("filter", type="recent")], 0.0),
    # test_length_mismatch_more_predicted
    ([tc("search", query="python"), tc("filter", type="recent")],
     [ex("search", query="python")], 0.0),
    # test_length_mismatch_fewer_predicted
    ([tc("search", query="python")],
     [ex("search", query="python"), ex("filter", type="recent")], 0.0),
    # test_partial_argument_match: (0.5 + 1.0) / 2
    ([tc("search", query="python", limit=5), tc("filter", type="recent")],
     [ex("search", query="python", limit=10), ex("filter", type="recent")], 0.75),
    # test_wrong_tool_names
    ([tc("wrong_tool", query="python")], [ex("search", query="python")], 0.0),
    # test_multiple_ai_messages (calls spread over two messages: one list in order)
    ([tc("search", query="python"), tc("filter", type="recent")],
     [ex("search", query="python"), ex("filter", type="recent")], 1.0),
    # test_empty_reference_tool_calls
    ([], [], 1.0),
    # test_empty_reference_with_predictions
    ([tc("unexpected")], [], 0.0),
])
def test_ragas_tool_call_accuracy_vectors(pred: Any, ref: Any, want: float) -> None:
    assert ragas_accuracy(pred, ref) == want


def test_ragas_accuracy_flexible_order_sorts_both_sides() -> None:
    pred = [tc("filter", type="recent"), tc("search", query="python")]
    ref = [ex("search", query="python"), ex("filter", type="recent")]
    assert ragas_accuracy(pred, ref, strict_order=False) == 1.0
    assert ragas_accuracy(pred, ref, strict_order=True) == 0.0


# -- Ragas ToolCallF1 (test_tool_call_f1.py) ---------------------------------------------------
@pytest.mark.parametrize("expected, predicted, want", [
    ([ex("WeatherForecast", location="Paris")], [tc("WeatherForecast", location="Paris")], 1.0),
    ([ex("WeatherForecast", location="Paris"), ex("UVIndex", location="Paris")],
     [tc("WeatherForecast", location="Paris")], 0.67),
    ([ex("WeatherForecast", location="Paris")], [tc("AirQuality", location="Paris")], 0.0),
    ([ex("WeatherForecast", location="Paris")],
     [tc("WeatherForecast", location="Paris"), tc("AirQuality", location="Paris")], 0.67),
])
def test_ragas_tool_call_f1_vectors(expected: Any, predicted: Any, want: float) -> None:
    assert round(ragas_f1(predicted, expected), 2) == want


# -- agentevals trajectory match (python/tests/test_trajectory.py) -----------------------------
MODES = ("unordered", "superset", "subset", "strict")
W = "get_weather"


def steps(*groups: list[Expected]) -> list[list[Expected]]:
    return list(groups)


AGENTEVALS = [
    # test_trajectory_match: identical single call
    ("match", steps([ex(W, city="San Francisco")]), steps([ex(W, city="San Francisco")]),
     {}, dict.fromkeys(MODES, True)),
    # test_trajectory_with_different_tool_message_order: parallel calls in another order
    ("order", steps([ex(W, city="SF"), ex(W, city="London")]),
     steps([ex(W, city="London"), ex(W, city="SF")]), {}, dict.fromkeys(MODES, True)),
    # test_trajectory_with_different_message_count: two steps vs one parallel step
    ("count", steps([ex(W, city="SF")], [ex(W, city="London")]),
     steps([ex(W, city="London"), ex(W, city="SF")]), {},
     {"unordered": True, "superset": True, "subset": True, "strict": False}),
    # test_trajectory_subset_tool_call
    ("subset", steps([ex(W, city="SF")]), steps([ex(W, city="London"), ex(W, city="SF")]), {},
     {"unordered": False, "superset": False, "subset": True, "strict": False}),
    # test_exact_matcher_with_different_called_tools
    ("tools", steps([ex(W, city="SF")]), steps([ex("accuweather_forecast",
                                                    city="San Francisco")]), {},
     dict.fromkeys(MODES, False)),
    # test_trajectory_with_extra_tool_calls_and_override ({"get_weather": "ignore"})
    ("extra", steps([ex(W, city="San Francisco"), ex(W, city="London")]),
     steps([ex(W, city="SF and London")]), {W: "ignore"},
     {"unordered": False, "superset": True, "subset": False, "strict": False}),
    # test_trajectory_with_subset_tool_calls_and_override
    ("fewer", steps([ex(W, city="SF and London")]),
     steps([ex(W, city="San Francisco"), ex(W, city="London")]), {W: "ignore"},
     {"unordered": False, "superset": False, "subset": True, "strict": False}),
]


@pytest.mark.parametrize("case, out, ref, overrides, verdicts", AGENTEVALS,
                         ids=[c[0] for c in AGENTEVALS])
@pytest.mark.parametrize("mode", MODES)
def test_agentevals_trajectory_vectors(case: str, out: Any, ref: Any, overrides: Any,
                                       verdicts: dict[str, bool], mode: str) -> None:
    assert match_trajectory(out, ref, mode, "exact", overrides) is verdicts[mode]


@pytest.mark.parametrize("out_args, ref_args, verdicts", [
    # test_tool_args_match_mode_superset (strict trajectory mode)
    ({"is_cool": True, "flight_no": "LX0112"}, {"flight_no": "LX0112"},
     {"exact": False, "ignore": True, "subset": False, "superset": True}),
    # test_tool_args_match_mode_subset
    ({"flight_no": "LX0112"}, {"flight_no": "LX0112", "foo": "bar"},
     {"exact": False, "ignore": True, "subset": True, "superset": False}),
    # test_tool_args_match_mode_exact
    ({"flight_no": "LX0112"}, {"flight_no": "LX0112"},
     {"exact": True, "ignore": True, "subset": True, "superset": True}),
])
@pytest.mark.parametrize("args_mode", ["exact", "ignore", "subset", "superset"])
def test_agentevals_tool_args_match_vectors(out_args: Any, ref_args: Any,
                                            verdicts: dict[str, bool], args_mode: str) -> None:
    out = [[Expected("get_flight_info", out_args)]]
    ref = [[Expected("get_flight_info", ref_args)]]
    assert match_trajectory(out, ref, "strict", args_mode) is verdicts[args_mode]


def test_bad_modes_are_refused() -> None:
    with pytest.raises(ValueError, match="trajectory match mode"):
        match_trajectory([], [], "fuzzy")
    with pytest.raises(ValueError, match="tool args match mode"):
        TrajectoryMatch(args_mode="close")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="expected tool call"):
        expected_steps([42])


# -- the metrics on records: expected calls from metadata or a route ----------------------------
def agent_record(calls: list[tuple[int, str, dict[str, Any]]], **metadata: Any) -> RagRecord:
    return RagRecord(
        trace_id="a" * 32, span_id="b" * 16, query="q", answer="a", metadata=metadata,
        agent=AgentRun(tools=(ToolSpec("search"), ToolSpec("lookup")),
                       calls=tuple(ToolCall(n, a, step=s) for s, n, a in calls),
                       model_calls=3, steps=3))


def test_metrics_read_the_route_or_the_records_expected_calls() -> None:
    rec = agent_record([(1, "search", {"q": "x"}), (2, "lookup", {"id": 1})], route="faq")
    routes = {"faq": [{"name": "search", "args": {"q": "x"}}, "lookup"]}
    assert ToolCallAccuracy(routes=routes)(rec).value == 1.0  # a bare name: any arguments
    assert ToolCallF1(routes=routes)(rec).value == 1.0
    assert TrajectoryMatch(routes=routes)(rec).value == 1.0
    # per-request expectation in the metadata wins over the route's
    other = agent_record([(1, "search", {"q": "x"})], route="faq",
                         expected_tool_calls=[["search", "lookup"]])
    assert TrajectoryMatch(routes=routes)(other).value == 0.0
    assert TrajectorySupersetMatch(routes=routes)(other).value == 0.0
    # no expectation: skipped with the reason, never 0
    none = agent_record([(1, "search", {})], route="billing")
    s = ToolCallAccuracy(routes=routes)(none)
    assert s.status == "skipped" and "no expected tool calls" in (s.error or "")
    bad = agent_record([(1, "search", {})], expected_tool_calls="search")
    assert ToolCallF1()(bad).status == "error"


# -- the schema validator against Pydantic -----------------------------------------------------
class Address(BaseModel):
    city: str
    zip: str = Field(pattern=r"^[0-9]{5}$")


class Order(BaseModel):
    item: str = Field(min_length=1, max_length=10)
    qty: int = Field(ge=1, le=99)
    express: bool = False
    tags: list[str] = []
    ship_to: Address | None = None
    size: str = Field(default="m", json_schema_extra={"enum": ["s", "m", "l"]})


INSTANCES = [
    {"item": "bolt", "qty": 3},
    {"item": "bolt", "qty": 0},
    {"item": "", "qty": 3},
    {"item": "bolt-extra-long", "qty": 3},
    {"qty": 3},
    {"item": "bolt", "qty": "3"},
    {"item": "bolt", "qty": 3, "express": "yes"},
    {"item": "bolt", "qty": 3, "tags": ["a", 2]},
    {"item": "bolt", "qty": 3, "ship_to": {"city": "Lyon", "zip": "69001"}},
    {"item": "bolt", "qty": 3, "ship_to": {"city": "Lyon", "zip": "6900"}},
    {"item": "bolt", "qty": 3, "ship_to": {"zip": "69001"}},
    {"item": "bolt", "qty": 3, "ship_to": None},
    {"item": "bolt", "qty": 100},
    {"item": "bolt", "qty": True},
]


@pytest.mark.parametrize("instance", INSTANCES)
def test_validator_agrees_with_pydantic_on_its_own_schema(instance: dict[str, Any]) -> None:
    schema = Order.model_json_schema()
    try:
        Order.model_validate(instance, strict=True)
        pydantic_ok = True
    except ValidationError:
        pydantic_ok = False
    assert (validate(instance, schema) == []) is pydantic_ok, validate(instance, schema)


def test_validator_keywords() -> None:
    assert validate({"a": 1}, {"type": "object", "additionalProperties": False}) == [
        "$: unexpected argument 'a'"]
    assert validate(3.0, {"type": "integer"}) == []  # JSON Schema: 3.0 is an integer
    assert validate(True, {"type": "integer"}) != []
    assert validate("x", {"enum": ["a", "b"]}) != []
    assert validate(5, {"anyOf": [{"type": "string"}, {"minimum": 6}]}) != []
    assert validate(None, {"type": "string", "nullable": True}) == []
    assert validate([1, 1], {"type": "array", "uniqueItems": True}) != []
    assert validate("anything", {"format": "email"}) == []  # not checked: documented


def test_analysis_skips_what_it_cannot_check() -> None:
    agent = AgentRun(
        tools=(ToolSpec("search", schema={"type": "object", "required": ["q"]}),
               ToolSpec("free")),
        calls=(ToolCall("search", {}, 1), ToolCall("free", {"x": 1}, 1),
               ToolCall("search", {"tracescore.truncated": 9000}, 2, arguments_cut=True),
               ToolCall("ghost", {}, 3, ok=False, error="no such tool")))
    f = analyse(agent)
    assert f.invalid == {0: ["$: missing required argument 'q'"]}
    assert f.unchecked == [1, 2] and f.unknown == [3] and f.failed == [3]


# -- docs ---------------------------------------------------------------------------------------
def test_every_agent_metric_is_documented() -> None:
    import re
    from pathlib import Path

    import tracescore
    from tracescore.metrics.agent import AGENT_CHECKS
    from tracescore.metrics.tool_correctness import ToolCorrectness
    from tracescore.metrics.trajectory import REFERENCE_METRICS

    root = Path(__file__).resolve().parents[1]
    readme = (root / "README.md").read_text()
    metrics_md = (root / "docs" / "metrics.md").read_text()
    agents_md = (root / "docs" / "agents.md").read_text()
    headings = set(re.findall(r"^## (\S+)\s*$", metrics_md, flags=re.MULTILINE))
    for cls in (*AGENT_CHECKS, *REFERENCE_METRICS, ToolCorrectness):
        assert cls.name in tracescore.available_metrics()
        assert f"`{cls.name}`" in readme, cls.name
        assert cls.name in headings, cls.name
        assert f"`{cls.name}`" in agents_md, cls.name
        assert cls.description, cls.name
