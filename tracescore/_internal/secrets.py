"""Scrub API keys and bearer tokens out of every error text tracescore stores, exports or logs.

A judge that answers 401 may echo the key it was sent; a proxy may put the Authorization
header in its error page. :func:`scrub` replaces the keys tracescore was configured with
(:func:`register_secret`) and anything shaped like a bearer token or an OpenAI-style key.
A :class:`logging.Filter` on the ``tracescore`` logger applies it to log messages too.
"""

from __future__ import annotations

import logging
import re
import threading

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


def scrub(text: str) -> str:
    if not text:
        return text
    with _lock:
        secrets = sorted(_secrets, key=len, reverse=True)
    for s in secrets:
        if s in text:
            text = text.replace(s, MASK)
    for p in _PATTERNS:
        text = p.sub(lambda m: m.group(1) + MASK, text)
    return text


def scrub_opt(text: str | None) -> str | None:
    return None if text is None else scrub(text)


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
