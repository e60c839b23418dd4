"""A run's session and user ids: explicit (``session(...)``, ``ts.run(...)``), from
``instrument_tags``, from a chat engine's memory or an agent run's memory, else one id per chat
engine object."""

from __future__ import annotations

import threading
import uuid
import weakref
from collections.abc import Mapping
from typing import Any

from tracescore.runs import RunScope

from ._model import CHAT, SESSION_KEYS, session_var
from .workflows import event_field

__all__ = ["EngineSessions", "session_ids"]


class EngineSessions:
    """One generated session id per chat engine object whose memory has none (weakly keyed)."""

    def __init__(self) -> None:
        self._ids: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def of(self, engine: Any) -> str | None:
        # LlamaIndex's Memory has a session_id (random per memory unless the app sets it): the
        # natural conversation id. Older memories (ChatMemoryBuffer) have none: one id per engine.
        memory = getattr(engine, "_memory", None) or getattr(engine, "memory", None)
        sid = getattr(memory, "session_id", None)
        if isinstance(sid, str) and sid:
            return sid
        try:
            with self._lock:
                got = self._ids.get(engine)
                if got is None:
                    got = self._ids[engine] = uuid.uuid4().hex
                return got
        except TypeError:  # not weak-referenceable
            return None


def session_ids(engines: EngineSessions, kind: str, instance: Any, metadata: Mapping[str, Any],
                scope: RunScope | None = None,
                start_event: Any = None) -> tuple[str | None, str | None]:
    explicit = session_var.get()
    session_id, user_id = explicit if explicit is not None else (None, None)
    if scope is not None:
        session_id = session_id or scope.session_id
        user_id = user_id or scope.user_id
    if session_id is None:
        session_id = next((metadata[k] for k in SESSION_KEYS
                           if isinstance(metadata.get(k), str)), None)
    if user_id is None and isinstance(metadata.get("user_id"), str):
        user_id = metadata["user_id"]
    if session_id is None and kind == CHAT:
        session_id = engines.of(instance)
    if session_id is None and start_event is not None:
        # An agent run given a memory (``agent.run(q, memory=Memory.from_defaults(
        # session_id=...))``): the memory's session is the conversation.
        sid = getattr(event_field(start_event, "memory"), "session_id", None)
        if isinstance(sid, str) and sid:
            session_id = sid
    return session_id, user_id
