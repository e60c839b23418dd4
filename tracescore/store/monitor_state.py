"""Monitor states, their history, the evaluator's lease and the notification outbox (SQL):
the store's monitor-state role (``tracescore.monitor.state`` names this module for the
monitors; the SQL and the backend checks live here, in the store).

Four tables, on both backends (:func:`ddl` gives each dialect's statements; schema version 3
applies them, :func:`ensure_tables` creates them on a database that has not been migrated):

- ``monitor_state`` — one row per monitor: its state (``OK`` / ``WARNING`` / ``ALERT`` /
  ``NO_DATA``) since when, the last estimate (value, interval ``lo``..``hi``, n), a JSON
  ``detail``, the sequential test's serialised state (``test_state``, opaque here), the
  hysteresis counters (``streak`` evaluations agreeing with the ``pending`` state) and when it
  last notified.
- ``monitor_history`` — one row per state change (and the first state of a monitor).
- ``monitor_lease`` — who evaluates: one evaluator per database at a time.
- ``monitor_outbox`` — notifications waiting for delivery (a transactional outbox). Rows name
  their channel (``channel``, ``url_ref``): **never a URL**, which may hold a secret (a Slack
  webhook URL is one); the deliverer looks the URL up in its own configuration.

Exactly-once, as far as HTTP allows: :func:`save_evaluation` writes a state change, its history
row and its outbox rows in **one transaction**, and only while the caller holds the lease
(checked in the same transaction, the lease row locked ``FOR SHARE`` on PostgreSQL so it cannot
change hands before the commit). Deliverers claim outbox rows atomically
(:func:`due_outbox`: ``UPDATE … WHERE id IN (SELECT … FOR UPDATE SKIP LOCKED)`` on PostgreSQL;
SQLite's write transaction is exclusive) for a bounded time, so several notifier threads or
processes on one database send each row once; a deliverer that dies mid-send leaves its claim
to expire, and the row is sent again (at least once: receivers may dedupe on the
``Idempotency-Key`` header, see :mod:`.notify`).

SQL is written once with ``?`` placeholders and run through
:func:`tracescore.store.compat.translate` on PostgreSQL; the only dialect differences (the id
column, row locks, the clock) are in :data:`_ID`, :data:`_SHARE`, :data:`_SKIP_LOCKED` and
:func:`db_now`. Times are unix seconds. Lease times come from :func:`db_now` — the database's
clock on PostgreSQL, so every host of a fleet agrees on when a lease expires.

Threading: every function takes a store (``tracescore.store.open_store(db)``) owned by the
calling thread, blocks on the database, and must never run on the app's request path.
"""

from __future__ import annotations

import json
import math
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

from .._internal.secrets import scrub
from .compat import translate
from .monitor_tables import DDL, ddl

__all__ = [
    "DDL", "DEFAULT_LEASE", "FAILED", "HISTORY_COLS", "OUTBOX_STATUSES", "PENDING", "SENT",
    "STATES", "Figures", "HistoryRow", "OutboxItem", "OutboxRow", "StateRow", "acquire_lease",
    "db_now", "ddl", "due_outbox", "ensure_tables", "history", "history_row", "lease_holder",
    "load_states", "mark_notified", "next_due", "outbox_counts", "outbox_failed", "outbox_retry", "outbox_rows", "outbox_sent",
    "release_claims", "release_lease", "save_evaluation",
]

STATES = ("OK", "WARNING", "ALERT", "NO_DATA")
#: The lease every evaluator of a database competes for.
DEFAULT_LEASE = "monitors"
PENDING, SENT, FAILED = "pending", "sent", "failed"
OUTBOX_STATUSES = (PENDING, SENT, FAILED)
#: Longest error text kept in ``monitor_outbox.last_error``.
MAX_ERROR_CHARS = 500

# -- schema ----------------------------------------------------------------------------------
def ensure_tables(store: Any) -> None:
    """Create the monitor tables if missing (idempotent; blocking). On PostgreSQL under the
    schema migration's advisory lock: concurrent ``CREATE TABLE IF NOT EXISTS`` of one table
    can otherwise fail on a catalogue unique index."""
    from .migrations import _LOCK_KEY

    with store.transaction() as conn:
        if _is_pg(store):
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
        for stmt in ddl(store.dialect):
            conn.execute(stmt)


