"""Reading LangChain and LangGraph values: the user's query, the final answer, documents in
tool artifacts and graph state updates, LLM results. Pure functions with bounded effort (the
request path calls them), tested directly.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from langchain_core.runnables.config import var_child_runnable_config

from tracescore._internal.text import to_text
from tracescore.record import Context, TokenUsage
from tracescore.runs import RunScope

#: Input keys that hold the user's question, in order of preference.
QUERY_KEYS = ("question", "query", "input", "q", "user_input", "prompt", "text")
#: Output keys that hold the final answer, in order of preference.
ANSWER_KEYS = ("answer", "generation", "output", "result", "response", "final_answer", "text",
               "content", "output_text")
SESSION_KEYS = ("session_id", "thread_id", "conversation_id")
#: Metadata keys of ours: ground truth passed up front, not kept as record metadata.
GROUND_TRUTH_KEYS = ("ground_truth", "ground_truths")
#: Bounds on what is inspected of a step's output on the request path: keys of a state
#: update, items of a list, messages scanned back for the answer or the user's message.
MAX_STATE_KEYS = 32
MAX_DOCUMENTS = 200
MAX_MESSAGES = 200


#: type → whether its instances are mappings (``is_map(x)`` runs the ABC's
#: Python-level ``__instancecheck__``: a quarter of a microsecond, dozens of times per request
#: on messages and outputs; a dict lookup by type does the same). Bounded.
_MAPPING_TYPES: dict[type, bool] = {dict: True}


def is_map(x: Any) -> bool:
    """``is_map(x)``, by type, cached (request path)."""
    t = type(x)
    r = _MAPPING_TYPES.get(t)
    if r is None:
        r = isinstance(x, Mapping)
        if len(_MAPPING_TYPES) < 4096:
            _MAPPING_TYPES[t] = r
    return r


def _name(serialized: Mapping[str, Any] | None) -> str | None:
    if not serialized:
        return None
    name = serialized.get("name")
    if isinstance(name, str):
        return name
    ids = serialized.get("id")
    if isinstance(ids, list) and ids:
        return str(ids[-1])
    return None


def _message_text(m: Any) -> str | None:
    content = m.get("content") if is_map(m) else getattr(m, "content", None)
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content blocks
        parts = [b.get("text", "") if isinstance(b, dict) else str(b) for b in content]
        return "".join(p for p in parts if isinstance(p, str))
    return None


_HUMAN_ROLES = ("human", "user")
_AI_ROLES = ("ai", "assistant")


def _role(m: Any) -> str | None:
    """A message's role: LangChain message objects, ``{"role": ...}`` dicts and
    ``(role, text)`` tuples, the three forms LangGraph and ``create_agent`` accept."""
    if isinstance(m, tuple) and len(m) == 2 and isinstance(m[0], str):
        return m[0]
    if is_map(m):
        role = m.get("role", m.get("type"))
        return role if isinstance(role, str) else None
    role = getattr(m, "type", None)
    return role if isinstance(role, str) else None


def _text_of(m: Any) -> str | None:
    if isinstance(m, tuple) and len(m) == 2:
        return m[1] if isinstance(m[1], str) else None
    if isinstance(m, str):
        return m
    return _message_text(m)


def last_human_message(messages: Any) -> str | None:
    """The text of the last user message in a ``messages`` value (bounded scan)."""
    if isinstance(messages, str):
        return messages or None
    if not isinstance(messages, (list, tuple)):
        return _text_of(messages) if _role(messages) in _HUMAN_ROLES else None
    for m in itertools.islice(reversed(messages), MAX_MESSAGES):
        if _role(m) in _HUMAN_ROLES:
            return _text_of(m) or None
    return None


def final_ai_message(messages: Any) -> str | None:
    """The text of this turn's final AI message: the last AI message without tool calls,
    scanning back no further than the user's last message (so a turn that ended without an
    answer does not borrow the previous turn's)."""
    if not isinstance(messages, (list, tuple)):
        return None
    for m in itertools.islice(reversed(messages), MAX_MESSAGES):
        role = _role(m)
        if role in _HUMAN_ROLES:
            return None
        if role in _AI_ROLES:
            calls = m.get("tool_calls") if is_map(m) else getattr(
                m, "tool_calls", None)
            if calls:
                return None  # the turn stopped at a tool call: no final answer
            return _text_of(m)
    return None


