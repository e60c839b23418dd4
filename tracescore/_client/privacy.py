"""What of a record may be stored or exported (:class:`Privacy`, a part the client holds):
content capture off, or the app's ``redact`` function, applied to records, span texts,
metadata, user ids and errors. Any thread; ``prepare`` and the ``redact_*`` methods are on
the request path (the client hands out these bound methods themselves)."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable
from typing import Any

from ..record import RagRecord
from .manual import _error_type, _redact_tree


class Privacy:
    """Content capture and redaction of one client (``capture_content``, ``redact``)."""

    __slots__ = ("capture_content", "redact")

    def __init__(self, capture_content: bool, redact: Callable[[str], str] | None) -> None:
        self.capture_content = capture_content
        self.redact = redact

    def prepare(self, record: RagRecord) -> RagRecord:
        """Apply content capture/redaction to a record before anything stores or exports it.

        ``capture_content=False`` keeps no free text: query, answer, contexts, ground truths
        and prompt are dropped; the error keeps only the exception type; metadata keeps its
        keys, numbers and booleans, each string becomes ``"<redacted: N chars>"``; the user id
        becomes a hash (``sha256:`` + 16 hex). Kept as they are: trace/span ids, session id,
        tags, model, timings and token counts. With ``redact``, the function is applied to
        every one of those strings instead (metadata values, the error, the user id and each
        context's metadata included).
        """
        if not isinstance(record, RagRecord):
            return record  # submit counts it
        if not self.capture_content:
            return record.replace(query=None, answer=None, contexts=(), ground_truths=(),
                                  prompt=None, retrieval_queries=(), candidates=(),
                                  content_captured=False, agent=self.private_agent(record),
                                  error=_error_type(record.error),
                                  metadata=self.redact_value(record.metadata),
                                  user_id=self.redact_id(record.user_id))
        if self.redact is None:
            return record
        r = self.redact
        return record.replace(
            query=r(record.query) if record.query else record.query,
            answer=r(record.answer) if record.answer else record.answer,
            contexts=tuple(c.__class__(r(c.text) if isinstance(c.text, str) else c.text,
                                       c.id, c.score, self.redact_value(c.metadata), c.source)
                           for c in record.contexts),
            ground_truths=tuple(r(g) for g in record.ground_truths),
            prompt=r(record.prompt) if record.prompt else record.prompt,
            retrieval_queries=tuple(r(q) for q in record.retrieval_queries),
            candidates=tuple(c.__class__(r(c.text) if isinstance(c.text, str) else c.text,
                                         c.id, c.score, c.source, c.kept, c.dropped_by, c.via)
                             for c in record.candidates),
            error=r(record.error) if isinstance(record.error, str) else record.error,
            metadata=self.redact_value(record.metadata),
            user_id=self.redact_id(record.user_id),
            agent=self.private_agent(record),
        )

    def private_agent(self, record: RagRecord) -> Any:
        """The record's tool calls as they may be stored (docs/agents.md, "Privacy"): tool
        names, steps, outcomes and the offered tools' declarations are the app's code, kept;
        arguments are treated like metadata (each string redacted, or with capture off
        replaced by its length, so their shape can still be checked); results and error
        texts are redacted (capture off: dropped; a failed call keeps ``ok=False``)."""
        agent = record.agent
        if agent is None:
            return None
        off = not self.capture_content
        r = self.redact

        def text(t: str | None) -> str | None:
            if t is None:
                return None
            if off:
                return None
            return r(t) if r is not None else t

        calls = tuple(dataclasses.replace(
            c, arguments=self.redact_value(c.arguments), result=text(c.result),
            error=("error" if off and not c.ok else text(c.error)))
            for c in agent.calls)
        return dataclasses.replace(agent, calls=calls)

    def redact_text(self, text: str) -> str | None:
        """What may go on a span for ``text`` (None when content capture is off)."""
        if not self.capture_content:
            return None
        return self.redact(text) if self.redact is not None else text

    def redact_value(self, value: Any) -> Any:
        """Metadata as it may be stored or exported: every string redacted (capture off: each
        string replaced by its length). Containers are walked to a bounded depth."""
        if self.capture_content and self.redact is None:
            return value
        return _redact_tree(value, self.redact if self.capture_content else None, 0)

    def redact_id(self, user_id: str | None) -> str | None:
        """A user id as it may be stored or exported (capture off: a hash of it)."""
        if not isinstance(user_id, str):
            return user_id
        if not self.capture_content:
            return "sha256:" + hashlib.sha256(user_id.encode("utf-8", "replace")).hexdigest()[:16]
        return self.redact(user_id) if self.redact is not None else user_id

    def redact_error(self, error: BaseException) -> str:
        """An exception as it may go on a span status or in the database."""
        text = f"{type(error).__name__}: {error}"
        if not self.capture_content:
            return type(error).__name__
        from .._internal.secrets import scrub

        text = scrub(text)
        return self.redact(text) if self.redact is not None else text
