"""An agent run from received spans: the same :class:`~tracescore.record.AgentRun` the
in-process capture builds (:mod:`integrations.langchain.agent`), read from the conventions.

- **Offered tools**: GenAI ``gen_ai.tool.definitions`` (a JSON array of ``{type, name,
  description, parameters}``) or OpenInference ``llm.tools.N.tool.json_schema`` (a JSON tool
  declaration, OpenAI or Anthropic shape) on the model-call spans.
- **Calls asked for**: the model-call spans' output — GenAI ``gen_ai.output.messages`` parts of
  ``type: "tool_call"`` (``id``, ``name``, ``arguments``), OpenInference
  ``llm.output_messages.N.message.tool_calls.M.tool_call.{id, function.name,
  function.arguments}``. The agent's steps are its model calls outside tool spans, in start
  order.
- **Outcomes**: the tool spans (GenAI ``execute_tool``, OpenInference ``TOOL``, OpenLLMetry
  ``tool``) — name ``gen_ai.tool.name`` / ``tool.name`` / the span name, call id
  ``gen_ai.tool.call.id`` (or the id in the OpenInference tool span's output message),
  arguments ``gen_ai.tool.call.arguments`` / ``input.value``, result
  ``gen_ai.tool.call.result`` / ``output.value``, error: the span's error status. A tool span
  whose call no model output announced is a call of the step before it. A call with no tool
  span is a call whose outcome was never seen (the error "no result seen").

Bounded as the capture is (:mod:`tracescore._internal.tool_calls`); never raises on odd values (a value
that cannot be read is left out).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .. import attributes as A
from .._internal.tool_calls import AgentTrace
from ..record import AgentRun
from . import names as N
from .spans import Span
from .spans import json_value as _json

__all__ = ["agent_run"]


def _indexed(attrs: Mapping[str, Any], prefix: str) -> dict[int, dict[str, Any]]:
    got: dict[int, dict[str, Any]] = {}
    p = prefix + "."
    for k, v in attrs.items():
        if k.startswith(p):
            idx, _, rest = k[len(p):].partition(".")
            if idx.isdigit() and rest:
                got.setdefault(int(idx), {})[rest] = v
    return got


def _offered(s: Span) -> Iterable[Any]:
    raw = _json(s.attrs.get(N.GEN_AI_TOOL_DEFINITIONS))
    if isinstance(raw, list):
        yield from raw
    for _, t in sorted(_indexed(s.attrs, N.LLM_TOOLS).items()):
        decl = _json(t.get("tool.json_schema"))
        if isinstance(decl, Mapping):
            yield decl


def _asked(s: Span) -> list[tuple[str | None, Any, Any]]:
    """(call id, tool name, arguments) a model call's output asked for."""
    out: list[tuple[str | None, Any, Any]] = []
    raw = _json(s.attrs.get(N.GEN_AI_OUTPUT_MESSAGES))
    if isinstance(raw, list):
        for m in raw:
            for part in (m.get("parts") or []) if isinstance(m, Mapping) else []:
                if isinstance(part, Mapping) and part.get("type") == "tool_call":
                    out.append((part.get("id"), part.get("name"), _json(part.get("arguments"))))
    for _, m in sorted(_indexed(s.attrs, N.LLM_OUTPUT_MESSAGES).items()):
        calls = _indexed(m, "message.tool_calls")
        for _, c in sorted(calls.items()):
            out.append((c.get("tool_call.id"), c.get("tool_call.function.name"),
                        _json(c.get("tool_call.function.arguments"))))
    return out


def _message(value: Any) -> Mapping[str, Any] | None:
    """A serialised tool message (OpenInference's ``output.value`` of a tool span:
    ``{"type": "tool", "data": {...}}`` or LangChain's ``{"kwargs": {...}}``)."""
    parsed = _json(value)
    if not isinstance(parsed, Mapping):
        return None
    for key in ("data", "kwargs"):
        if isinstance(parsed.get(key), Mapping):
            return parsed[key]
    return parsed


def _tool_call_id(s: Span) -> Any:
    cid = s.attrs.get(N.GEN_AI_TOOL_CALL_ID)
    if cid is None:
        msg = _message(s.attrs.get(A.OUTPUT_VALUE))
        cid = msg.get("tool_call_id") if msg is not None else None
    return cid if isinstance(cid, str) else None


