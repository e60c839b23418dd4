"""Reference-based tool-call matches, where the user declares the expected tool calls of a
route: Ragas' ``ToolCallAccuracy`` and ``ToolCallF1``, and agentevals' trajectory match modes
(strict, unordered, subset, superset). Local, no judge.

The expected calls come from the record's metadata key :data:`EXPECTED_KEY` (set per request,
e.g. ``config={"metadata": {"expected_tool_calls": [...]}}`` or ``ts.run(metadata=...)``), or
from the metric's ``routes`` (route name → expected calls) picked by the record's metadata
``route_key`` (default ``"route"``). A record with neither is skipped ("no expected tool calls
for this route"), never scored 0.

The expected calls are a list of calls — ``{"name": ..., "args": {...}}`` dicts, or bare tool
names — or a list of steps, each a list of calls (what the model asks for in one turn); a flat
list is one call per step. A bare name (or ``args`` absent) means "any arguments": this is our
extension; Ragas' own objects always carry arguments. The sources' semantics, reproduced
(their published test vectors are in tests/test_agent_trajectory.py):

- ``tool_call_accuracy`` — Ragas ``_tool_call_accuracy.py``: the sequence of called tool names
  must equal the expected one (``strict_order=False``: equal after sorting); then the mean
  over aligned pairs of the argument score (per expected argument, ``str(actual) ==
  str(expected)``, Ragas' default ``ExactMatch``), divided by the number of expected calls.
  No calls on both sides: 1.0; calls on one side only: 0.0.
- ``tool_call_f1`` — Ragas ``_tool_call_f1.py``: F1 of the set of (name, arguments) called vs
  expected, rounded to 4 digits (arguments compared as canonical JSON, so list-valued ones do
  not fail to hash as Ragas' ``frozenset(args.items())`` would).
- ``trajectory_<mode>_match`` — agentevals ``trajectory/{strict,unordered,subset,superset}.py``
  with ``tool_args_match_mode`` exact (default), ignore, subset or superset: greedy matching
  of each expected call to the first unused call of the same tool whose arguments match, as
  agentevals does. ``superset``: every expected call was made (extras allowed); ``subset``:
  every call made was expected; ``unordered``: both; ``strict``: the same steps in the same
  order, each step's calls matched as a multiset. Divergence: agentevals' strict mode compares
  the whole message list (user, assistant, tool messages); ours compares the agent's steps —
  the same verdict for a single-turn run whose tools all answered.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from ..record import AGENT, RagRecord
from ..score import Score
from .base import Metric

__all__ = ["EXPECTED_KEY", "Expected", "ToolCallAccuracy", "ToolCallF1", "TrajectoryMatch",
           "expected_steps", "match_trajectory", "ragas_accuracy", "ragas_f1"]

EXPECTED_KEY = "expected_tool_calls"
ArgsMode = Literal["exact", "ignore", "subset", "superset"]
Mode = Literal["strict", "unordered", "subset", "superset"]


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()


@dataclass(frozen=True)
class Expected:
    """One call: a tool name, its arguments (None: any arguments) and, for DeepEval's
    ``tool_correctness`` with ``output`` evaluated, its expected result (UNSET: any)."""

    name: str
    args: Mapping[str, Any] | None = None
    output: Any = UNSET


def _one(c: Any) -> Expected:
    if isinstance(c, str):
        return Expected(c)
    if isinstance(c, Mapping) and isinstance(c.get("name"), str):
        args = c.get("args", c.get("arguments"))
        if isinstance(args, str):
            args = json.loads(args)
        if args is not None and not isinstance(args, Mapping):
            raise ValueError(f"expected tool call {c!r}: args must be an object")
        return Expected(c["name"], args, c.get("output", UNSET))
    raise ValueError(f"an expected tool call is a tool name or {{'name': ..., 'args': "
                     f"{{...}}}}, got {c!r}")


def expected_steps(value: Any) -> list[list[Expected]]:
    """The expected calls, as steps (a flat list: one call per step). ValueError when
    malformed."""
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"expected tool calls must be a list, got {type(value).__name__}")
    if all(isinstance(s, (list, tuple)) for s in value) and value:
        return [[_one(c) for c in s] for s in value]
    return [[_one(c)] for c in value]


def _canon(v: Any) -> str:
    return json.dumps(v, sort_keys=True, ensure_ascii=False, default=repr)


# -- Ragas ------------------------------------------------------------------------------------
def _arg_score(pred: Mapping[str, Any], ref: Mapping[str, Any] | None) -> float:
    """Ragas ``ToolCallAccuracy._get_arg_score`` with ``ExactMatch`` (``str`` equality)."""
    if ref is None:
        return 1.0  # a bare name: any arguments (our extension)
    if not ref and not pred:
        return 1.0
    if not ref:
        return 0.0
    return sum(1.0 for k in ref if k in pred and str(pred[k]) == str(ref[k])) / len(ref)


def _sort_key(c: Expected | tuple[str, Any]) -> tuple[str, ...]:
    name, args = (c.name, c.args) if isinstance(c, Expected) else c
    key = [name]
    for k in sorted(args or {}):
        key += [k, str(args[k])]
    return tuple(key)


def ragas_accuracy(calls: Sequence[tuple[str, Any]], expected: Sequence[Expected],
                   strict_order: bool = True) -> float:
    """Ragas ``ToolCallAccuracy`` over (name, args) calls in order (module docstring)."""
    pred = list(calls)
    ref = list(expected)
    if not pred and not ref:
        return 1.0
    if not pred or not ref:
        return 0.0
    if not strict_order:
        pred = sorted(pred, key=_sort_key)
        ref = sorted(ref, key=_sort_key)
    names_p = [n for n, _ in pred]
    names_r = [r.name for r in ref]
    aligned = names_p == names_r if strict_order else sorted(names_p) == sorted(names_r)
    score = 0.0
    for r, (name, args) in zip(ref, pred):
        if r.name == name:
            score += _arg_score(args if isinstance(args, Mapping) else {}, r.args)
    score /= len(ref)
    compared = min(len(pred), len(ref))
    if compared < len(ref):
        score *= compared / len(ref)
    return score * int(aligned)


def ragas_f1(calls: Sequence[tuple[str, Any]], expected: Sequence[Expected]) -> float:
    """Ragas ``ToolCallF1``: F1 of the called vs expected (name, arguments) sets."""
    actual = {(n, _canon(a)) for n, a in calls}
    exp = {(e.name, None if e.args is None else _canon(e.args)) for e in expected}

    def hit(a: tuple[str, str], e: tuple[str, str | None]) -> bool:
        return a[0] == e[0] and (e[1] is None or e[1] == a[1])

    tp = sum(1 for e in exp if any(hit(a, e) for a in actual))
    fp = sum(1 for a in actual if not any(hit(a, e) for e in exp))
    fn = len(exp) - tp
    p = tp / (tp + fp) if tp + fp else 0.0
    r = tp / (tp + fn) if tp + fn else 0.0
    return round(2 * p * r / (p + r), 4) if p + r else 0.0


# -- agentevals -------------------------------------------------------------------------------
def _matcher(mode: str) -> Callable[[Mapping[str, Any], Mapping[str, Any]], bool]:
    if mode == "exact":
        return lambda out, ref: _canon(out) == _canon(ref)
    if mode == "subset":  # every argument of the call is in the reference, equal
        return lambda out, ref: all(k in ref and ref[k] == v for k, v in out.items())
    if mode == "superset":  # every argument of the reference is in the call, equal
        return lambda out, ref: all(k in out and out[k] == v for k, v in ref.items())
    if mode == "ignore":
        return lambda out, ref: True
    raise ValueError(f"tool args match mode must be exact, ignore, subset or superset, "
                     f"got {mode!r}")


def _args_match(match: Callable[..., bool], out: Expected, ref: Expected) -> bool:
    if out.args is None or ref.args is None:
        return True  # a bare name on either side: any arguments
    return match(out.args, ref.args)


def _covers(outputs: list[Expected], reference: list[Expected], mode: str,
            overrides: Mapping[str, str]) -> bool:
    """agentevals ``_is_trajectory_superset(outputs, reference)``: greedy, first match."""
    used: set[int] = set()
    for ref in reference:
        match = _matcher(overrides.get(ref.name, mode))
        for i, out in enumerate(outputs):
            if out.name == ref.name and i not in used and _args_match(match, out, ref):
                used.add(i)
                break
        else:
            return False
    return True


def match_trajectory(steps: Sequence[Sequence[Expected]], expected: Sequence[Sequence[Expected]],
                     mode: str = "strict", args_mode: str = "exact",
                     overrides: Mapping[str, str] | None = None) -> bool:
    """agentevals' trajectory match of the run's steps (each a list of calls) against the
    expected steps (module docstring)."""
    over = dict(overrides or {})
    _matcher(args_mode)
    out = [c for s in steps for c in s]
    ref = [c for s in expected for c in s]
    if mode == "superset":
        return _covers(out, ref, args_mode, over)
    if mode == "subset":
        return _covers(ref, out, args_mode, over)
    if mode == "unordered":
        return _covers(out, ref, args_mode, over) and _covers(ref, out, args_mode, over)
    if mode != "strict":
        raise ValueError(f"trajectory match mode must be strict, unordered, subset or "
                         f"superset, got {mode!r}")
    got = [list(s) for s in steps if s]
    want = [list(s) for s in expected if s]
    if len(got) != len(want):
        return False
    for g, w in zip(got, want):
        if len(g) != len(w):
            return False
        remaining = list(w)
        for call in g:
            match = _matcher(over.get(call.name, args_mode))
            hit = next((r for r in remaining if r.name == call.name
                        and _args_match(match, call, r)), None)
            if hit is None:
                return False
            remaining.remove(hit)
    return True


# -- metrics ----------------------------------------------------------------------------------
class _Reference(Metric):
    kind = "local"
    version = "1"
    requires = frozenset({AGENT})
    value_range = (0.0, 1.0)

    def __init__(self, *, routes: Mapping[str, Any] | None = None, route_key: str = "route",
                 threshold: float | None = 0.5) -> None:
        self.routes = {k: expected_steps(v) for k, v in (routes or {}).items()}
        self.route_key = route_key
        self.threshold = threshold

    def _expected(self, record: RagRecord) -> list[list[Expected]] | Score:
        md = record.metadata or {}
        if EXPECTED_KEY in md:
            try:
                return expected_steps(md[EXPECTED_KEY])
            except ValueError as exc:
                return Score.failed(self.name, f"metadata {EXPECTED_KEY!r}: {exc}",
                                    metric=self.name, metric_version=self.version)
        route = md.get(self.route_key)
        if isinstance(route, str) and route in self.routes:
            return self.routes[route]
        return Score.skipped(self.name, "no expected tool calls for this route (metadata "
                             f"{EXPECTED_KEY!r} or routes[{self.route_key!r}])",
                             metric=self.name, metric_version=self.version)

    @staticmethod
    def _steps(record: RagRecord) -> list[list[Expected]]:
        assert record.agent is not None
        steps: dict[int, list[Expected]] = {}
        for c in record.agent.calls:
            args = c.arguments if isinstance(c.arguments, Mapping) else {}
            steps.setdefault(c.step, []).append(Expected(c.name, args))
        return [steps[k] for k in sorted(steps)]


def _names(steps: Sequence[Sequence[Expected]]) -> str:
    return " → ".join("+".join(c.name for c in s) for s in steps) or "(none)"


class ToolCallAccuracy(_Reference):
    """Ragas ToolCallAccuracy against the route's expected tool calls (module docstring)."""

    name = "tool_call_accuracy"
    description = "Ragas ToolCallAccuracy: tool sequence and arguments vs the expected calls."

    def __init__(self, *, strict_order: bool = True, **kw: Any) -> None:
        super().__init__(**kw)
        self.strict_order = strict_order

    def __call__(self, record: RagRecord) -> Score:
        exp = self._expected(record)
        if isinstance(exp, Score):
            return exp
        steps = self._steps(record)
        calls = [(c.name, c.args) for s in steps for c in s]
        value = ragas_accuracy(calls, [c for s in exp for c in s], self.strict_order)
        return self.result(value, f"called {_names(steps)}; expected {_names(exp)}")


