"""Scrub API keys and bearer tokens out of every text tracescore stores, exports or logs.

A judge that answers 401 may echo the key it was sent; a proxy may put the Authorization
header in its error page. :func:`scrub` replaces the keys tracescore was configured with
(:func:`register_secret`, and ``OPENAI_API_KEY``) and anything shaped like a bearer token or
an OpenAI-style key.
A :class:`logging.Filter` on the ``tracescore`` logger applies it to log messages too.
A judge with a valid reply may quote the key in its reason as well, so the stores apply
:func:`scrub_score` to every score (error, explanation and details) before it is stored and
exported.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..score import Score

MASK = "[REDACTED]"
_PATTERNS = (
    re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]{6,}"),
    re.compile(r"(?i)((?:api[_-]?key|authorization|x-api-key)[\"']?\s*[:=]\s*[\"']?)"
               r"[^\s\"',;}]{6,}"),
    re.compile(r"\b(sk-)[A-Za-z0-9_-]{8,}"),
)
_lock = threading.Lock()
_secrets: set[str] = set()


def register_secret(secret: str | None) -> None:
    """Remember a configured key so that it is scrubbed wherever it shows up."""
    if secret and len(secret) >= 6 and secret not in ("not-needed",):
        with _lock:
            _secrets.add(secret)


#: Keys tracescore reads from the environment: secret even in a process that never built the
#: judge (a worker elsewhere did, and its scores pass through here).
_ENV_KEYS = ("OPENAI_API_KEY",)


#: (the registered keys' count, the environment's values) -> the sorted list: rebuilt only
#: when a key is registered or the environment changes (every stored score's texts pass here)
_cache: tuple[Any, list[str]] = ((), [])


def _known() -> list[str]:
    global _cache
    key = (len(_secrets), *(os.environ.get(name) for name in _ENV_KEYS))
    cached_key, known = _cache
    if key == cached_key:
        return known
    with _lock:
        found = set(_secrets)
    for value in key[1:]:
        if value and len(value) >= 6 and value != "not-needed":
            found.add(value)
    known = sorted(found, key=len, reverse=True)
    _cache = (key, known)
    return known


def scrub(text: str) -> str:
    """``text`` with the configured keys (and the environment's), bearer tokens and
    OpenAI-style keys replaced by ``[REDACTED]``."""
    if not text:
        return text
    secrets = _known()
    for s in secrets:
        if s in text:
            text = text.replace(s, MASK)
    for p in _PATTERNS:
        if p.search(text) is not None:  # (most texts have none: a scan, no new string)
            text = p.sub(_masked, text)
    return text


def _masked(m: re.Match[str]) -> str:
    return m.group(1) + MASK


def scrub_opt(text: str | None) -> str | None:
    return None if text is None else scrub(text)


def scrub_value(value: Any) -> Any:
    """``value`` with every string in it scrubbed (dicts, lists and tuples walked, keys too);
    other values as they are."""
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, dict):
        return {scrub_value(k): scrub_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [scrub_value(v) for v in value]
    if isinstance(value, tuple):
        return tuple(scrub_value(v) for v in value)
    return value


def scrub_score(s: Score) -> Score:
    """``s`` with its error, explanation and details scrubbed (``s`` itself when clean)."""
    error = scrub(s.error) if s.error else s.error
    explanation = scrub(s.explanation) if s.explanation else s.explanation
    details = scrub_value(dict(s.details)) if s.details else s.details
    if error == s.error and explanation == s.explanation and details == s.details:
        return s
    return dataclasses.replace(s, error=error, explanation=explanation, details=details)


class ScrubFilter(logging.Filter):
    """Formats a tracescore log record's message (and traceback) once, scrubbed."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            record.msg = scrub(record.getMessage())
            record.args = None
            if record.exc_info and not record.exc_text:
                record.exc_text = scrub(logging.Formatter().formatException(record.exc_info))
        except Exception:  # a log line must never fail
            pass
        return True


def install_log_filter() -> None:
    logger = logging.getLogger("tracescore")
    if not any(isinstance(f, ScrubFilter) for f in logger.filters):
        logger.addFilter(ScrubFilter())
