"""Alert notifications: how they are delivered (HTTP POST, retried with backoff, counted) and
the background :class:`Notifier`; what is sent (generic JSON webhook, Slack) is built in
:mod:`.alerts`.

The path of a state change: the evaluator builds an :class:`AlertEvent`, turns it into one
:class:`~.state.OutboxItem` per channel (:func:`outbox_items`) and stores them with the state
in one transaction (:func:`.state.save_evaluation`); a deliverer — the :class:`Notifier`
thread, or ``tracescore check`` calling :func:`deliver_due` before it exits — claims due
rows and POSTs them. A failed delivery is retried with exponential backoff and full jitter
(base 2 s, doubling, at most 10 min; a ``Retry-After`` is honoured, up to an hour) until
``max_attempts`` (12) have failed; a permanent error (a 4xx other than 408/425/429, a
redirect, a URL that is not http(s)) fails the row at once. Every outcome is counted in the
store's ``counters`` table — ``notify.sent``, ``notify.retried``, ``notify.failed`` — in the
transaction that records it.

URLs are secrets (a Slack webhook URL is a credential): they live only in the channel
configuration the caller passes. The outbox, error texts and log lines name the channel,
never the URL; :class:`DeliveryError` texts are scrubbed of the URL's path and query.

Receivers may see a notification twice (a deliverer that dies after the POST and before
recording it leaves the row to be sent again): each POST carries an ``Idempotency-Key``
header, the same for every attempt of one outbox row, to dedupe on.

Threading: :func:`deliver` and :func:`deliver_due` block (network and database) and run on a
background thread or in the CLI, never on the app's request path. The :class:`Notifier` is
one daemon thread with its own store; ``wake()`` and ``stop()`` may be called from any thread
and never raise.
"""

from __future__ import annotations

import datetime as _dt
import email.utils
import http.client
import json
import logging
import queue
import random
import threading
import time
import urllib.error
import uuid
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import unquote, urlsplit

from .._internal.errors import handle_internal_errors, record_internal_error
from .._internal.secrets import scrub
from .._internal.service import Service
from ..store import monitor_state as _state
from . import _post
from .alerts import (  # noqa: F401 (re-exported)
    ATTR_HI,
    ATTR_LO,
    ATTR_N,
    ATTR_NAME,
    ATTR_PREVIOUS,
    ATTR_SCORE,
    ATTR_STATE,
    ATTR_VALUE,
    EVENT_NAME,
    KINDS,
    PAYLOAD_VERSION,
    SLACK,
    WEBHOOK,
    AlertEvent,
    _finite,
    outbox_items,
    payload_for,
    slack_payload,
    summary,
    webhook_payload,
)

__all__ = [
    "ATTR_HI", "ATTR_LO", "ATTR_N", "ATTR_NAME", "ATTR_PREVIOUS", "ATTR_SCORE", "ATTR_STATE",
    "ATTR_VALUE", "EVENT_NAME", "KINDS", "PAYLOAD_VERSION", "AlertEvent", "DeliveryError",
    "Notifier", "backoff_s", "deliver", "deliver_due", "emit_state_change", "outbox_items",
    "payload_for", "slack_payload", "summary", "webhook_payload",
]

log = logging.getLogger("tracescore")

#: Delivery retries: base and cap of the exponential backoff (seconds), attempts in all.
BASE_S, CAP_S, MAX_ATTEMPTS = 2.0, 600.0, 12
#: Channels delivered at once by one pass (each channel's rows go one after another).
MAX_PARALLEL = 8
#: A receiver's ``Retry-After`` is honoured up to this long.
RETRY_AFTER_CAP_S = 3600.0