# -- the dialects ----------------------------------------------------------------------------
#: Lock the lease row until the commit (SQLite's write transaction is exclusive already).
_SHARE = {"sqlite": "", "postgres": " FOR SHARE"}
#: Skip outbox rows another deliverer is claiming right now instead of waiting for them.
_SKIP_LOCKED = {"sqlite": "", "postgres": " FOR UPDATE SKIP LOCKED"}


class _PgSql:
    """A psycopg connection that runs this module's ``?`` SQL."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        return self._conn.execute(translate(sql), tuple(params))


def _is_pg(store: Any) -> bool:
    return getattr(store, "dialect", "sqlite") == "postgres"


@contextmanager
def _tx(store: Any) -> Iterator[Any]:
    """One write transaction on ``store``, yielding a connection that takes ``?`` SQL."""
    with store.transaction() as conn:
        yield _PgSql(conn) if _is_pg(store) else conn


def _reader(store: Any) -> Any:
    """The store's connection (autocommit) for one read, taking ``?`` SQL. Not a write
    transaction: on SQLite that would take the write lock for a read."""
    return _PgSql(store.conn) if _is_pg(store) else store.conn


def db_now(store: Any) -> float:
    """Now, in unix seconds, by the clock leases are judged by: the database server's on
    PostgreSQL (one clock for every host of a fleet), this host's on SQLite (one host)."""
    if _is_pg(store):
        row = store.conn.execute("SELECT extract(epoch FROM clock_timestamp())::float8"
                                 ).fetchone()
        return float(row[0])
    return time.time()


# -- rows ------------------------------------------------------------------------------------
class Figures(Protocol):
    """What :func:`save_evaluation` stores of an evaluation's estimate (a
    :class:`tracescore.stats.Estimate` is one; the store does not import the statistics)."""

    @property
    def value(self) -> float | None: ...
    @property
    def lo(self) -> float | None: ...
    @property
    def hi(self) -> float | None: ...
    @property
    def n(self) -> int: ...


@dataclass(frozen=True, slots=True)
class StateRow:
    """A monitor's stored state (``monitor_state``): the table's columns (the store stands
    below the statistics: no :class:`~tracescore.stats.Estimate` here; ``n`` is None in a row
    written before every evaluation stored one)."""

    monitor: str
    state: str
    since: float
    checked_at: float
    value: float | None
    lo: float | None
    hi: float | None
    n: int | None
    detail: dict[str, Any]
    #: the sequential test's state, as :func:`save_evaluation` got it (JSON round trip)
    test_state: Any
    streak: int
    pending: str | None
    notified_at: float | None


@dataclass(frozen=True, slots=True)
class HistoryRow:
    """One state change (``monitor_history``); ``previous`` is None for a monitor's first.
    The one row type of that table: :func:`history` returns it, and so does the read layer's
    :func:`tracescore.read.pipeline.monitor_history` for the trend page. ``detail`` is {}
    where the stored text is not a JSON object."""

    id: int
    monitor: str
    state: str
    previous: str | None
    at: float
    value: float | None
    lo: float | None
    hi: float | None
    n: int | None
    detail: dict[str, Any]

    @property
    def summary(self) -> str:
        """The evaluation's one-line summary (``detail["summary"]``), or ""."""
        return str(self.detail.get("summary", ""))


@dataclass(frozen=True, slots=True)
class OutboxItem:
    """A notification to queue with a state change: the channel's name (never its URL), its
    kind (``"webhook"``, ``"slack"``) and the JSON payload, already in that kind's format."""

    channel: str
    kind: str
    payload: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.channel, str) or not self.channel.strip():
            raise ValueError("an outbox item needs a channel name")
        if "://" in self.channel:  # the outbox must never hold a URL (it may hold a secret)
            raise ValueError("an outbox item names its channel, not its URL")
        if not isinstance(self.kind, str) or not self.kind:
            raise ValueError("an outbox item needs a kind")