def ends_with_answer(update: Any) -> bool:
    """Whether a LangGraph node's state update ends with a final AI message (no tool calls):
    the node that wrote the answer. A user message (a rewriter's question), a tool message
    or no message at all (a grader's structured verdict) is not an answer."""
    if not (type(update) in (list, tuple) or is_map(update)):
        update = getattr(update, "update", None)  # Command(update=...)
    if isinstance(update, (list, tuple)):
        return any(ends_with_answer(u) for u in update[-MAX_STATE_KEYS:])
    if not is_map(update):
        return False
    value = update.get("messages")
    if not isinstance(value, (list, tuple)):
        value = [value]
    last = value[-1] if value else None
    if _role(last) not in _AI_ROLES:
        return False
    calls = last.get("tool_calls") if is_map(last) else getattr(
        last, "tool_calls", None)
    return not calls


def extract_query(inputs: Any) -> str | None:
    """The user's question from a root run's inputs (str, dict, or messages)."""
    if isinstance(inputs, str):
        return inputs or None
    if is_map(inputs):
        for key in QUERY_KEYS:
            v = inputs.get(key)
            if isinstance(v, str) and v:
                return v
        if "messages" in inputs:
            return last_human_message(inputs["messages"])
        strings = [v for v in itertools.islice(inputs.values(), MAX_STATE_KEYS)
                   if isinstance(v, str) and v]
        if len(strings) == 1:
            return strings[0]
        return None
    if isinstance(inputs, (list, tuple)) and inputs:
        if isinstance(inputs, tuple) and _role(inputs) is not None:
            return _text_of(inputs)
        if _role(inputs[-1]) is not None:  # a list of messages (chat model or agent input)
            return last_human_message(inputs)
        return extract_query(inputs[-1])
    text = _message_text(inputs)
    if text:
        return text
    return None


def extract_answer(outputs: Any) -> str | None:
    """The final answer from a root run's outputs (str, dict, message, chunk, graph state)."""
    if outputs is None:
        return None
    if isinstance(outputs, str):
        return outputs
    if is_map(outputs):
        for key in ANSWER_KEYS:
            if key in outputs:
                v = outputs[key]
                return v if isinstance(v, str) else extract_answer(v)
        if "messages" in outputs:  # a LangGraph / create_agent state
            return final_ai_message(outputs["messages"])
        if len(outputs) == 1:
            return extract_answer(next(iter(outputs.values())))
        return None
    if isinstance(outputs, list) and outputs and _role(outputs[-1]) is not None:
        return final_ai_message(outputs)
    return _message_text(outputs)


def structured_answer(outputs: Any) -> tuple[str | None, Any]:
    """(answer text, JSON value) of a structured answer: ``create_agent``'s
    ``structured_response`` (``response_format=ToolStrategy(...)`` / ``ProviderStrategy``),
    or a Pydantic model a chain ended with (``llm.with_structured_output(Schema)``).

    The text is the schema's answer field (the first of :data:`ANSWER_KEYS` holding a
    string), else the whole JSON; (None, None) for anything else."""
    value = outputs.get("structured_response") if is_map(outputs) else outputs
    dump = getattr(value, "model_dump", None)
    if value is None or not callable(dump) or hasattr(value, "content"):  # not a message
        if not is_map(value) or value is outputs:
            return None, None
        data: Any = dict(value)  # a structured_response given as a dict (a JSON schema)
    else:
        data = dump(mode="json")
    if not is_map(data):
        return None, None
    for key in ANSWER_KEYS:
        if isinstance(data.get(key), str):
            return data[key], data
    return json.dumps(data, ensure_ascii=False, default=str), data


