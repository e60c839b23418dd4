"""Pure extraction helpers: the user's question, the answer text, a node as a `Context`, token
usage and model names, from LlamaIndex values. Never raise on unexpected shapes (they return
None), tested directly."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from llama_index.core.base.response.schema import (
    AsyncStreamingResponse,
    PydanticResponse,
    Response,
    StreamingResponse,
)
from llama_index.core.chat_engine.types import AgentChatResponse, StreamingAgentChatResponse
from llama_index.core.schema import NodeWithScore

from tracescore._internal.text import to_text
from tracescore.record import Context, TokenUsage

__all__ = ["message_text", "model_name", "node_context", "node_id", "query_text", "response_text",
           "token_usage"]



def query_text(query: Any) -> str | None:
    """The question from a query argument: a str, or a ``QueryBundle``'s ``query_str``."""
    if isinstance(query, str):
        return query or None
    q = getattr(query, "query_str", None)
    if isinstance(q, str) and q:
        return q
    return None


def message_text(message: Any) -> str | None:
    content = getattr(message, "content", None)
    return content if isinstance(content, str) else None


def response_text(response: Any) -> str | None:
    """The answer text of a LlamaIndex result: ``Response``, ``PydanticResponse``, a consumed
    ``StreamingResponse``, ``AgentChatResponse``, a finished ``StreamingAgentChatResponse``,
    ``ChatResponse``/``CompletionResponse``, or a str. None when there is none (yet)."""
    if response is None:
        return None
    if isinstance(response, str):
        return response
    if isinstance(response, Response):
        return response.response
    if isinstance(response, PydanticResponse):
        return response.response.model_dump_json() if response.response is not None else None
    if isinstance(response, (StreamingResponse, AsyncStreamingResponse)):
        return response.response_txt
    if isinstance(response, StreamingAgentChatResponse):
        return response.response if response.is_done else None
    if isinstance(response, AgentChatResponse):
        return response.response
    message = getattr(response, "message", None)
    if message is not None:  # ChatResponse
        return message_text(message)
    text = getattr(response, "text", None)  # CompletionResponse
    return text if isinstance(text, str) else None


def node_id(n: Any) -> str | None:
    if type(n) is NodeWithScore:
        return n.node.node_id
    node = getattr(n, "node", n)
    nid = getattr(node, "node_id", None) or getattr(node, "id_", None)
    return None if nid is None else str(nid)


def node_context(n: Any, source: str | None) -> Context:
    """A `Context` from a ``NodeWithScore`` (or a bare node): id, text, score, metadata.

    A `Context` (documents another framework handed over) is returned as it is."""
    if type(n) is NodeWithScore:  # the usual case, without the getattr probing below
        node, score = n.node, n.score
        return Context(text=node.get_content(), id=node.node_id,
                       score=None if score is None else float(score),
                       metadata=dict(node.metadata), source=source)
    if isinstance(n, Context):
        return n
    node = getattr(n, "node", n)
    text: Any = None
    get_content = getattr(node, "get_content", None)
    if callable(get_content):
        text = get_content()
    if not isinstance(text, str):
        text = getattr(node, "text", None)
    if not isinstance(text, str):
        text = to_text(node)
    score = getattr(n, "score", None)
    try:
        score = float(score) if score is not None else None
    except (TypeError, ValueError):
        score = None
    md = getattr(node, "metadata", None)
    return Context(text=text, id=node_id(n), score=score,
                   metadata=dict(md) if isinstance(md, Mapping) else {}, source=source)


def model_name(model_dict: Any) -> str | None:
    if not isinstance(model_dict, Mapping):
        return None
    for key in ("model", "model_name", "deployment_name"):
        v = model_dict.get(key)
        if isinstance(v, str) and v and v != "unknown":
            return v
    return None


def _get(obj: Any, key: str) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(key)
    return getattr(obj, key, None)


def _usage_from(obj: Any) -> TokenUsage | None:
    if obj is None:
        return None
    n_in = _get(obj, "prompt_tokens")
    if n_in is None:
        n_in = _get(obj, "input_tokens")
    n_out = _get(obj, "completion_tokens")
    if n_out is None:
        n_out = _get(obj, "output_tokens")
    if isinstance(n_in, int) or isinstance(n_out, int):
        return TokenUsage(int(n_in or 0), int(n_out or 0))
    return None


def token_usage(response: Any) -> tuple[TokenUsage | None, str | None]:
    """(token usage, model) from a ``ChatResponse``/``CompletionResponse``: the provider's raw
    ``usage`` (OpenAI's prompt/completion tokens or Anthropic's input/output tokens, dict or
    object), else token counts in ``additional_kwargs``; the model from ``raw``."""
    raw = getattr(response, "raw", None)
    usage = _usage_from(_get(raw, "usage")) if raw is not None else None
    if usage is None:
        usage = _usage_from(getattr(response, "additional_kwargs", None))
    model = _get(raw, "model") if raw is not None else None
    return usage, model if isinstance(model, str) and model else None