@dataclass(frozen=True, slots=True)
class OutboxRow:
    """A stored notification (``monitor_outbox``). ``attempts`` counts the claims so far,
    this one included when the row came from :func:`due_outbox`."""

    id: int
    monitor: str
    channel: str
    kind: str
    url_ref: str
    payload: dict[str, Any]
    status: str
    attempts: int
    next_at: float
    created_at: float
    sent_at: float | None
    last_error: str | None


def _num(v: Any) -> float | None:
    """A float for a DOUBLE PRECISION column; NaN → NULL (SQLite would store NULL anyway,
    PostgreSQL would keep NaN: keep the backends alike)."""
    if v is None:
        return None
    f = float(v)
    return None if math.isnan(f) else f


def _json(value: Any) -> str:
    from ..store.rows import _json_safe, dumps

    return dumps(_json_safe(value))


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _clip_error(error: str) -> str:
    return scrub(str(error))[:MAX_ERROR_CHARS]


def _check_state(name: str, value: str | None, *, optional: bool = False) -> None:
    if value is None and optional:
        return
    if value not in STATES:
        raise ValueError(f"{name} must be one of {', '.join(STATES)}, got {value!r}")


# -- the lease -------------------------------------------------------------------------------
def acquire_lease(store: Any, name: str, owner: str, ttl_s: float, *,
                  now: float | None = None) -> bool:
    """Take or renew lease ``name`` for ``owner`` until ``now + ttl_s``; True when ``owner``
    holds it afterwards. One atomic upsert: it takes a free or expired lease, renews the
    owner's own, and leaves a live lease of another owner alone — also with many processes on
    one PostgreSQL database (the row lock serialises them). ``now``: default :func:`db_now`."""
    if not (ttl_s > 0 and math.isfinite(ttl_s)):
        raise ValueError(f"ttl_s must be a positive number of seconds, got {ttl_s!r}")
    t = db_now(store) if now is None else float(now)
    with _tx(store) as c:
        rows = c.execute(
            "INSERT INTO monitor_lease (name, owner, until) VALUES (?, ?, ?) "
            "ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, until = excluded.until "
            "WHERE monitor_lease.until < ? OR monitor_lease.owner = excluded.owner "
            "RETURNING owner", (name, owner, t + ttl_s, t)).fetchall()
    return bool(rows) and rows[0][0] == owner


def release_lease(store: Any, name: str, owner: str) -> bool:
    """Give lease ``name`` back if ``owner`` holds it (an evaluator stopping), so another
    can take it at once. True when it was released."""
    with _tx(store) as c:
        n = c.execute("DELETE FROM monitor_lease WHERE name = ? AND owner = ?",
                      (name, owner)).rowcount
    return bool(n)


def lease_holder(store: Any, name: str = DEFAULT_LEASE) -> tuple[str, float] | None:
    """(owner, until) of lease ``name``, expired or not; None when nobody took it."""
    row = _reader(store).execute("SELECT owner, until FROM monitor_lease WHERE name = ?",
                                 (name,)).fetchone()
    return None if row is None else (str(row[0]), float(row[1]))


# -- states and history ----------------------------------------------------------------------
_STATE_COLS = ("monitor, state, since, checked_at, value, lo, hi, n, detail, test_state, "
               "streak, pending, notified_at")
#: the columns :func:`history_row` reads, in its order
HISTORY_COLS = "id, monitor, state, previous, at, value, lo, hi, n, detail"


def _detail(text: str | None) -> dict[str, Any]:
    """A stored ``detail``: {} where it is NULL or not a JSON object (a reader never fails
    on one row's detail)."""
    try:
        d = _loads(text)
    except ValueError:
        return {}
    return d if isinstance(d, dict) else {}


def _state_row(r: Sequence[Any]) -> StateRow:
    return StateRow(
        monitor=r[0], state=r[1], since=float(r[2]), checked_at=float(r[3]), value=_num(r[4]),
        lo=_num(r[5]), hi=_num(r[6]), n=None if r[7] is None else int(r[7]),
        detail=_loads(r[8]) or {}, test_state=_loads(r[9]), streak=int(r[10] or 0),
        pending=r[11], notified_at=_num(r[12]))