# -- one delivery ----------------------------------------------------------------------------
class DeliveryError(Exception):
    """A POST that did not succeed. ``permanent``: trying again will not help (a 4xx other
    than 408/425/429, a redirect, a bad URL); ``retry_after``: seconds the receiver asked to
    wait. The text names the channel and never contains the URL."""

    def __init__(self, reason: str, retry_after: float | None = None,
                 permanent: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after = retry_after
        self.permanent = permanent


def _retry_after(value: str | None, now: float) -> float | None:
    """A ``Retry-After`` header (seconds, or an HTTP date) as seconds from now."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=_dt.timezone.utc)
    return max(0.0, when.timestamp() - now)


def _without_url(text: str, url: str) -> str:
    """``text`` with the URL, its path and its query cut out (the secret parts of a webhook
    URL), then scrubbed of known keys."""
    parts = urlsplit(url)
    pieces = [url, parts.path + ("?" + parts.query if parts.query else ""), parts.path,
              parts.query]
    if "@" in parts.netloc:  # user:password@ — and each half, raw and decoded
        info = parts.netloc.rpartition("@")[0]
        pieces += [info, *info.split(":", 1), *(unquote(x) for x in info.split(":", 1))]
    # then each long path segment alone (a Slack URL's tokens), should a text hold a part
    pieces += [seg for seg in parts.path.split("/") if len(seg) >= 8]
    for piece in pieces:
        if len(piece) > 1:
            text = text.replace(piece, "<url>")
    return scrub(text)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, urllib.error.URLError):
        inner = exc.reason
        if isinstance(inner, BaseException):
            return _describe(inner)
        return f"connection failed: {inner}"
    if isinstance(exc, TimeoutError):
        return "timed out"
    if isinstance(exc, OSError) and exc.strerror:
        return f"connection failed: {type(exc).__name__}: {exc.strerror}"
    return f"connection failed: {type(exc).__name__}: {exc}"


def deliver(url: str, payload: Mapping[str, Any], *, timeout_s: float = 10.0,
            headers: Mapping[str, str] | None = None, channel: str = "webhook") -> None:
    """POST ``payload`` as JSON to ``url``; returns on a 2xx answer. Blocks at most
    ``timeout_s`` in all: one deadline for connecting, sending and reading the answer (a
    receiver that answers one byte at a time is cut off at the deadline like a silent one).
    A URL's ``user:password@`` is sent as HTTP Basic authentication.

    Raises :class:`DeliveryError`: retryable for 408/425/429/5xx answers, connection errors
    and timeouts (with ``retry_after`` from the answer's ``Retry-After``), permanent for
    other 4xx, a redirect (not followed: a POST would turn into a GET), or a URL that is not
    http(s). Its text starts with ``channel`` and never contains the URL or its password."""
    if not isinstance(url, str):
        raise DeliveryError(f"channel {channel}: the URL is not an http(s) URL", permanent=True)
    body = json.dumps(payload, ensure_ascii=False, allow_nan=False).encode("utf-8")
    send = {"Content-Type": "application/json; charset=utf-8",
            "User-Agent": "tracescore-notifier", **dict(headers or {})}
    try:
        for value in send.values():
            value.encode("latin-1")  # (before connecting: what HTTP/1.1 headers can carry)
        answer = _post.post(url, body, send, timeout_s)
    except _post.BadURL as exc:
        raise DeliveryError(f"channel {channel}: {exc}", permanent=True) from None
    except _post.DeadlineExceeded:
        raise DeliveryError(f"channel {channel}: timed out (no complete answer within "
                            f"{timeout_s:g} s)") from None
    except UnicodeEncodeError:  # a header a config check did not see (a Channel made in code)
        raise DeliveryError(f"channel {channel}: a header value is not Latin-1 text",
                            permanent=True) from None
    except (OSError, http.client.HTTPException) as exc:
        raise DeliveryError(_without_url(f"channel {channel}: {_describe(exc)}", url)
                            ) from None
    code = answer.status
    if 200 <= code < 300:
        return
    said = answer.body[:4096].decode("utf-8", "replace").strip()
    # cut the URL out *before* clipping, so a clip cannot leave half a secret behind
    said = _without_url(said, url)[:200]
    reason = f"channel {channel}: HTTP {code}" + (f" {said!r}" if said else "")
    if 300 <= code < 400:
        reason += " (a redirect; not followed)"
    retryable = code in (408, 425, 429) or code >= 500
    retry_after = _retry_after(answer.headers.get("Retry-After"), time.time())
    raise DeliveryError(_without_url(reason, url), retry_after=retry_after,
                        permanent=not retryable)


# -- the outbox, one pass --------------------------------------------------------------------
def backoff_s(attempt: int, *, base_s: float = BASE_S, cap_s: float = CAP_S,
              rng: random.Random | None = None) -> float:
    """The wait after failed attempt number ``attempt`` (1, 2, …): exponential backoff with
    full jitter, uniform in [0, min(cap_s, base_s · 2^(attempt-1))] — spreads the retries of
    many deliverers after a receiver's outage (AWS Architecture Blog, "Exponential Backoff
    And Jitter", 2015)."""
    ceiling = min(cap_s, base_s * 2.0 ** min(max(attempt - 1, 0), 60))
    return (rng or random).uniform(0.0, ceiling)


def _channels(channels: Mapping[str, Any] | Iterable[Any]) -> dict[str, tuple[Any, ...]]:
    """name → (kind, url, headers, timeout_s), from a mapping of names to such tuples or to
    channel objects, or an iterable of channel objects (``.name .kind .url .headers
    .timeout_s``; resolved headers preferred)."""
    def norm(value: Any) -> tuple[Any, ...]:
        if isinstance(value, tuple):
            kind, url, headers, timeout_s = value
            return kind, url, dict(headers or {}), float(timeout_s)
        headers = getattr(value, "resolved_headers", None)
        if headers is None:
            headers = getattr(value, "headers", None)
        return (value.kind, value.url, dict(headers or {}),
                float(getattr(value, "timeout_s", 10.0)))

    if isinstance(channels, Mapping):
        return {str(k): norm(v) for k, v in channels.items()}
    items: Iterable[Any] = channels
    return {str(c.name): norm(c) for c in items}


_warn_lock = threading.Lock()
_last_warn: dict[str, float] = {}
_WARN_EVERY_S = 60.0


def _warn(key: str, msg: str, *args: Any) -> None:
    """A warning at most once a minute per ``key`` (a receiver down for an hour must not fill
    the log)."""
    now = time.monotonic()
    with _warn_lock:
        if now - _last_warn.get(key, -1e9) < _WARN_EVERY_S:
            return
        _last_warn[key] = now
    log.warning(msg, *args)


def deliver_due(store: Any, channels: Mapping[str, Any] | Iterable[Any],
                now: float | None = None, *, limit: int = 20,
                max_attempts: int = MAX_ATTEMPTS, base_s: float = BASE_S,
                cap_s: float = CAP_S, rng: random.Random | None = None,
                owner: str | None = None, clock: Callable[[], float] = time.time,
                stop: threading.Event | None = None) -> int:
    """One pass over the outbox: claim up to ``limit`` due rows of the known ``channels``
    and POST them — channels at once (up to :data:`MAX_PARALLEL` threads), each channel's
    rows one after the other; returns how many were sent. Blocks until every claimed row
    has its outcome: each POST within its channel's ``timeout_s`` (one deadline for the
    whole request), so a slow channel delays its own rows only. Used by the
    :class:`Notifier` thread and by ``tracescore check`` before it exits; the store is used
    by the calling thread only.

    ``now``: the time the pass runs at (default ``clock()`` at each step); tests pass it, with
    ``base_s``/``rng``, to drive the backoff without waiting. A failure within
    ``max_attempts`` is retried at ``now + backoff_s(attempts)`` (or later, by the receiver's
    ``Retry-After``); permanent failures and the last attempt fail the row. Counted in the
    store's counters in the transaction that records the outcome. ``stop`` set: the pass
    ends after the POSTs in flight, and gives the rows it claimed but did not reach back."""
    chans = _channels(channels)
    if not chans:
        return 0
    owner = owner or uuid.uuid4().hex
    t0 = clock() if now is None else now
    due = _state.next_due(store, sorted(chans))
    if due is None or due > t0:  # a read, not a claim: no write lock when nothing is due
        return 0
    # a claim outlives the whole pass (a channel's rows go one after another, each POST
    # within its channel's timeout_s)
    claim_s = 30.0 + limit * max(c[3] for c in chans.values())
    rows = _state.due_outbox(store, t0, limit, channels=sorted(chans), owner=owner,
                             claim_s=claim_s)
    if not rows:
        return 0
    by_channel: dict[str, list[_state.OutboxRow]] = {}
    for row in rows:
        by_channel.setdefault(row.channel, []).append(row)
    done: queue.SimpleQueue[tuple[_state.OutboxRow, BaseException | None, bool]] = \
        queue.SimpleQueue()

    def post_all(channel_rows: list[_state.OutboxRow]) -> None:
        # one channel's rows in order, on a thread of their own: a slow receiver delays its
        # own channel only (the database is written by the calling thread, not here)
        for row in channel_rows:
            if stop is not None and stop.is_set():
                done.put((row, None, False))
                continue
            try:  # (every row gets exactly one outcome: the calling thread waits for each)
                _, url, headers, timeout_s = chans[row.channel]
                headers = {**headers,
                           "Idempotency-Key": f"tracescore-{row.id}-{row.created_at:.6f}"}
                deliver(url, row.payload, timeout_s=timeout_s, headers=headers,
                        channel=row.channel)
            except BaseException as exc:  # noqa: BLE001 - handed to the calling thread
                done.put((row, exc, True))
            else:
                done.put((row, None, True))

    # the outcomes are recorded here as they come, so a row sent is marked sent at once
    pool = ThreadPoolExecutor(max_workers=min(MAX_PARALLEL, len(by_channel)),
                              thread_name_prefix="tracescore-notify")
    try:
        for group in by_channel.values():
            pool.submit(post_all, group)
        sent = 0
        unreached: list[int] = []
        unexpected: BaseException | None = None
        for _ in range(len(rows)):
            row, exc, tried = done.get()
            if not tried:
                unreached.append(row.id)
            elif isinstance(exc, DeliveryError):
                _failed(store, row, exc, clock() if now is None else now, owner=owner,
                        max_attempts=max_attempts, base_s=base_s, cap_s=cap_s, rng=rng)
            elif exc is not None:
                unexpected = unexpected or exc  # the row stays claimed until its claim ends
            else:
                with store.transaction():
                    if _state.outbox_sent(store, row.id, owner=owner,
                                          at=clock() if now is None else now):
                        store.bump_counters({"notify.sent": 1})
                        sent += 1
        if unreached:
            _state.release_claims(store, unreached, owner)
        if unexpected is not None:
            raise unexpected
        return sent
    finally:
        pool.shutdown(wait=False)


def _failed(store: Any, row: _state.OutboxRow, exc: DeliveryError, t: float, *, owner: str,
            max_attempts: int, base_s: float, cap_s: float,
            rng: random.Random | None) -> None:
    if exc.permanent or row.attempts >= max_attempts:
        why = exc.reason if exc.permanent else f"{exc.reason} (after {row.attempts} attempts)"
        with store.transaction():
            if _state.outbox_failed(store, row.id, why, owner=owner):
                store.bump_counters({"notify.failed": 1})
        log.warning("tracescore: a notification of monitor %s to channel %s failed for "
                    "good: %s", row.monitor, row.channel, why)
        return
    delay = backoff_s(row.attempts, base_s=base_s, cap_s=cap_s, rng=rng)
    if exc.retry_after is not None:
        delay = max(delay, min(exc.retry_after, RETRY_AFTER_CAP_S))
    with store.transaction():
        if _state.outbox_retry(store, row.id, exc.reason, t + delay, owner=owner):
            store.bump_counters({"notify.retried": 1})
    _warn(f"retry:{row.channel}", "tracescore: a notification to channel %s failed (%s); "
          "retrying in %.1f s (attempt %d of %d)", row.channel, exc.reason, delay,
          row.attempts, max_attempts)


# -- the background deliverer ----------------------------------------------------------------
class Notifier:
    """A daemon thread that delivers the outbox of ``db``: a pass of :func:`deliver_due`
    (``batch`` rows at most), then sleep until the next row is due, ``interval_s`` at most,
    or until :meth:`wake` (the evaluator queued something).

    The thread opens its own store (``tracescore.store.open_store(db)``) and closes it when
    it stops. It never raises: a database that cannot be reached is logged (rate-limited)
    and tried again; anything else goes through tracescore's internal-error funnel. Several
    notifiers on one database (threads, processes, hosts on PostgreSQL) share the work and
    send each row once. ``clock``/``rng``/``base_s``: injectable for tests.
    """

    def __init__(self, db: Any, channels: Mapping[str, Any] | Iterable[Any], *,
                 interval_s: float = 30.0, batch: int = 20,
                 max_attempts: int = MAX_ATTEMPTS, base_s: float = BASE_S,
                 cap_s: float = CAP_S, clock: Callable[[], float] = time.time,
                 rng: random.Random | None = None, name: str = "tracescore-notifier") -> None:
        if batch < 1:
            raise ValueError(f"batch must be >= 1, got {batch!r}")
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {max_attempts!r}")
        self.db = db
        self.channels = _channels(channels)
        self.interval_s = float(interval_s)
        self.batch = batch
        self.max_attempts = max_attempts
        self.base_s = base_s
        self.cap_s = cap_s
        self.clock = clock
        self.rng = rng
        self.owner = f"{name}-{uuid.uuid4().hex[:12]}"
        self._store: Any = None  # the thread's store, opened at its first pass
        self._error_wait = 0.5  # after a failed pass; doubles to 60 s, reset by one that passes
        self._service = Service(name, self._step, interval_s=self.interval_s,
                                on_error=self._failed, on_exit=self._close_store)

    def start(self) -> Notifier:
        self._service.start()
        return self

    def wake(self) -> None:
        """Deliver now (non-blocking; any thread)."""
        self._service.wake()

    @property
    def alive(self) -> bool:
        return self._service.alive

    def stop(self, timeout: float | None = 10.0) -> bool:
        """Stop after the POST in flight (blocks up to ``timeout``; a POST takes up to its
        channel's ``timeout_s``); True when the thread has ended. Rows not yet sent stay in
        the outbox for the next deliverer."""
        return self._service.stop(timeout)

    def _pass(self, store: Any) -> float:
        """One pass; the seconds to sleep before the next."""
        deliver_due(store, self.channels, limit=self.batch, max_attempts=self.max_attempts,
                    base_s=self.base_s, cap_s=self.cap_s, rng=self.rng, owner=self.owner,
                    clock=self.clock, stop=self._service.stopping)
        due = _state.next_due(store, sorted(self.channels))
        if due is None:
            return self.interval_s
        return min(self.interval_s, max(0.0, due - self.clock()))

    def _step(self) -> float:
        from ..store import open_store

        if self._store is None:
            self._store = open_store(self.db)
        wait = self._pass(self._store)
        self._error_wait = 0.5
        return wait

    def _failed(self, exc: Exception) -> float:
        store = self._store
        if store is None or store.unavailable(exc):
            _warn("notifier-db", "tracescore: notifications wait, the database "
                  "is unavailable: %s", scrub(repr(exc)))
        else:
            record_internal_error("monitor.notifier", exc)
        wait = min(self._error_wait, self.interval_s)
        self._error_wait = min(self._error_wait * 2, 60.0)
        return wait

    def _close_store(self) -> None:
        store, self._store = self._store, None
        if store is not None:
            with handle_internal_errors("monitor.notifier.close", reraise=False):
                store.close()


# -- OpenTelemetry ---------------------------------------------------------------------------
def emit_state_change(otel_logger: Any, event: AlertEvent) -> None:
    """One OTel log record (``event_name`` ``tracescore.monitor.state_change``) for a state
    change, on ``otel_logger`` (an OTel SDK ``Logger``, e.g. from tracescore's own
    ``LoggerProvider``; None: nothing). Severity WARN for ALERT, INFO otherwise; attributes
    ``tracescore.monitor.{name,state,previous,score,value,lo,hi,n}``; the body is the
    one-line :func:`summary`. Non-blocking (the SDK only enqueues); never raises in
    production."""
    if otel_logger is None:
        return
    from opentelemetry._logs import SeverityNumber

    with handle_internal_errors("monitor.emit_state_change"):
        attrs: dict[str, Any] = {ATTR_NAME: event.monitor, ATTR_STATE: event.state,
                                 ATTR_SCORE: event.score, ATTR_N: int(event.n)}
        if event.previous is not None:
            attrs[ATTR_PREVIOUS] = event.previous
        for key, v in ((ATTR_VALUE, event.value), (ATTR_LO, event.lo), (ATTR_HI, event.hi)):
            if _finite(v) is not None:
                attrs[key] = float(v)  # type: ignore[arg-type]
        alert = event.state == "ALERT"
        otel_logger.emit(
            timestamp=int(event.at * 1e9), observed_timestamp=time.time_ns(),
            severity_number=SeverityNumber.WARN if alert else SeverityNumber.INFO,
            severity_text="WARN" if alert else "INFO", event_name=EVENT_NAME,
            body=summary(event), attributes=attrs)
