"""An agent run in ``tracescore show``: its steps, each with the tool calls the model asked for,
their arguments and outcome, and the checks that failed marked on the call (text).

Takes the decoded ``agent`` part of a record row (:mod:`tracescore.store.agent_rows`) and the
record's scores; no I/O. The marks come from the same analysis the agent metrics use
(:func:`tracescore.metrics.agent_checks.analyse`), so a flagged score points at its steps.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

from ..metrics.agent_checks import analyse
from ..store.agent_rows import agent_from_json

__all__ = ["agent_steps"]

#: The agent checks whose failure ``show`` lists above the steps.
CHECKS = ("tool_error_rate", "unknown_tool_calls", "invalid_tool_arguments",
          "repeated_tool_calls", "agent_no_answer")
MAX_ARG_CHARS = 160
MAX_RESULT_CHARS = 160


def _wrap(text: str, indent: str, width: int) -> list[str]:
    return textwrap.wrap(text, width=max(40, width), initial_indent=indent,
                         subsequent_indent=indent + "  ") or [indent]


def _short(text: str | None, limit: int) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= limit else text[:limit] + "…"


def agent_steps(agent_json: Any, scores: Sequence[Mapping[str, Any]], width: int) -> list[str]:
    agent = agent_from_json(agent_json)
    if agent is None:
        return []
    f = analyse(agent)
    failed = [s for s in scores if s.get("name") in CHECKS and s.get("status") == "ok"
              and s.get("label") == "fail"]
    out = ["", f"agent run ({agent.steps} steps, {len(agent.calls)} tool calls, "
               f"{agent.model_calls} model calls; tools offered: "
               f"{', '.join(t.name for t in agent.tools) or 'not captured'})"]
    if failed:
        out += _wrap("failed checks: " + ", ".join(s["name"] for s in failed), "  ", width)
    if agent.calls_dropped:
        out.append(f"  ({agent.calls_dropped} more calls not kept: per-record bound)")
    by_step: dict[int, list[int]] = {}
    for i, c in enumerate(agent.calls):
        by_step.setdefault(c.step, []).append(i)
    loop = f.loop
    for step in range(1, max([agent.steps, *by_step]) + 1 if by_step or agent.steps else 1):
        idx = by_step.get(step, [])
        head = f"  step {step}"
        if loop and loop[2] <= step < loop[2] + loop[1]:
            head += f"   << LOOP: {loop[0]} in {loop[1]} consecutive steps"
        out.append(head + ("" if idx else "   (no tool call: answered or stopped)"))
        for i in idx:
            c = agent.calls[i]
            args = json.dumps(c.arguments, ensure_ascii=False, default=repr)
            out += _wrap(f"#{i + 1} {c.name}({_short(args, MAX_ARG_CHARS)})", "    ", width)
            outcome = (f"-> {_short(c.result, MAX_RESULT_CHARS)}" if c.ok
                       else f"-> error: {_short(c.error, MAX_RESULT_CHARS)}")
            out += _wrap(outcome, "        ", width)
            for mark in f.marks(i):
                out += _wrap(f"<< {mark}", "        ", width)
    return out