def history_row(r: Sequence[Any]) -> HistoryRow:
    """A :class:`HistoryRow` from a row of ``SELECT`` :data:`HISTORY_COLS`."""
    return HistoryRow(
        id=int(r[0]), monitor=str(r[1]), state=str(r[2]), previous=r[3], at=float(r[4]),
        value=_num(r[5]), lo=_num(r[6]), hi=_num(r[7]), n=None if r[8] is None else int(r[8]),
        detail=_detail(r[9]))


def load_states(store: Any) -> dict[str, StateRow]:
    """Every monitor's stored state, by monitor name."""
    rows = _reader(store).execute(f"SELECT {_STATE_COLS} FROM monitor_state").fetchall()
    return {r[0]: _state_row(r) for r in rows}


def save_evaluation(
    store: Any, monitor: str, *, owner: str, state: str, estimate: Figures,
    detail: Mapping[str, Any] | None,
    test_state: Any, streak: int, pending: str | None,
    notify: Sequence[OutboxItem] | None, at: float, renotify: bool = False,
    lease: str = DEFAULT_LEASE, now: float | None = None,
) -> bool:
    """Store one evaluation of ``monitor``, in one transaction, if ``owner`` holds lease
    ``lease`` (at ``now``, default :func:`db_now`); returns False, having written nothing,
    when it does not (another evaluator took over: its notifications are its own).

    Always updates ``monitor_state`` (``since`` moves only when the state changes). When
    ``state`` differs from the stored one (or there was none), appends a ``monitor_history``
    row and queues ``notify`` (pending from ``at``); with ``renotify=True`` the items are
    queued although the state is unchanged (a renotify interval passed). ``notified_at``
    becomes ``at`` whenever items are queued. ``estimate``: its value, lo, hi and n go into
    the rows (the tables keep no method). ``test_state``: any JSON-serialisable value,
    returned as loaded JSON by :func:`load_states`. Blocking."""
    _check_state("state", state)
    _check_state("pending", pending, optional=True)
    items = list(notify or ())
    for item in items:
        if not isinstance(item, OutboxItem):
            raise TypeError(f"notify takes OutboxItem objects, got {type(item).__name__}")
    t = db_now(store) if now is None else float(now)
    dialect = "postgres" if _is_pg(store) else "sqlite"
    with _tx(store) as c:
        held = c.execute(
            "SELECT 1 FROM monitor_lease WHERE name = ? AND owner = ? AND until >= ?"
            + _SHARE[dialect], (lease, owner, t)).fetchall()
        if not held:
            return False
        prev = c.execute("SELECT state, since, notified_at FROM monitor_state "
                         "WHERE monitor = ?", (monitor,)).fetchall()
        previous = prev[0][0] if prev else None
        changed = previous != state
        since = at if changed else float(prev[0][1])
        queue = items if (changed or renotify) else []
        notified_at = at if queue else (_num(prev[0][2]) if prev else None)
        detail_text = _json(dict(detail or {}))
        figures = (_num(estimate.value), _num(estimate.lo), _num(estimate.hi), int(estimate.n))
        c.execute(
            f"INSERT INTO monitor_state ({_STATE_COLS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?) "
            "ON CONFLICT (monitor) DO UPDATE SET state = excluded.state, "
            "since = excluded.since, checked_at = excluded.checked_at, "
            "value = excluded.value, lo = excluded.lo, hi = excluded.hi, n = excluded.n, "
            "detail = excluded.detail, test_state = excluded.test_state, "
            "streak = excluded.streak, pending = excluded.pending, "
            "notified_at = excluded.notified_at",
            (monitor, state, since, at, *figures, detail_text,
             None if test_state is None else _json(test_state), int(streak), pending,
             notified_at))
        if changed:
            c.execute(
                "INSERT INTO monitor_history (monitor, state, previous, at, value, lo, hi, n, "
                "detail) VALUES (?,?,?,?,?,?,?,?,?)",
                (monitor, state, previous, at, *figures, detail_text))
        for item in queue:
            c.execute(
                "INSERT INTO monitor_outbox (monitor, channel, kind, url_ref, payload, status, "
                "attempts, next_at, created_at) VALUES (?,?,?,?,?,?,0,?,?)",
                (monitor, item.channel, item.kind, item.channel, _json(dict(item.payload)),
                 PENDING, at, at))
    return True


