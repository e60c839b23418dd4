"""Tool calls and offered tools, as the adapters (and the OTLP intake) gather them during a
run: bounded. Framework-free, so the core's intake shares it with the adapters.

An adapter keeps one :class:`AgentTrace` per root run (made at the first sign of an agent:
tools offered to a model, or a tool call asked for). On the request path it only appends
references (a call's name, arguments and id; a result's text) up to fixed bounds; the
record's :class:`~tracescore.record.AgentRun` is built once, when the root ends, with every
text clipped and the arguments' size checked (:meth:`AgentTrace.build`).

Bounds (like contexts, a record's agent part never grows without limit): at most
:data:`MAX_TOOL_CALLS` calls (the rest counted in ``calls_dropped``), :data:`MAX_TOOLS`
offered tools, arguments of up to :data:`MAX_ARGUMENT_CHARS` characters of JSON (longer
ones are replaced by a marker), results of :data:`MAX_RESULT_CHARS` and errors of
:data:`MAX_ERROR_CHARS` characters (clipped with a hash of the whole), schemas of up to
:data:`MAX_SCHEMA_CHARS`. Privacy (``capture_content=False``, ``redact``) is applied by
:meth:`tracescore.client.Tracescore.prepare`, as for contexts.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..record import AgentRun, ToolCall, ToolSpec

MAX_TOOL_CALLS = 256
MAX_TOOLS = 128
MAX_ARGUMENT_CHARS = 8_000
MAX_RESULT_CHARS = 2_000
MAX_ERROR_CHARS = 1_000
MAX_SCHEMA_CHARS = 16_000
MAX_NAME_CHARS = 200
#: The marker key of arguments too long to keep.
TRUNCATED = "tracescore.truncated"


@dataclass(slots=True)
class _Call:
    name: str
    arguments: Any
    step: int
    id: str | None
    ok: bool | None = None  # None: no result seen
    result: Any = None
    error: Any = None


@dataclass(slots=True)
class AgentTrace:
    """What a root run's agent did so far (request path: appends only, bounded)."""

    tools: dict[str, Any] = field(default_factory=dict)  # name → raw declaration
    calls: list[_Call] = field(default_factory=list)
    by_id: dict[str, _Call] = field(default_factory=dict)
    dropped: int = 0
    steps: int = 0
    #: The last raw tools list seen (a model bound once passes the same list every call).
    last_tools: Any = None

    def offer(self, tools: Any) -> None:
        """Tools a model call was offered (OpenAI, Anthropic or plain ``{name, ...}`` dicts,
        or objects with a ``name``), merged by name."""
        if tools is None or tools is self.last_tools:
            return
        self.last_tools = tools
        if not isinstance(tools, (list, tuple)):
            return
        for t in tools[:MAX_TOOLS]:
            name = tool_name(t)
            if name and name not in self.tools and len(self.tools) < MAX_TOOLS:
                self.tools[name] = t

    def ask(self, name: Any, arguments: Any, call_id: Any, step: int) -> None:
        """A tool call the model of agent step ``step`` asked for."""
        if isinstance(call_id, str) and call_id in self.by_id:
            return  # announced twice (a framework's nested events): one call
        if len(self.calls) >= MAX_TOOL_CALLS:
            self.dropped += 1
            return
        c = _Call(name if isinstance(name, str) else str(name), arguments, step,
                  call_id if isinstance(call_id, str) else None)
        self.calls.append(c)
        if c.id is not None:
            self.by_id[c.id] = c

    def unresolved(self) -> bool:
        return any(c.ok is None for c in self.calls)

    def resolve(self, call_id: Any, ok: bool, result: Any = None, error: Any = None,
                first: bool = False) -> None:
        """The outcome of call ``call_id``; ``first``: keep an outcome already known (a
        ``ToolMessage`` seen again in a later prompt)."""
        c = self.by_id.get(call_id) if isinstance(call_id, str) else None
        if c is None or (first and c.ok is not None):
            return
        c.ok, c.result, c.error = ok, result, error

    def build(self, model_calls: int) -> AgentRun:
        """The record's bounded :class:`AgentRun` (once, when the root ends)."""
        return AgentRun(
            tools=tuple(_spec(name, raw) for name, raw in self.tools.items()),
            calls=tuple(_call(c) for c in self.calls),
            model_calls=model_calls, steps=self.steps, calls_dropped=self.dropped)


def tool_name(t: Any) -> str | None:
    if isinstance(t, Mapping):
        fn = t.get("function")
        if isinstance(fn, Mapping) and isinstance(fn.get("name"), str):
            return fn["name"][:MAX_NAME_CHARS]
        name = t.get("name")
        return name[:MAX_NAME_CHARS] if isinstance(name, str) else None
    name = getattr(t, "name", None)
    if not isinstance(name, str):  # a LlamaIndex tool: its metadata names it
        name = getattr(getattr(t, "metadata", None), "name", None)
    return name[:MAX_NAME_CHARS] if isinstance(name, str) else None


