"""Text attributes on a run's spans: redacted, clipped, and built off the request path on a
span that is still pending (a :class:`~.runs._Step`, :class:`~.._spans._PendingRoot`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tracescore._internal.text import clip, to_text

from .._spans import NO_SPAN, _only, _PendingRoot
from .runs import _Step

if TYPE_CHECKING:
    from tracescore.client import Tracescore


def text_of(ts: Tracescore, value: Any) -> str | None:
    """``value`` as a span's text: redacted, clipped to the attribute limit."""
    text = ts.redact_text(to_text(value))
    return None if text is None else clip(text, ts.max_attribute_chars)


def _text_attr(ts: Tracescore, key: str, value: Any) -> dict[str, Any]:
    return _only({key: text_of(ts, value)})


def set_text(ts: Tracescore, span: Any, key: str, value: Any) -> None:
    """Set a text attribute; on a pending span, build it later, off the request path."""
    if not ts.capture_content or span is NO_SPAN:
        return
    if type(span) is _Step or type(span) is _PendingRoot:
        # (flat in the span's lazy list: no object of its own for the collector)
        span.later3(_text_attr, ts, key, value)
    else:
        text = text_of(ts, value)
        if text is not None:
            span.set_attribute(key, text)


def snapshot(value: Any) -> Any:
    """``value`` as it is now, for a text built later (by the writer): a dict's or list's
    top-level lists copied — a chat app may append to its ``messages`` once the request has
    returned, and the span shows the request's. (Message objects are not copied.)"""
    if type(value) is dict:
        return {k: list(v) if type(v) is list else v for k, v in value.items()}
    if type(value) is list:
        return list(value)
    return value
