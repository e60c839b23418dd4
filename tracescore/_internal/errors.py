"""One funnel for tracescore's own errors.

Production: log ("app fine, telemetry degraded"), count, carry on. Under pytest: re-raise, so
tests fail loudly. :func:`tracescore.testing.production_errors` switches a test to the
production behaviour (to prove the app never sees our exceptions).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from .secrets import install_log_filter

log = logging.getLogger("tracescore")
install_log_filter()  # keys and bearer tokens never reach a log line

_lock = threading.Lock()
_counts: dict[str, int] = {}
_last_log: dict[str, float] = {}
_LOG_EVERY_S = 10.0
_force_production: list[bool] = []  # a stack, set by testing.production_errors()


def raise_internal_errors() -> bool:
    if _force_production:
        return not _force_production[-1]
    if os.environ.get("TRACESCORE_RAISE_INTERNAL_ERRORS") is not None:
        return os.environ["TRACESCORE_RAISE_INTERNAL_ERRORS"] not in ("", "0", "false")
    return "pytest" in sys.modules and "PYTEST_CURRENT_TEST" in os.environ


def record_internal_error(where: str, exc: BaseException) -> None:
    """Count and log (rate-limited per place) one internal error."""
    now = time.monotonic()
    with _lock:
        _counts[where] = _counts.get(where, 0) + 1
        n = _counts[where]
        due = now - _last_log.get(where, -1e9) >= _LOG_EVERY_S
        if due:
            _last_log[where] = now
    if due:
        log.error(
            "tracescore internal error in %s (%d so far); app fine, telemetry degraded: %r",
            where, n, exc, exc_info=exc,
        )


def internal_error_counts() -> dict[str, int]:
    with _lock:
        return dict(_counts)


class handle_internal_errors:  # noqa: N801 - used like a function
    """Log-and-continue around tracescore's own code; re-raise under pytest.

    A class rather than a ``@contextmanager`` generator: it wraps every framework callback on
    the app's request path, where a generator's set-up cost is measurable.
    """

    __slots__ = ("where", "reraise")

    def __init__(self, where: str, *, reraise: bool | None = None) -> None:
        self.where = where
        self.reraise = reraise

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> bool:
        if exc is None or not isinstance(exc, Exception):
            return False
        record_internal_error(self.where, exc)
        reraise = raise_internal_errors() if self.reraise is None else self.reraise
        return not reraise  # True swallows the exception


@contextmanager
def production_mode(enabled: bool = True) -> Iterator[None]:
    _force_production.append(enabled)
    try:
        yield
    finally:
        _force_production.pop()
