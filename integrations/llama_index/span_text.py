"""A value as a span's text: redacted, clipped to the attribute limit."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tracescore._internal.text import clip, to_text

if TYPE_CHECKING:
    from tracescore.client import Tracescore


def text_of(ts: Tracescore, value: Any) -> str | None:
    text = ts.redact_text(value if isinstance(value, str) else to_text(value))
    return None if text is None else clip(text, ts.max_attribute_chars)
