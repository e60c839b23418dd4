"""LangChain and LangGraph capture, shipped as ``tracescore.integrations.langchain``.

- :mod:`.handler` — the callback handler: spans and the run map;
- :mod:`.live` — the run map as code beside the callbacks sees it (searches, owners);
- :mod:`.span_text` — text attributes on the spans (redacted, clipped, built lazily);
- :mod:`.emit` — the record of a root run, and cross-framework ownership;
- :mod:`.runs` — the run map's entries and what a root gathers;
- :mod:`.messages` — reading queries, answers, messages, graph state and documents;
- :mod:`.vectorstores` — vector-store searches outside retrievers as retrieval steps.

Process-wide instrumentation (:func:`instrument`) is here.
"""

from __future__ import annotations

from .. import require

require("langchain_core", "langchain")

from .handler import MAX_OPEN_RUNS, TracescoreCallbackHandler  # noqa: E402
from .messages import (  # noqa: E402
    ANSWER_KEYS,
    GROUND_TRUTH_KEYS,
    MAX_DOCUMENTS,
    MAX_MESSAGES,
    MAX_STATE_KEYS,
    QUERY_KEYS,
    SESSION_KEYS,
    _config_session,
    _message_text,
    _name,
    _role,
    _session_user,
    _text_of,
    artifact_documents,
    document_context,
    extract_answer,
    extract_query,
    final_ai_message,
    last_human_message,
    llm_result_parts,
    merge_retrievals,
    prompt_tool_calls,
    state_documents,
    state_updates,
    tool_query,
)
from .vectorstores import patch_vector_stores  # noqa: E402

__all__ = [
    "ANSWER_KEYS", "GROUND_TRUTH_KEYS", "MAX_DOCUMENTS", "MAX_MESSAGES", "MAX_OPEN_RUNS",
    "MAX_STATE_KEYS", "QUERY_KEYS", "SESSION_KEYS", "TracescoreCallbackHandler",
    "_config_session", "_message_text", "_name", "_role", "_session_user", "_text_of",
    "artifact_documents", "document_context", "extract_answer", "extract_query",
    "final_ai_message", "instrument", "last_human_message", "llm_result_parts",
    "merge_retrievals", "patch_vector_stores", "prompt_tool_calls", "state_documents",
    "state_updates", "tool_query", "uninstrument",
]


class _HandlerSlot:
    """What langchain_core's configure hook reads: ``.get()`` → the handler or None.

    A ``ContextVar`` would not do: threads started by the app (and by ``batch``) begin with an
    empty context, so a value set in one thread would not reach them.
    """

    def __init__(self) -> None:
        self.handler: TracescoreCallbackHandler | None = None

    def get(self) -> TracescoreCallbackHandler | None:
        return self.handler


_slot = _HandlerSlot()
_registered = False


def instrument(handler: TracescoreCallbackHandler) -> None:
    """Add ``handler`` to every LangChain run in the process (idempotent)."""
    global _registered
    from langchain_core.tracers.context import register_configure_hook

    if not _registered:
        # The handler class makes LangChain skip the hook when the same kind of handler was
        # passed explicitly in ``callbacks``, so a run is never captured twice.
        register_configure_hook(_slot, True, TracescoreCallbackHandler)  # type: ignore[arg-type]
        _registered = True
    _slot.handler = handler


def uninstrument(handler: TracescoreCallbackHandler | None = None) -> None:
    """Stop adding ``handler`` (or any) to new runs; the vector-store wrappers stay, inert."""
    if handler is None or _slot.handler is handler:
        _slot.handler = None