def mark_notified(store: Any, monitor: str, at: float) -> None:
    """Record that ``monitor`` notified at ``at`` (the renotify interval counts from it)."""
    with _tx(store) as c:
        c.execute("UPDATE monitor_state SET notified_at = ? WHERE monitor = ?", (at, monitor))


def history(store: Any, monitor: str | None = None, since: float | None = None,
            limit: int = 1000) -> list[HistoryRow]:
    """State changes, newest first: of ``monitor`` (default all), at or after ``since``, at
    most ``limit`` (reads the ``(monitor, at)`` index)."""
    where: list[str] = ["1 = 1"]
    args: list[Any] = []
    if monitor is not None:
        where.append("monitor = ?")
        args.append(monitor)
    if since is not None:
        where.append("at >= ?")
        args.append(float(since))
    rows = _reader(store).execute(
        f"SELECT {HISTORY_COLS} FROM monitor_history WHERE {' AND '.join(where)} "
        "ORDER BY at DESC, id DESC LIMIT ?", (*args, int(limit))).fetchall()
    return [history_row(r) for r in rows]


# -- the outbox ------------------------------------------------------------------------------
_OUTBOX_COLS = ("id, monitor, channel, kind, url_ref, payload, status, attempts, next_at, "
                "created_at, sent_at, last_error")


def _outbox_row(r: Sequence[Any]) -> OutboxRow:
    return OutboxRow(
        id=int(r[0]), monitor=r[1], channel=r[2], kind=r[3], url_ref=r[4],
        payload=json.loads(r[5]), status=r[6], attempts=int(r[7]), next_at=float(r[8]),
        created_at=float(r[9]), sent_at=_num(r[10]), last_error=r[11])


def _channel_filter(channels: Sequence[str] | None) -> tuple[str, list[str]]:
    if channels is None:
        return "", []
    return f" AND channel IN ({','.join('?' * len(channels))})", list(channels)


def due_outbox(store: Any, now: float, limit: int, *, channels: Sequence[str] | None = None,
               owner: str | None = None, claim_s: float = 120.0) -> list[OutboxRow]:
    """Claim up to ``limit`` pending rows due at ``now`` (``next_at <= now``, no live claim)
    for ``owner`` until ``now + claim_s``, and return them oldest first, ``attempts`` counting
    this one. Atomic: rows another deliverer is claiming are skipped (PostgreSQL), or wait for
    its write transaction (SQLite); a claim that runs out (a deliverer died) makes the row due
    again. ``channels``: only rows of these channel names (a process delivers the channels it
    knows; rows of others wait for a process that does). Finish each row with
    :func:`outbox_sent` / :func:`outbox_retry` / :func:`outbox_failed`, same ``owner``."""
    if channels is not None and not channels:
        return []
    owner = owner or uuid.uuid4().hex
    dialect = "postgres" if _is_pg(store) else "sqlite"
    only, names = _channel_filter(channels)
    with _tx(store) as c:
        rows = c.execute(
            "UPDATE monitor_outbox SET claim_owner = ?, claim_until = ?, "
            "attempts = attempts + 1 WHERE id IN (SELECT id FROM monitor_outbox "
            "WHERE status = 'pending' AND next_at <= ? "
            "AND (claim_until IS NULL OR claim_until < ?)" + only
            + " ORDER BY next_at, id LIMIT ?" + _SKIP_LOCKED[dialect] + ") "
            f"RETURNING {_OUTBOX_COLS}",
            (owner, now + claim_s, now, now, *names, int(limit))).fetchall()
    return sorted((_outbox_row(r) for r in rows), key=lambda r: (r.next_at, r.id))


