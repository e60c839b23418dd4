"""What the OpenAI-compatible backends (judge, embedder) read off an ``openai`` SDK error."""

from __future__ import annotations

import time
from email.utils import parsedate_to_datetime
from typing import Any


def message(exc: Exception) -> str:
    """The server's error message, bounded."""
    return str(getattr(exc, "message", None) or exc)[:300]


def retry_after(exc: Any) -> float | None:
    """Seconds to wait from ``retry-after-ms``, else ``retry-after`` (seconds or an HTTP
    date); None when the response says nothing usable."""
    headers = getattr(getattr(exc, "response", None), "headers", None) or {}
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return max(0.0, float(ms) / 1000)
        except ValueError:
            pass
    ra = headers.get("retry-after")
    if not ra:
        return None
    try:
        return max(0.0, float(ra))
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(ra).timestamp() - time.time())
    except (TypeError, ValueError):
        return None