class ToolCallF1(_Reference):
    """Ragas ToolCallF1 against the route's expected tool calls (module docstring)."""

    name = "tool_call_f1"
    description = "Ragas ToolCallF1: F1 of the called vs expected (tool, arguments) sets."

    def __call__(self, record: RagRecord) -> Score:
        exp = self._expected(record)
        if isinstance(exp, Score):
            return exp
        steps = self._steps(record)
        value = ragas_f1([(c.name, c.args) for s in steps for c in s],
                         [c for s in exp for c in s])
        return self.result(value, f"called {_names(steps)}; expected {_names(exp)}")


class TrajectoryMatch(_Reference):
    """agentevals' trajectory match (1 = match) in one mode (module docstring). The strict
    mode's metric is ``trajectory_strict_match``; the others are its subclasses."""

    name = "trajectory_strict_match"
    mode: ClassVar[str] = "strict"
    binary = True
    description = "agentevals strict trajectory match: same steps, same order, same calls."

    def __init__(self, *, args_mode: ArgsMode = "exact",
                 overrides: Mapping[str, ArgsMode] | None = None, **kw: Any) -> None:
        super().__init__(**kw)
        _matcher(args_mode)
        for m in (overrides or {}).values():
            _matcher(m)
        self.args_mode = args_mode
        self.overrides = dict(overrides or {})

    def __call__(self, record: RagRecord) -> Score:
        exp = self._expected(record)
        if isinstance(exp, Score):
            return exp
        steps = self._steps(record)
        ok = match_trajectory(steps, exp, self.mode, self.args_mode, self.overrides)
        return self.result(float(ok), f"{self.mode} match ({self.args_mode} arguments): "
                           f"called {_names(steps)}; expected {_names(exp)}")


class TrajectoryUnorderedMatch(TrajectoryMatch):
    name = "trajectory_unordered_match"
    mode = "unordered"
    description = "agentevals unordered trajectory match: the same calls, in any order."


class TrajectorySubsetMatch(TrajectoryMatch):
    name = "trajectory_subset_match"
    mode = "subset"
    description = "agentevals subset trajectory match: every call made was expected."


class TrajectorySupersetMatch(TrajectoryMatch):
    name = "trajectory_superset_match"
    mode = "superset"
    description = "agentevals superset trajectory match: every expected call was made."


REFERENCE_METRICS: tuple[type[Metric], ...] = (
    ToolCallAccuracy, ToolCallF1, TrajectoryMatch, TrajectoryUnorderedMatch,
    TrajectorySubsetMatch, TrajectorySupersetMatch,
)