def tool_query(tool_input: Any) -> str | None:
    """What a tool was asked: its one string argument, or its input string."""
    if isinstance(tool_input, str):
        return tool_input or None
    if is_map(tool_input):
        for key in QUERY_KEYS:
            v = tool_input.get(key)
            if isinstance(v, str) and v:
                return v
        strings = [v for v in itertools.islice(tool_input.values(), MAX_STATE_KEYS)
                   if isinstance(v, str) and v]
        if len(strings) == 1:
            return strings[0]
    return None


def _is_document(x: Any) -> bool:
    # LangChain Documents, and LlamaIndex nodes (NodeWithScore, TextNode) put into a state
    return isinstance(getattr(x, "page_content", None), str) or callable(
        getattr(x, "get_content", None))


def _documents(value: Any) -> list[Any] | None:
    """``value`` if it is a non-empty list/tuple of documents (bounded), else None."""
    if not isinstance(value, (list, tuple)) or not value or not _is_document(value[0]):
        return None
    docs = list(itertools.islice(value, MAX_DOCUMENTS))
    return docs if all(_is_document(d) for d in docs) else None


def artifact_documents(output: Any) -> list[Any] | None:
    """Documents in a tool's result: a ``content_and_artifact`` tool's ``ToolMessage``
    artifact (a list of documents, or a dict holding one)."""
    artifact = getattr(output, "artifact", None)
    if artifact is None:
        return None
    docs = _documents(artifact)
    if docs is None and is_map(artifact):
        for v in itertools.islice(artifact.values(), MAX_STATE_KEYS):
            docs = _documents(v)
            if docs:
                break
    return docs


def state_documents(outputs: Any) -> list[Any] | None:
    """Documents a LangGraph node returned into the state: top-level values of its update
    (a dict, a ``Command``'s update, or a list of those) that are lists of documents."""
    found = [d for _, docs in state_updates(outputs) for d in docs]
    return found or None


def state_updates(outputs: Any) -> list[tuple[str, list[Any]]]:
    """(state key, documents) for each top-level key of a node's update holding a list of
    documents (see :func:`state_documents`); a bare list of documents has the key ``""``."""
    update = outputs
    if not (type(outputs) in (list, tuple) or is_map(outputs)):
        update = getattr(outputs, "update", None)  # Command(update=...)
    if isinstance(update, list) and update and not _is_document(update[0]):
        found: list[tuple[str, list[Any]]] = []
        for u in itertools.islice(update, MAX_STATE_KEYS):
            found.extend(state_updates(u))
        return found
    if not is_map(update):
        docs = _documents(update)
        return [("", docs)] if docs else []
    out = []
    for key, value in itertools.islice(update.items(), MAX_STATE_KEYS):
        if key == "messages":
            continue
        docs = _documents(value)
        if docs:
            out.append((str(key), docs))
    return out


def merge_retrievals(retrievals: Sequence[tuple[int, str, list[Context]]]) -> tuple[Context, ...]:
    """Every retrieved document in order, once by content: the same text seen again (a
    retriever inside a tool whose artifact holds its documents, a copy with another id or
    none) keeps its first source."""
    out: list[Context] = []
    seen: set[str] = set()
    for _, _source, ctxs in sorted(retrievals, key=lambda r: r[0]):
        for c in ctxs:
            if c.text not in seen:
                seen.add(c.text)
                out.append(c)
    return tuple(out)


def prompt_tool_calls(prompt: Any) -> frozenset[str]:
    """The tool-call ids of the ``ToolMessage`` messages in a chat prompt (bounded scan): the tool
    results the answering model saw."""
    if not isinstance(prompt, (list, tuple)):
        return frozenset()
    ids = set()
    for m in itertools.islice(reversed(prompt), MAX_MESSAGES):
        if _role(m) == "tool":
            call = m.get("tool_call_id") if is_map(m) else getattr(
                m, "tool_call_id", None)
            if isinstance(call, str):
                ids.add(call)
    return frozenset(ids)


