"""Turning framework values into span attribute values: bounded, never raising."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

#: Backends reject or cut very long attribute values; the database keeps the full text.
MAX_ATTRIBUTE_CHARS = 4000


def clip(text: str, limit: int = MAX_ATTRIBUTE_CHARS) -> str:
    if len(text) <= limit:
        return text
    digest = hashlib.sha256(text.encode("utf-8", "backslashreplace")).hexdigest()[:16]
    return f"{text[:limit]}… [truncated {len(text)} chars, sha256:{digest}]"


def to_text(value: Any) -> str:
    """A readable string for an input/output value (str as is, else compact JSON)."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, default=_default, ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(value)


def _default(o: Any) -> Any:
    content = getattr(o, "page_content", None) or getattr(o, "content", None)
    if isinstance(content, str):
        return content
    return repr(o)[:500]


def json_attr(value: Any) -> str:
    try:
        return json.dumps(value, default=lambda o: repr(o)[:500], ensure_ascii=False)
    except (TypeError, ValueError):
        return "{}"
    except RecursionError:  # metadata nested too deep: cut and marked, like in the database
        from tracescore._internal.validate import bound_metadata

        return json_attr(bound_metadata(value)) if isinstance(value, Mapping) else "{}"


def format_prompt(prompt: Any) -> str | None:
    """A chat prompt (LangChain or LlamaIndex messages) or a plain prompt as text."""
    if prompt is None:
        return None
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, (list, tuple)):
        parts = []
        for m in prompt:
            role = getattr(m, "type", None) or getattr(getattr(m, "role", None), "value", None) \
                or getattr(m, "role", None) or "message"
            content = getattr(m, "content", m)
            if not isinstance(content, str):
                content = to_text(content)
            parts.append(f"{role}: {content}")
        return "\n\n".join(parts)
    return to_text(prompt)