def _finish(store: Any, sql: str, args: Sequence[Any], row_id: int,
            owner: str | None) -> bool:
    guard = " AND claim_owner = ?" if owner is not None else ""
    with _tx(store) as c:
        n = c.execute(sql + " WHERE id = ? AND status = 'pending'" + guard,
                      (*args, row_id, *((owner,) if owner is not None else ()))).rowcount
    return bool(n)


def outbox_sent(store: Any, id: int, *, owner: str | None = None,
                at: float | None = None) -> bool:
    """Row ``id`` was delivered. With ``owner``, only while its claim is still ``owner``'s;
    True when the row was marked (run it in the caller's transaction to count it with it)."""
    return _finish(store, "UPDATE monitor_outbox SET status = 'sent', sent_at = ?, "
                   "last_error = NULL, claim_owner = NULL, claim_until = NULL",
                   (time.time() if at is None else at,), id, owner)


def outbox_retry(store: Any, id: int, error: str, next_at: float, *,
                 owner: str | None = None) -> bool:
    """Row ``id`` failed for now: try again from ``next_at``. ``error`` names the channel,
    never the URL (it is stored, scrubbed and clipped)."""
    return _finish(store, "UPDATE monitor_outbox SET next_at = ?, last_error = ?, "
                   "claim_owner = NULL, claim_until = NULL",
                   (float(next_at), _clip_error(error)), id, owner)


def outbox_failed(store: Any, id: int, error: str, *,
                  owner: str | None = None) -> bool:
    """Row ``id`` will not be delivered (a permanent error, or out of attempts)."""
    return _finish(store, "UPDATE monitor_outbox SET status = 'failed', last_error = ?, "
                   "claim_owner = NULL, claim_until = NULL", (_clip_error(error),), id, owner)


def release_claims(store: Any, ids: Sequence[int], owner: str) -> int:
    """Give back ``owner``'s claims on rows ``ids`` it will not get to (a deliverer
    stopping mid-pass): due again at once, the claim's attempt not counted. Returns how many."""
    if not ids:
        return 0
    marks = ",".join("?" * len(ids))
    with _tx(store) as c:
        n = c.execute(
            "UPDATE monitor_outbox SET claim_owner = NULL, claim_until = NULL, "
            f"attempts = attempts - 1 WHERE id IN ({marks}) AND claim_owner = ? "
            "AND status = 'pending'", (*[int(i) for i in ids], owner)).rowcount
    return int(n)


def outbox_rows(store: Any, *, status: str | None = None,
                monitor: str | None = None, limit: int = 1000) -> list[OutboxRow]:
    """Stored notifications, newest first (for ``tracescore check``/reports and tests)."""
    where: list[str] = ["1 = 1"]
    args: list[Any] = []
    if status is not None:
        where.append("status = ?")
        args.append(status)
    if monitor is not None:
        where.append("monitor = ?")
        args.append(monitor)
    rows = _reader(store).execute(
        f"SELECT {_OUTBOX_COLS} FROM monitor_outbox WHERE {' AND '.join(where)} "
        "ORDER BY id DESC LIMIT ?", (*args, int(limit))).fetchall()
    return [_outbox_row(r) for r in rows]


def next_due(store: Any, channels: Sequence[str] | None = None) -> float | None:
    """When the next pending row (of ``channels``) becomes due — its ``next_at``, or its
    claim's end if later; None when nothing is pending. A notifier sleeps until then."""
    if channels is not None and not channels:
        return None
    only, names = _channel_filter(channels)
    row = _reader(store).execute(
        "SELECT min(CASE WHEN claim_until IS NOT NULL AND claim_until > next_at "
        "THEN claim_until ELSE next_at END) FROM monitor_outbox WHERE status = 'pending'"
        + only, names).fetchone()
    return None if row is None or row[0] is None else float(row[0])


def outbox_counts(store: Any) -> dict[str, int]:
    """Rows per status: ``{"pending": …, "sent": …, "failed": …}`` (every key present)."""
    counts = dict.fromkeys(OUTBOX_STATUSES, 0)
    for status, n in _reader(store).execute(
            "SELECT status, count(*) FROM monitor_outbox GROUP BY status").fetchall():
        counts[str(status)] = int(n)
    return counts
