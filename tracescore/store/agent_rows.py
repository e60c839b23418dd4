"""An agent run (:class:`~tracescore.record.AgentRun`) as the JSON of ``records.agent``
(SQLite schema 12, PostgreSQL 11): the tools offered (name, description, schema) and the calls
(name, arguments, step, id, ok, result, error). Like the candidates, it is kept only on rows
that keep their text: a compact row, and retention's compaction, set the column to NULL.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..record import AgentRun, ToolCall, ToolSpec

__all__ = ["agent_from_json", "agent_to_json"]


def agent_to_json(a: AgentRun) -> dict[str, Any]:
    return {
        "model_calls": a.model_calls, "steps": a.steps, "calls_dropped": a.calls_dropped,
        "tools": [{"name": t.name, "description": t.description, "schema": t.schema}
                  for t in a.tools],
        "calls": [{"name": c.name, "arguments": c.arguments, "step": c.step, "id": c.id,
                   "ok": c.ok, "result": c.result, "error": c.error,
                   **({"arguments_cut": True} if c.arguments_cut else {})}
                  for c in a.calls],
    }


def agent_from_json(d: Any) -> AgentRun | None:
    if not isinstance(d, Mapping):
        return None
    tools = tuple(ToolSpec(name=str(t.get("name")), description=t.get("description"),
                           schema=t.get("schema"))
                  for t in d.get("tools") or () if isinstance(t, Mapping))
    calls = tuple(ToolCall(name=str(c.get("name")), arguments=c.get("arguments"),
                           step=int(c.get("step") or 0), id=c.get("id"),
                           ok=bool(c.get("ok", True)), result=c.get("result"),
                           error=c.get("error"), arguments_cut=bool(c.get("arguments_cut")))
                  for c in d.get("calls") or () if isinstance(c, Mapping))
    return AgentRun(tools=tools, calls=calls, model_calls=int(d.get("model_calls") or 0),
                    steps=int(d.get("steps") or 0),
                    calls_dropped=int(d.get("calls_dropped") or 0))
