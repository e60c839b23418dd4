"""Convention readers: the RAG records of one received trace.

One record per request: the topmost span of the trace that holds the request (an
OpenInference/OpenLLMetry chain or agent span, a GenAI ``invoke_agent`` span, or a span of
the app's own under which the retrieval and the model call sit), as the in-process capture
does — an agent's many model calls make one record, and several requests handled under one
span (a batch endpoint) make one each. The rules are the capture's:

- the *answering model* is the last model call of the request (by end time);
- *contexts* are the documents of the retrievals (and rerankers) that finished before that
  call started and whose text reached it (found in its prompt); every retrieved document is
  a *candidate*, with the step that dropped it when it did not reach the model;
- the *query* is the user's (the request span's input, else the first retrieval's query);
- the *answer* is the request span's output when it is text, else the answering model's;
- release and environment come from the resource (``service.version``,
  ``deployment.environment.name``).

Three conventions are read, each attribute by its own small reader so one bad value loses
one field, not the record: OpenInference, OpenLLMetry (traceloop) and the OTel GenAI
conventions. Text that the sender stripped (content capture off, a Collector processor
that deleted it, OpenInference's ``__REDACTED__``) is never scored as empty text: the
record says so (:data:`~.names.CONTENT_NOTE`) and the metrics that need it are skipped
with that reason.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .. import attributes as A
from ..record import Candidate, Context, RagRecord, TokenUsage
from . import names as N
from .agent import agent_run
from .spans import Span, link
from .spans import json_value as _json

LLM, RETRIEVER, RERANKER, CHAIN, AGENT, TOOL = "LLM", "RETRIEVER", "RERANKER", "CHAIN", \
    "AGENT", "TOOL"
_STRUCTURAL = frozenset({CHAIN, AGENT})
#: Contexts kept per record (as ``log_record``'s bound).
MAX_CONTEXTS = 1000
STRIPPED = ("content stripped upstream (content capture off in the instrumentation, or "
            "removed by a Collector processor): no {what} on the spans")


@dataclass(frozen=True, slots=True)
class Built:
    """A record with what the intake knows beside it."""

    record: RagRecord
    release: str | None
    environment: str | None
    #: why text metrics are skipped (the whole text stripped), or None
    stripped: str | None = None
    #: why context metrics are skipped (the documents' text stripped), or None
    contexts_stripped: str | None = None


def kind(s: Span) -> str | None:
    a = s.attrs
    k = a.get(A.SPAN_KIND)
    if isinstance(k, str) and k:
        return k.upper()
    op = a.get(A.GEN_AI_OPERATION_NAME)
    if op in N.LLM_OPERATIONS:
        return LLM
    if op in N.RETRIEVAL_OPERATIONS:
        return RETRIEVER
    if op == "invoke_agent":
        return AGENT
    if op == "execute_tool":
        return TOOL
    if op == "embeddings":
        return "EMBEDDING"
    if a.get(N.LLM_REQUEST_TYPE) in ("chat", "completion"):
        return LLM
    tk = a.get(N.TRACELOOP_SPAN_KIND)
    if tk in ("workflow", "task"):
        return CHAIN
    if tk in ("agent", "tool"):
        return tk.upper()
    if op is not None:
        return CHAIN
    return None


def convention(spans: list[Span]) -> str:
    keys = {k for s in spans for k in s.attrs}
    if A.SPAN_KIND in keys:
        return "openinference"
    if any(k.startswith("traceloop.") for k in keys):
        return "openllmetry"
    if any(k.startswith("gen_ai.") for k in keys):
        return "genai"
    return "unknown"


def build(spans: list[Span]) -> list[Built]:
    """The records of one trace's spans (any order; spans whose parent is missing count as
    roots). Never raises on odd attribute values: a field that cannot be read is left out."""
    roots = link(spans)
    conv = convention(spans)
    memo: dict[str, bool] = {}
    by_id = {s.span_id: s for s in spans}
    out = []
    for root in roots:
        for req in _requests(root, memo):
            out.append(_record(req, conv, _ancestors(req, by_id)))
    return out


def _ancestors(s: Span, by_id: dict[str, Span]) -> list[Span]:
    out: list[Span] = []
    seen = {s.span_id}
    p = by_id.get(s.parent_id)
    while p is not None and p.span_id not in seen:
        out.append(p)
        seen.add(p.span_id)
        p = by_id.get(p.parent_id)
    return out


def _walk(s: Span) -> Iterator[Span]:
    stack, seen = [s], set()
    while stack:
        x = stack.pop()
        if x.span_id in seen:
            continue
        seen.add(x.span_id)
        yield x
        stack.extend(reversed(x.children))


def _has_llm(s: Span, memo: dict[str, bool]) -> bool:
    got = memo.get(s.span_id)
    if got is None:
        got = any(kind(x) == LLM for x in _walk(s))
        memo[s.span_id] = got
    return got


def _requests(s: Span, memo: dict[str, bool]) -> list[Span]:
    """The request spans under (or at) ``s``: the topmost spans of a known kind that hold a
    model call; a span of the app's own (no convention) that has the retrieval or the model
    call as a direct child is the request itself."""
    if not _has_llm(s, memo):
        return []
    if kind(s) is not None:
        return [s]
    if any(kind(c) in (LLM, RETRIEVER, RERANKER) for c in s.children):
        return [s]
    out: list[Span] = []
    for c in s.children:
        out.extend(_requests(c, memo))
    return out


# -- reading values ------------------------------------------------------------------------------
def _text_of(value: Any, depth: int = 0) -> str | None:
    """The user-facing text of an input/output value: a string, or the usual key of a dict
    (``input``, ``question``, ``query``, ``answer``, ``output``, ...), or the last human/user
    message of a message list."""
    if depth > 4 or value is None:
        return None
    if isinstance(value, str):
        parsed = _json(value)
        return value if parsed is value else _text_of(parsed, depth + 1)
    if isinstance(value, dict):
        for key in ("inputs", "outputs", "input", "question", "query", "answer", "output",
                    "result", "content", "text"):
            if key in value:
                got = _text_of(value[key], depth + 1)
                if got:
                    return got
        if "messages" in value:
            return _last_message(value["messages"], ("human", "user"), depth)
        return None
    if isinstance(value, list) and value:
        return _last_message(value, ("human", "user", "ai", "assistant"), depth)
    return None


def _last_message(messages: Any, roles: tuple[str, ...], depth: int) -> str | None:
    if not isinstance(messages, list):
        return None
    for m in reversed(messages):
        if isinstance(m, list) and len(m) == 2 and all(isinstance(x, str) for x in m):
            if m[0] in roles and m[1]:  # a ("user", "text") tuple
                return m[1]
            continue
        if isinstance(m, list):  # LangChain's [[message, ...]] batches
            got = _last_message(m, roles, depth)
            if got:
                return got
            continue
        if not isinstance(m, dict):
            continue
        role, content = _role_content(m)
        if role in roles and content:
            return content
    return None


def _role_content(m: dict[str, Any]) -> tuple[str | None, str | None]:
    kw = m.get("kwargs") if isinstance(m.get("kwargs"), dict) else m
    role = m.get("role") or kw.get("type") or m.get("type")
    ident = m.get("id")
    if role == "constructor" and isinstance(ident, list) and ident:
        role = {"HumanMessage": "human", "AIMessage": "ai", "SystemMessage": "system"}.get(
            ident[-1], ident[-1])
    content = kw.get("content")
    if content is None and isinstance(m.get("parts"), list):  # GenAI message parts
        content = "".join(p.get("content", "") for p in m["parts"]
                          if isinstance(p, dict) and p.get("type") == "text"
                          and isinstance(p.get("content"), str)) or None
    if isinstance(content, list):  # content blocks
        content = "".join(b.get("text", "") for b in content
                          if isinstance(b, dict) and isinstance(b.get("text"), str)) or None
    return (role if isinstance(role, str) else None,
            content if isinstance(content, str) else None)


def _indexed(attrs: dict[str, Any], prefix: str) -> list[dict[str, Any]]:
    """``prefix.N.rest = v`` attributes as a list of ``{rest: v}`` by N."""
    got: dict[int, dict[str, Any]] = {}
    p = prefix + "."
    for k, v in attrs.items():
        if not k.startswith(p):
            continue
        idx, _, rest = k[len(p):].partition(".")
        if idx.isdigit() and rest:
            got.setdefault(int(idx), {})[rest] = v
    return [got[i] for i in sorted(got)]


def _messages(s: Span, output: bool) -> list[tuple[str, str]]:
    """(role, text) of a model call's input or output messages, in any convention."""
    a = s.attrs
    oi = _indexed(a, N.LLM_OUTPUT_MESSAGES if output else N.LLM_INPUT_MESSAGES)
    if oi:
        return [(str(m.get("message.role", "")), m["message.content"]) for m in oi
                if isinstance(m.get("message.content"), str)]
    raw = _json(a.get(N.GEN_AI_OUTPUT_MESSAGES if output else N.GEN_AI_INPUT_MESSAGES))
    out: list[tuple[str, str]] = []
    if isinstance(raw, list):
        if not output:
            sys_raw = _json(a.get(N.GEN_AI_SYSTEM_INSTRUCTIONS))
            if isinstance(sys_raw, list):
                text = "".join(p.get("content", "") for p in sys_raw if isinstance(p, dict)
                               and isinstance(p.get("content"), str))
                if text:
                    out.append(("system", text))
        for m in raw:
            if isinstance(m, dict):
                role, content = _role_content(m)
                if content:
                    out.append((role or "", content))
        return out
    old = _indexed(a, N.GEN_AI_COMPLETION if output else N.GEN_AI_PROMPT)
    return [(str(m.get("role", "")), m["content"]) for m in old
            if isinstance(m.get("content"), str)]


