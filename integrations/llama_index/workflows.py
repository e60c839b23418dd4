"""Agents and workflows (``Workflow.run``: FunctionAgent, ReActAgent, AgentWorkflow, custom
workflows): the user's message from the start event and the answer from the ``StopEvent``.

A workflow run's contexts follow the same assembly as a query engine's (assembly.py): the input
of the synthesizers its steps and tools ran, the output of its outermost retrievers,
vector-store searches and postprocessors that nothing consumed after them.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

from llama_index.core.workflow import StopEvent

from .extract import message_text, response_text

__all__ = ["event_field", "start_event_query", "workflow_answer"]

#: Start-event fields that hold the user's message, in order of preference (agents take
#: ``user_msg``; custom workflows are started with keyword arguments of their own).
START_EVENT_KEYS = ("user_msg", "query", "question", "input", "query_str", "msg", "message")
MAX_START_FIELDS = 32


def event_field(event: Any, key: str) -> Any:
    """A workflow event's field: declared fields are attributes, the rest live in the
    event's own dict (``Event.get``)."""
    get = getattr(event, "get", None)
    if callable(get):
        try:
            return get(key)
        except Exception:
            return None
    return getattr(event, key, None)


def start_event_query(start_event: Any) -> str | None:
    """The user's message from a workflow's start event: ``user_msg`` (a str or a
    ``ChatMessage``) for agents, else the first known key, else its only string field."""
    if start_event is None:
        return None
    for key in START_EVENT_KEYS:
        v = event_field(start_event, key)
        if isinstance(v, str) and v:
            return v
        text = message_text(v) if v is not None else None
        if text:
            return text
    data = getattr(start_event, "_data", None)
    if isinstance(data, Mapping):
        strings = [v for k, v in itertools.islice(data.items(), MAX_START_FIELDS)
                   if isinstance(v, str) and v]
        if len(strings) == 1:
            return strings[0]
    return None


def workflow_answer(result: Any) -> str | None:
    """The final answer of a workflow run: its ``StopEvent``'s result — an agent's
    ``AgentOutput`` (its response message), a ``Response``, a str, or a dict with a
    ``response``/``answer`` entry."""
    if isinstance(result, StopEvent):
        result = result.result
    if result is None:
        return None
    if isinstance(result, str):
        return result
    text = response_text(result)
    if text is not None:
        return text
    response = getattr(result, "response", None)  # AgentOutput(response=ChatMessage)
    if response is not None:
        return message_text(response) if not isinstance(response, str) else response
    if isinstance(result, Mapping):
        for key in ("response", "answer", "result", "output"):
            v = result.get(key)
            if isinstance(v, str):
                return v
            if isinstance(v, Mapping) and isinstance(v.get("content"), str):
                return str(v["content"])
    return None