def token_text(token: Any, chunk: Any) -> str:
    """The text of one streamed token (``on_llm_new_token``): the token if a string, else the
    chunk's message content."""
    if isinstance(token, str) and token:
        return token
    message = getattr(chunk, "message", None)
    text = _message_text(message) if message is not None else None
    return text or (token if isinstance(token, str) else "")


def _config_session() -> str | None:
    """A session id from the configurable of the config LangChain set for the current run's
    children. Callbacks see config values only as metadata, and langchain-core 1.x passes
    ``configurable`` values on as metadata to LangSmith's tracer alone."""
    config = var_child_runnable_config.get()
    configurable = config.get("configurable") if config else None
    if not is_map(configurable):
        return None
    return next((configurable[k] for k in SESSION_KEYS
                 if isinstance(configurable.get(k), str)), None)


def _session_user(md: Mapping[str, Any], scope: RunScope | None) -> tuple[str | None, str | None]:
    if md:
        session = next((md[k] for k in SESSION_KEYS if isinstance(md.get(k), str)), None)
        user = md.get("user_id") if isinstance(md.get("user_id"), str) else None
    else:  # (most runs: no metadata)
        session = user = None
    if scope is not None:
        session = scope.session_id or session
        user = scope.user_id or user
    return session, user


def document_context(doc: Any, source: str | None) -> Context:
    """A `Context` from a LangChain ``Document`` (or anything with ``page_content``), or from
    a ``(document, score)`` pair (a vector store's ``similarity_search_with_score``)."""
    if (isinstance(doc, tuple) and len(doc) == 2 and isinstance(doc[1], (int, float))
            and not isinstance(doc[1], bool)):
        ctx = document_context(doc[0], source)
        return replace(ctx, score=float(doc[1]))
    text = getattr(doc, "page_content", None)
    score_of_node = None
    if not isinstance(text, str) and callable(getattr(doc, "get_content", None)):
        score_of_node = getattr(doc, "score", None)  # a LlamaIndex NodeWithScore / node
        doc = getattr(doc, "node", doc)
        text = doc.get_content()
    if not isinstance(text, str):
        text = doc if isinstance(doc, str) else to_text(doc)
    md = getattr(doc, "metadata", None)
    md = dict(md) if is_map(md) else {}
    doc_id = (getattr(doc, "id", None) or getattr(doc, "node_id", None) or md.get("id")
              or md.get("doc_id"))
    score = md.get("score", md.get("relevance_score", score_of_node))
    try:
        score = float(score) if score is not None else None
    except (TypeError, ValueError):
        score = None
    return Context(text=text, id=None if doc_id is None else str(doc_id), score=score,
                   metadata=md, source=source)


def llm_result_parts(response: Any) -> tuple[str | None, TokenUsage | None, str | None]:
    """(text, token usage, model) from an ``LLMResult``."""
    text = None
    usage = None
    model = None
    gens = getattr(response, "generations", None) or []
    first = gens[0][0] if gens and gens[0] else None
    if first is not None:
        text = getattr(first, "text", None)
        msg = getattr(first, "message", None)
        um = getattr(msg, "usage_metadata", None) if msg is not None else None
        if um:
            usage = TokenUsage(int(um.get("input_tokens", 0)), int(um.get("output_tokens", 0)))
        rm = getattr(msg, "response_metadata", None) if msg is not None else None
        if is_map(rm):
            model = rm.get("model_name") or rm.get("model")
    llm_output = getattr(response, "llm_output", None)
    if is_map(llm_output):
        tu = llm_output.get("token_usage") or llm_output.get("usage")
        if usage is None and is_map(tu):
            usage = TokenUsage(int(tu.get("prompt_tokens", tu.get("input_tokens", 0)) or 0),
                               int(tu.get("completion_tokens", tu.get("output_tokens", 0)) or 0))
        model = model or llm_output.get("model_name") or llm_output.get("model")
    return text, usage, model if isinstance(model, str) else None
