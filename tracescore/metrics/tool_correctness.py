"""DeepEval's ``ToolCorrectnessMetric`` (``deepeval/metrics/tool_correctness``), the
deterministic tool-calling score: were the expected tools called — by name, and optionally
with the expected arguments (``input_parameters``) and results (``output``), in order
(``should_consider_ordering``) or exactly (``should_exact_match``). Local, no judge.

The expected calls come from the same place as the other reference metrics
(:mod:`tracescore.metrics.trajectory`: metadata ``expected_tool_calls`` or ``routes``); an
expected call may carry ``"output"`` (the tool's expected result). DeepEval's semantics,
reproduced:

- default: for each expected call, the best-scoring call of the same name not yet matched
  (1 per name match, times the argument score when ``input_parameters`` is evaluated, 0 when
  ``output`` is evaluated and differs); the sum divided by the number of expected calls.
- ``should_consider_ordering``: the weighted longest common subsequence of expected and
  called, divided by the number of expected calls.
- ``should_exact_match``: 1 when the calls are the expected ones, position by position
  (names, and arguments / outputs when evaluated), else 0.
- the argument score (``_compare_dicts``): 1 when equal; else, per key of the union of both
  argument sets, 1/|union| for an equal value (nested objects scored recursively); with
  ``should_exact_match`` 0 unless equal.
- no expected and no called calls: 1.0; no expected calls but some called: 0.0.
- ``strict_mode``: the threshold becomes 1 and a score below it is 0.

Divergences (documented in docs/agents.md): DeepEval marks a called tool as used by *value*,
so two identical calls can match only one expected call (expected ``[A, A]``, called
``[A, A]`` gives 0.5 there); here each call is used once (1.0). An expected call without
``args`` matches any arguments, one without ``output`` any result (DeepEval's ``None``
compares equal only to ``None``). DeepEval's optional LLM "tool selection" score over
``available_tools`` is not part of this local metric.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ..record import RagRecord
from ..score import Score
from .trajectory import UNSET, Expected, _names, _Reference

__all__ = ["ToolCorrectness", "tool_correctness"]

_PARAMS = {"tool": "tool", "input_parameters": "input_parameters", "args": "input_parameters",
           "arguments": "input_parameters", "output": "output"}


def _compare_dicts(a: Any, b: Any, exact: bool) -> float:
    """DeepEval ``ToolCorrectnessMetric._compare_dicts``."""
    if a == b:
        return 1.0
    if exact or not isinstance(a, Mapping) or not isinstance(b, Mapping):
        return 0.0
    keys = set(a) | set(b)
    score = 0.0
    for k in set(a) & set(b):
        if a[k] == b[k]:
            score += 1 / len(keys)
        elif isinstance(a[k], Mapping) and isinstance(b[k], Mapping):
            score += _compare_dicts(a[k], b[k], exact) / len(keys)
    return score


def _same_output(expected: Any, result: str | None) -> bool:
    if expected is UNSET:
        return True
    if isinstance(expected, str) or result is None:
        return expected == result
    try:
        return bool(json.loads(result) == expected)
    except ValueError:
        return False


def tool_correctness(called: Sequence[tuple[str, Any, str | None]],
                     expected: Sequence[tuple[str, Any, Any]], *,
                     evaluation_params: Sequence[str] = (), should_exact_match: bool = False,
                     should_consider_ordering: bool = False) -> float:
    """The score for ``called`` (name, arguments, result) against ``expected`` (name,
    arguments or None for any, output or ``UNSET`` for any) — module docstring."""
    params = {_PARAMS[p] for p in evaluation_params}

    def pair(e: tuple[str, Any, Any], c: tuple[str, Any, str | None]) -> float:
        if e[0] != c[0]:
            return 0.0
        s = 1.0
        if "input_parameters" in params and e[1] is not None:
            s *= _compare_dicts(e[1], c[1], should_exact_match)
        if "output" in params and not _same_output(e[2], c[2]):
            s = 0.0
        return s

    if not expected:
        return 1.0 if not called else 0.0
    if should_exact_match:
        if len(called) != len(expected):
            return 0.0
        return float(all(pair(e, c) == 1.0 for e, c in zip(expected, called)))
    if should_consider_ordering:
        m, n = len(expected), len(called)
        dp = [[0.0] * (n + 1) for _ in range(m + 1)]
        for i in range(1, m + 1):
            for j in range(1, n + 1):
                s = pair(expected[i - 1], called[j - 1])
                dp[i][j] = max(dp[i - 1][j], dp[i][j - 1],
                               dp[i - 1][j - 1] + s if s > 0 else 0.0)
        return dp[m][n] / m
    total = 0.0
    used: set[int] = set()
    for e in expected:
        best, best_j = 0.0, -1
        for j, c in enumerate(called):
            if j in used:
                continue
            s = pair(e, c)
            if s > best:
                best, best_j = s, j
        if best > 0:
            total += best
            used.add(best_j)
    return total / len(expected)


class ToolCorrectness(_Reference):
    """DeepEval ToolCorrectnessMetric against the route's expected tool calls (module
    docstring). ``evaluation_params``: any of ``"input_parameters"`` (or ``"args"``) and
    ``"output"``; the tool name is always compared."""

    name = "tool_correctness"
    description = ("DeepEval ToolCorrectness: were the expected tools called (names, "
                   "optionally arguments, outputs, order).")

    def __init__(self, *, evaluation_params: Sequence[str] = (),
                 should_exact_match: bool = False, should_consider_ordering: bool = False,
                 strict_mode: bool = False, threshold: float | None = 0.5,
                 **kw: Any) -> None:
        bad = [p for p in evaluation_params if p not in _PARAMS]
        if bad:
            raise ValueError(f"tool_correctness evaluation_params: unknown {bad!r} (use "
                             f"'input_parameters' and/or 'output')")
        super().__init__(threshold=1.0 if strict_mode else threshold, **kw)
        self.evaluation_params = tuple(evaluation_params)
        self.should_exact_match = should_exact_match
        self.should_consider_ordering = should_consider_ordering
        self.strict_mode = strict_mode

    def __call__(self, record: RagRecord) -> Score:
        exp = self._expected(record)
        if isinstance(exp, Score):
            return exp
        flat: list[Expected] = [c for s in exp for c in s]
        expected = [(e.name, e.args, e.output) for e in flat]
        assert record.agent is not None
        called = [(c.name, c.arguments if isinstance(c.arguments, Mapping) else {},
                   c.result) for c in record.agent.calls]
        value = tool_correctness(called, expected, evaluation_params=self.evaluation_params,
                                 should_exact_match=self.should_exact_match,
                                 should_consider_ordering=self.should_consider_ordering)
        if self.strict_mode and value < 1.0:
            value = 0.0
        names_called = {c[0] for c in called}
        missing = sorted({e[0] for e in expected} - names_called)
        mode = ("exact match" if self.should_exact_match else
                "in order" if self.should_consider_ordering else "order not considered")
        steps = self._steps(record)
        why = f"{mode}: called {_names(steps)}; expected {_names(exp)}"
        if missing:
            why += f"; missing {', '.join(missing)}"
        return self.result(value, why)