def _io(s: Span, output: bool) -> Any:
    """A span's raw input or output value (OpenInference, else OpenLLMetry)."""
    a = s.attrs
    v = a.get(A.OUTPUT_VALUE if output else A.INPUT_VALUE)
    if v is None:
        v = a.get(N.TRACELOOP_ENTITY_OUTPUT if output else N.TRACELOOP_ENTITY_INPUT)
    return v


def _docs(values: Any) -> list[dict[str, Any]]:
    """Documents from a JSON list/dict ({"documents": [...]}) in any of the usual shapes."""
    values = _json(values)
    if isinstance(values, dict):
        values = values.get("documents", values.get("outputs"))
    if not isinstance(values, list):
        return []
    out = []
    for d in values:
        if isinstance(d, dict) and isinstance(d.get("kwargs"), dict):
            d = d["kwargs"]
        if isinstance(d, str):
            d = {"content": d}
        if not isinstance(d, dict):
            continue
        meta = d.get("metadata") if isinstance(d.get("metadata"), dict) else {}
        out.append({"document.content": d.get("content", d.get("page_content", d.get("text"))),
                    "document.id": d.get("id", meta.get("id")),
                    "document.score": d.get("score", meta.get("score")),
                    "document.metadata": meta})
    return out


def _documents(s: Span, prefix: str = A.RETRIEVAL_DOCUMENTS) -> list[dict[str, Any]]:
    oi = _indexed(s.attrs, prefix)
    if oi:
        return oi
    if prefix != A.RETRIEVAL_DOCUMENTS:
        return []
    for raw in (s.attrs.get(N.GEN_AI_RETRIEVAL_DOCUMENTS), _io(s, output=True)):
        got = _docs(raw)
        if got:
            return got
    return []