def _tool_result(s: Span) -> tuple[Any, Any]:
    v = s.attrs.get(N.GEN_AI_TOOL_CALL_RESULT)
    if v is None:
        v = s.attrs.get(A.OUTPUT_VALUE, s.attrs.get(N.TRACELOOP_ENTITY_OUTPUT))
    msg = _message(v)
    if msg is not None and isinstance(msg.get("content"), str):
        if msg.get("status") == "error":
            return None, msg["content"]
        return msg["content"], None
    return v, None


def _replies(s: Span) -> Iterable[tuple[str, Any]]:
    """(call id, reply text) of the tool replies in a model call's input messages."""
    raw = _json(s.attrs.get(N.GEN_AI_INPUT_MESSAGES))
    if isinstance(raw, list):
        for m in raw:
            for part in (m.get("parts") or []) if isinstance(m, Mapping) else []:
                if isinstance(part, Mapping) and part.get("type") == "tool_call_response" \
                        and isinstance(part.get("id"), str):
                    yield part["id"], part.get("response")
    for _, m in sorted(_indexed(s.attrs, N.LLM_INPUT_MESSAGES).items()):
        cid = m.get("message.tool_call_id")
        if isinstance(cid, str):
            yield cid, m.get("message.content")


def _tool_name(s: Span) -> str:
    for k in (N.GEN_AI_TOOL_NAME, N.TOOL_NAME, N.TRACELOOP_ENTITY_NAME):
        v = s.attrs.get(k)
        if isinstance(v, str) and v:
            return v
    return s.name


def _tool_args(s: Span) -> Any:
    v = s.attrs.get(N.GEN_AI_TOOL_CALL_ARGUMENTS)
    if v is None:
        v = s.attrs.get(A.INPUT_VALUE, s.attrs.get(N.TRACELOOP_ENTITY_INPUT))
    return _json(v)


def agent_run(nodes: list[Span], kind: Any) -> AgentRun | None:
    """The agent part of a request whose spans are ``nodes`` (``kind``: the span-kind reader
    of :mod:`.records`); None when no tool was offered or called."""
    tools = [n for n in nodes if kind(n) == "TOOL"]
    inside = {x.span_id for t in tools for x in _descendants(t)} - {t.span_id for t in tools}
    llms = sorted((n for n in nodes if kind(n) == "LLM"), key=lambda n: (n.start_ns, n.end_ns))
    steps = [n for n in llms if n.span_id not in inside]
    trace = AgentTrace()
    trace.steps = len(steps)
    for i, s in enumerate(steps, 1):
        offered = list(_offered(s))
        if offered:
            trace.offer(offered)
        for cid, name, args in _asked(s):
            trace.ask(name, args, cid, i)
    for t in sorted(tools, key=lambda x: x.start_ns):
        if t.span_id in inside:
            continue  # a tool inside a tool: part of the outer call
        cid = _tool_call_id(t)
        call = trace.by_id.get(cid) if cid is not None else None
        name = _tool_name(t)
        if call is None:  # announced without an id, or not announced: match by order and name
            call = next((c for c in trace.calls if c.ok is None and c.name == name
                         and (c.id is None or cid is None)), None)
        if call is None:
            step = sum(1 for s in steps if s.start_ns <= t.start_ns)
            trace.ask(name, _tool_args(t), cid, step)
            call = trace.calls[-1] if trace.calls and trace.calls[-1].name == name else None
            if call is None:
                continue
        result, error = _tool_result(t)
        if t.error or error is not None:
            call.ok, call.result, call.error = False, None, error or t.error
        else:
            call.ok, call.result, call.error = True, result, None
    # a call the framework answered without running any tool (no tool span: an unknown
    # tool, arguments it refused) failed; its reply, seen by a later model call, says why
    for s in steps:
        for cid, reply in _replies(s):
            c = trace.by_id.get(cid)
            if c is not None and c.ok is None:
                c.ok, c.error = False, reply if reply is not None else "answered without a tool run"
    if not trace.tools and not trace.calls:
        return None
    return trace.build(len(llms))


def _descendants(s: Span) -> Iterable[Span]:
    stack = [s]
    seen: set[str] = set()
    while stack:
        x = stack.pop()
        if x.span_id in seen:
            continue
        seen.add(x.span_id)
        yield x
        stack.extend(x.children)