#: Parsed declarations by the identity of the framework's declaration object (a model bound
#: once passes the same objects on every call): (object, spec); bounded, cleared when full.
_SPECS: dict[int, tuple[Any, ToolSpec]] = {}
MAX_CACHED_SPECS = 512


def _spec(name: str, raw: Any) -> ToolSpec:
    hit = _SPECS.get(id(raw))
    if hit is not None and hit[0] is raw and hit[1].name == name:
        return hit[1]
    spec = _parse_spec(name, raw)
    if len(_SPECS) >= MAX_CACHED_SPECS:
        _SPECS.clear()
    _SPECS[id(raw)] = (raw, spec)  # (the object is kept: its id cannot be reused meanwhile)
    return spec


def _parse_spec(name: str, raw: Any) -> ToolSpec:
    """A declaration in any of the common shapes: OpenAI ``{"type": "function", "function":
    {name, description, parameters}}``, Anthropic ``{name, description, input_schema}``,
    GenAI/MCP ``{name, description, parameters | inputSchema}``, a LangChain ``BaseTool``."""
    desc: Any = None
    schema: Any = None
    if isinstance(raw, Mapping):
        fn = raw.get("function") if isinstance(raw.get("function"), Mapping) else raw
        desc = fn.get("description")
        schema = next((fn.get(k) for k in ("parameters", "input_schema", "inputSchema")
                       if isinstance(fn.get(k), Mapping)), None)
    else:
        meta = getattr(raw, "metadata", None)
        desc = getattr(raw, "description", None) or getattr(meta, "description", None)
        try:
            params = getattr(meta, "get_parameters_dict", None)  # a LlamaIndex tool
            if callable(params):
                schema = params()
            else:  # a LangChain tool object
                args_schema = getattr(raw, "tool_call_schema", None) or getattr(
                    raw, "args_schema", None)
                js = getattr(args_schema, "model_json_schema", None)
                schema = js() if callable(js) else None
        except Exception:  # a tool's schema that cannot be built: kept without it
            schema = None
    if schema is not None:
        text = _dumps(schema)
        schema = None if text is None or len(text) > MAX_SCHEMA_CHARS else json.loads(text)
    return ToolSpec(name=name, description=clip(desc, MAX_RESULT_CHARS)
                    if isinstance(desc, str) else None, schema=schema)


def _dumps(value: Any) -> str | None:
    try:
        return json.dumps(value, ensure_ascii=False, default=lambda o: repr(o)[:200])
    except (TypeError, ValueError, RecursionError):
        return None


_SCALARS = (str, int, float, bool, type(None))


def _plain(args: Any) -> bool:
    """A flat dict of JSON scalars well under the size bound (most calls): kept as a copy,
    without a JSON round trip."""
    if type(args) is not dict or len(args) > 64:
        return False
    size = 0
    for k, v in args.items():
        if type(k) is not str or type(v) not in _SCALARS:
            return False
        size += len(k) + (len(v) if type(v) is str else 24) + 8
    return size <= MAX_ARGUMENT_CHARS // 2


def _call(c: _Call) -> ToolCall:
    args = c.arguments
    cut = False
    if _plain(args):
        text: str | None = ""
        args = dict(args)
    elif isinstance(args, str):  # raw JSON text (a model that returned unparsable arguments)
        text = args
        try:
            args = json.loads(args)
        except ValueError:
            pass
    else:
        text = _dumps(args)
        if text is not None:
            args = json.loads(text)  # a plain JSON copy: no framework objects in the record
    if text is None or len(text) > MAX_ARGUMENT_CHARS:
        args, cut = {TRUNCATED: len(text or "")}, True
    ok = bool(c.ok)
    error = None
    if not ok:
        error = _text(c.error, MAX_ERROR_CHARS) if c.ok is False else "no result seen"
        if c.ok is False and error is None:
            error = "error"
    return ToolCall(name=c.name, arguments=args, step=c.step, id=c.id, ok=ok,
                    result=_text(c.result, MAX_RESULT_CHARS), error=error, arguments_cut=cut)


def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, marked with its length and a hash of the whole
    (as span attributes are clipped)."""
    if len(text) <= limit:
        return text
    digest = hashlib.sha256(text.encode("utf-8", "backslashreplace")).hexdigest()[:16]
    return f"{text[:limit]}… [truncated {len(text)} chars, sha256:{digest}]"


def _text(value: Any, limit: int) -> str | None:
    if value is None:
        return None
    if isinstance(value, BaseException):
        value = f"{type(value).__name__}: {value}"
    elif not isinstance(value, str):
        content = getattr(value, "content", value)
        value = content if isinstance(content, str) else (_dumps(content) or repr(content))
    return clip(value, limit)