def _context(d: dict[str, Any], source: str | None) -> Context | None:
    text = d.get("document.content")
    if not isinstance(text, str) or not text or text == N.OI_REDACTED:
        return None
    ident = d.get("document.id")
    score = d.get("document.score")
    meta = _json(d.get("document.metadata"))
    return Context(text, str(ident) if ident is not None else None,
                   float(score) if isinstance(score, (int, float)) and not isinstance(
                       score, bool) else None,
                   meta if isinstance(meta, dict) else {}, source)


def _query_of_retrieval(s: Span) -> str | None:
    q = s.attrs.get(N.GEN_AI_RETRIEVAL_QUERY)
    if isinstance(q, str) and q:
        return q
    return _text_of(_io(s, output=False))


def _int(v: Any) -> int:
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else 0


# -- one record ---------------------------------------------------------------------------------
def _record(req: Span, conv: str, ancestors: list[Span]) -> Built:
    nodes = list(_walk(req))
    llms = sorted((n for n in nodes if kind(n) == LLM), key=lambda n: (n.end_ns, n.start_ns))
    answering = llms[-1] if llms else None
    answer_text = None
    if answering is not None:
        outs = [t for r, t in _messages(answering, output=True) if t]
        answer_text = outs[-1] if outs else _text_of(_io(answering, output=True))
    prompt_msgs = _messages(answering, output=False) if answering is not None else []
    prompt = "\n\n".join(f"{r}: {t}" for r, t in prompt_msgs) or None
    prompt_text = "\n".join(t for _, t in prompt_msgs)

    # retrievals (and rerankers) that finished before the answering call started
    before = answering.start_ns if answering is not None else None
    steps = sorted((n for n in nodes if kind(n) in (RETRIEVER, RERANKER)
                    and (before is None or n.end_ns <= before or n.start_ns <= before)),
                   key=lambda n: n.start_ns)
    candidates: list[tuple[Context, str | None]] = []  # (context, dropped_by)
    queries: list[str] = []
    docs_seen = docs_without_text = 0
    for st in steps:
        name = st.attrs.get(N.TRACELOOP_ENTITY_NAME) or st.name
        if kind(st) == RERANKER:
            outs = [c for c in (_context(d, name) for d in _documents(
                st, N.RERANKER_OUTPUT_DOCUMENTS)) if c is not None]
            if outs:
                kept = {c.text for c in outs}
                candidates = [(c, by if by is not None or c.text in kept else name)
                              for c, by in candidates]
                candidates += [(c, None) for c in outs if c.text not in
                               {x.text for x, by in candidates if by is None}]
            continue
        q = _query_of_retrieval(st)
        if q and q not in queries:
            queries.append(q)
        docs = _documents(st)
        docs_seen += len(docs)
        for d in docs:
            c = _context(d, name)
            if c is None:
                docs_without_text += 1
            elif len(candidates) < MAX_CONTEXTS:
                candidates.append((c, None))
    live = [c for c, by in candidates if by is None]
    if prompt_text and any(c.text in prompt_text for c in live):
        reached = {id(c) for c in live if c.text in prompt_text}
        candidates = [(c, by if by is not None or id(c) in reached else "prompt")
                      for c, by in candidates]
    contexts = tuple(c for c, by in candidates if by is None)

    # the user's query and the answer
    query = _text_of(_io(req, output=False))
    if query is None and kind(req) in (LLM, AGENT):
        users = [t for r, t in _messages(req, output=False) if r in ("user", "human")]
        query = users[-1] if users else None
    if query is None and queries:
        query = queries[0]
    raw_out = _json(_io(req, output=True))
    answer = None
    if isinstance(raw_out, str):
        answer = raw_out
    elif isinstance(raw_out, dict):
        inner = raw_out.get("outputs", raw_out)
        if isinstance(inner, str):
            answer = inner
        elif isinstance(inner, dict):
            answer = next((inner[k] for k in ("answer", "output", "result")
                           if isinstance(inner.get(k), str)), None)
    if answer is None:
        answer = answer_text

    # the rest of the record
    attrs_all = [req, *nodes]
    session = _first_str(attrs_all, (A.SESSION_ID, N.GEN_AI_CONVERSATION_ID, N.TRACELOOP_SESSION))
    user = _first_str(attrs_all, (A.USER_ID, N.TRACELOOP_USER))
    model = None
    if answering is not None:
        for k in (A.LLM_MODEL_NAME, A.GEN_AI_RESPONSE_MODEL, A.GEN_AI_REQUEST_MODEL):
            v = answering.attrs.get(k)
            if isinstance(v, str) and v and v != "unknown":
                model = v
                break
    usage = None
    if llms:
        usage = TokenUsage(
            sum(_int(n.attrs.get(A.LLM_TOKEN_COUNT_PROMPT, n.attrs.get(
                A.GEN_AI_USAGE_INPUT_TOKENS, n.attrs.get(N.GEN_AI_USAGE_PROMPT_TOKENS))))
                for n in llms),
            sum(_int(n.attrs.get(A.LLM_TOKEN_COUNT_COMPLETION, n.attrs.get(
                A.GEN_AI_USAGE_OUTPUT_TOKENS, n.attrs.get(N.GEN_AI_USAGE_COMPLETION_TOKENS))))
                for n in llms))
    meta_raw = _json(req.attrs.get(A.METADATA))
    metadata: dict[str, Any] = dict(meta_raw) if isinstance(meta_raw, dict) else {}
    metadata[N.CONVENTION] = conv
    tags = req.attrs.get(A.TAG_TAGS)
    error = req.error or (answering.error if answering is not None else None)

    stripped = contexts_stripped = None
    redacted = {query, answer} & {N.OI_REDACTED}
    if redacted:
        query = None if query == N.OI_REDACTED else query
        answer = None if answer == N.OI_REDACTED else answer
    if not query and not answer:
        stripped = STRIPPED.format(what="input or output text")
    elif docs_seen and docs_without_text == docs_seen and not contexts:
        contexts_stripped = STRIPPED.format(what="document text")
    if stripped or contexts_stripped:
        metadata[N.CONTENT_NOTE] = stripped or contexts_stripped

    record = RagRecord(
        trace_id=req.trace_id, span_id=req.span_id, query=query, answer=answer,
        contexts=contexts, ground_truths=_ground_truths(nodes + ancestors), metadata=metadata,
        tags=tuple(t for t in tags if isinstance(t, str)) if isinstance(tags, list) else (),
        session_id=session, user_id=user, start_time_ns=req.start_ns or None,
        end_time_ns=req.end_ns or None, usage=usage, model=model, error=error,
        source="otlp", content_captured=stripped is None, prompt=prompt,
        retrieval_queries=tuple(queries),
        candidates=tuple(Candidate(c.text, c.id, c.score, c.source, by is None, by)
                         for c, by in candidates),
        agent=_agent(nodes),
    )
    res = req.resource
    release = res.get(N.SERVICE_VERSION)
    env = next((res[k] for k in N.DEPLOYMENT_ENVIRONMENT if isinstance(res.get(k), str)), None)
    return Built(record, release if isinstance(release, str) else None, env, stripped,
                 contexts_stripped)


def _agent(nodes: list[Span]) -> Any:
    """The request's tool calls (:mod:`.agent`); a reader fault loses them, not the record."""
    from .._internal.errors import handle_internal_errors

    with handle_internal_errors("intake.agent"):
        return agent_run(nodes, kind)
    return None


def _first_str(spans: list[Span], keys: tuple[str, ...]) -> str | None:
    for s in spans:
        for k in keys:
            v = s.attrs.get(k)
            if isinstance(v, str) and v:
                return v
    return None


def _ground_truths(nodes: list[Span]) -> tuple[str, ...]:
    out: list[str] = []
    for s in nodes:
        values = [s.attrs.get(N.GROUND_TRUTH)]
        values += [e.get(N.GROUND_TRUTH) for name, e in s.events if name == N.GROUND_TRUTH_EVENT]
        for v in values:
            for g in (v if isinstance(v, list) else [v]):
                if isinstance(g, str) and g and g not in out:
                    out.append(g)
    return tuple(out)
