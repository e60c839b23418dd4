"""Closing sessions: after ``session_idle`` without a turn, a session is scored as a unit.

:func:`close_due` claims the sessions due (:func:`tracescore.store.sessions.claim`), computes
their scores from the stored turns and turn scores (:mod:`.metrics`), and stores them with
the session's own record in the transaction that marks it closed
(:func:`tracescore.store.sessions.finish`). A session whose turns still have jobs open waits
(``defer``) so its turn-level aggregates see every turn's scores. :class:`SessionCloser` runs
it on a daemon thread with its own store — where scoring runs (an app with ``score=True``, or
``tracescore worker``); on PostgreSQL any number of them share the sessions (claims skip
locked rows). Blocking I/O, never on the request path.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from .._internal.errors import record_internal_error
from .._internal.service import Service
from ..record import RagRecord
from ..score import Score
from ..store import sessions as S
from ..store.rows import NewJob
from .metrics import CHEAP, PREFIX, VERSION, Declared, session_scores

__all__ = ["CloseResult", "SessionCloser", "close_due", "parse_idle"]

log = logging.getLogger("tracescore.sessions")

#: the closer's lease on a claimed session (a closer that dies releases it after this)
LEASE_S = 60.0
#: how long after its last turn a session waits for its turns' open scoring jobs at most
#: (as long as a judge job waits for a judge that is down, ``judge_max_wait_s``)
MAX_WAIT_S = 6 * 3600.0
#: shortest ``session_idle``: sessions are a human's pauses, not milliseconds
MIN_IDLE_S = 0.05


def parse_idle(value: Any) -> float | None:
    """``session_idle`` as seconds: None (sessions are not closed here), a number of seconds
    (or its text), or a duration such as ``"5m"``, ``"30m"``, ``"90s"``."""
    if value is None:
        return None
    if isinstance(value, str):
        from ..store.retention import parse_duration

        try:
            seconds = float(value)  # plain seconds ("90", "0.5": the command line)
        except ValueError:
            seconds = parse_duration(value)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    else:
        raise TypeError(f"session_idle must be a duration such as '5m' or seconds, got "
                        f"{value!r}")
    if not (seconds >= MIN_IDLE_S) or seconds == float("inf"):
        raise ValueError(f"session_idle must be at least {MIN_IDLE_S} s, got {value!r}")
    return seconds


@dataclass
class CloseResult:
    """What one :func:`close_due` pass did, by session key."""

    closed: list[str] = field(default_factory=list)
    deferred: list[str] = field(default_factory=list)
    #: sessions a turn re-opened (or another closer took) while they were being scored
    lost: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _Declaration:
    """A session score's row in the ``metrics`` table (direction, description)."""

    name: str
    higher_is_better: bool | None
    description: str
    threshold: float | None = None
    version: str = VERSION
    kind: str = "session"
    binary: bool = False

    def names(self) -> tuple[str, ...]:
        return (self.name,)


def declared_rules(store: Any) -> Declared:
    """Score name → (higher_is_better, threshold) from the ``metrics`` table."""
    import json

    out: dict[str, tuple[bool | None, float | None]] = {}
    for names, hib, threshold in S.metric_rules(store):
        try:
            listed = json.loads(names) if names else []
        except ValueError:
            continue
        for n in listed:
            out[str(n)] = (None if hib is None else bool(hib),
                           None if threshold is None else float(threshold))
    return out


def _declarations(scores: Sequence[Any], rules: Declared) -> list[_Declaration]:
    out = []
    for s in scores:
        if s.name in CHEAP:
            hib, desc = CHEAP[s.name]
        elif s.name.endswith(".passing"):
            hib, desc = True, f"share of a session's turns passing {s.name[len(PREFIX):-8]}"
        else:
            base = s.name[len(PREFIX):-len(".worst")]
            hib = rules.get(base, (True, None))[0]
            desc = f"a session's worst turn's {base}"
        out.append(_Declaration(s.name, hib, desc))
    return out


def session_record(key: str, turns: Sequence[RagRecord],
                   span: tuple[float, float] | None = None) -> RagRecord:
    """The session's own record: the first turn's question, the last turn's answer; dated
    from its first turn to its last (``span``: their stored times, seconds), so retention
    takes it with its turns."""
    trace_id, span_id = S.session_record_id(key)
    first, last = turns[0], turns[-1]
    start_ns = first.start_time_ns or first.end_time_ns
    end_ns = last.end_time_ns or last.start_time_ns
    if span is not None:
        start_ns, end_ns = int(span[0] * 1e9), int(span[1] * 1e9)
    return RagRecord(
        trace_id=trace_id, span_id=span_id, query=first.query, answer=last.answer,
        metadata={"turns": len(turns), "first_trace_id": first.trace_id,
                  "last_trace_id": last.trace_id},
        session_id=key, user_id=last.user_id, model=last.model, source=S.SESSION_SOURCE,
        start_time_ns=start_ns, end_time_ns=end_ns,
    )


def close_due(store: Any, idle_s: float, *, owner: str | None = None, now: float | None = None,
              limit: int = 20, embed: Callable[[list[str]], Sequence[Sequence[float]]] | None
              = None, defer_s: float | None = None, registered: set[str] | None = None,
              judge_metrics: Sequence[tuple[str, str]] = (),
              max_wait_s: float = MAX_WAIT_S) -> CloseResult:
    """Close the sessions untouched for ``idle_s`` as of ``now`` (default: the clock) —
    one pass, at most ``limit`` sessions. ``judge_metrics``: (name, version) of the session
    judge metrics whose jobs each close creates (or re-opens) on the session's record, in
    the closing transaction. A session whose turns still have jobs open waits for them, up to
    ``max_wait_s`` after its last turn; then it closes with the scores there are (its
    ``session.turns`` details count the jobs still open). Blocking."""
    now = time.time() if now is None else now
    owner = owner or f"sessions-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    registered = set() if registered is None else registered
    result = CloseResult()
    rules: Declared | None = None
    for c in S.claim(store, owner, now, idle_s, LEASE_S, limit):
        pairs = S.session_turns(store, c.session_id)
        if not pairs:  # every turn pruned: nothing to score
            S.finish(store, owner, c, None, None, [], now)
            continue
        turns = [r for r, _ in pairs]
        rids = [r.record_id for r in turns]
        own = "-".join(S.session_record_id(c.session_id))
        # (its own judge jobs of an earlier close too: re-opened only once they are done)
        still_open = S.open_turn_jobs(store, [*rids, own])
        if still_open and now - c.touched_at < max_wait_s:
            S.defer(store, owner, c, now + (defer_s if defer_s is not None
                                            else max(1.0, min(idle_s, 30.0))))
            result.deferred.append(c.session_id)
            continue
        if rules is None:
            rules = declared_rules(store)
        turn_scores = S.turn_scores(store, rids)
        try:
            scores = session_scores(turns, turn_scores, rules, embed)
        except Exception as exc:  # a bug or a bad row: an error score, not a stuck session
            record_internal_error("sessions.metrics", exc)
            scores = [Score.failed("session.turns", f"session metrics failed: "
                                   f"{type(exc).__name__}: {exc}"[:500],
                                   metric="session.turns", metric_version=VERSION)]
        if still_open:  # waited long enough (a metric nobody runs, a judge down for hours)
            log.warning("tracescore: session %r closed with %d scoring jobs of its turns still "
                        "open after %.0f s", c.session_id, still_open, now - c.touched_at)
            scores[0] = replace(scores[0], details={**scores[0].details,
                                                    "turn_jobs_open": still_open})
        new = [d for d in _declarations(scores, rules) if d.name not in registered]
        if new:
            store.register_metrics(new)
            registered.update(d.name for d in new)
        jobs = [NewJob(own, name, version) for name, version in judge_metrics]
        span = (float(pairs[0][1]["created_at"] or now), float(pairs[-1][1]["created_at"] or now))
        if S.finish(store, owner, c, session_record(c.session_id, turns, span), pairs[-1][1],
                    scores, time.time(), jobs):
            result.closed.append(c.session_id)
        else:
            result.lost.append(c.session_id)
    return result


def embed_with(embedder: Any) -> Callable[[list[str]], Sequence[Sequence[float]]] | None:
    """A blocking ``texts → vectors`` from an async :class:`~tracescore.embeddings.Embedder`."""
    if embedder is None:
        return None

    def embed(texts: list[str]) -> Sequence[Sequence[float]]:
        return asyncio.run(embedder.embed(texts))
    return embed


class SessionCloser:
    """Runs :func:`close_due` every ``poll_s`` on a daemon thread with its own store.

    ``clock``: the time sessions are judged idle at (tests move it instead of sleeping).
    :meth:`start`, :meth:`stop` and :meth:`run_now` may be called from any thread. A failing
    pass is logged (re-raised under pytest through the internal-error funnel) and retried at
    the next one; a passing database fault (locked, disk full) waits for the next pass.
    """

    def __init__(self, db_path: str, idle_s: float, *, poll_s: float | None = None,
                 clock: Callable[[], float] = time.time, embedder: Any = None,
                 judge_metrics: Sequence[tuple[str, str]] = (),
                 on_closed: Callable[[], Any] | None = None) -> None:
        self.db_path = db_path
        self.idle_s = idle_s
        self.poll_s = poll_s if poll_s is not None else min(max(idle_s / 4, 0.05), 5.0)
        self.clock = clock
        self.embed = embed_with(embedder)
        self.judge_metrics = tuple(judge_metrics)
        #: called after a pass that closed sessions (the worker's wake: their judge jobs)
        self.on_closed = on_closed
        self.owner = f"sessions-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.closed = 0
        self.passes = 0
        self._registered: set[str] = set()
        self._store: Any = None  # the thread's store, opened at its first pass
        self._service = Service("tracescore-sessions", self._pass, interval_s=self.poll_s,
                                first_wait_s=self.poll_s, on_error=self._failed,
                                on_exit=self._close_store)

    def start(self) -> None:
        self._service.start()

    def run_now(self) -> None:
        self._service.run_now()

    def stop(self, timeout: float | None = 10.0) -> None:
        self._service.stop(timeout)

    def close_now(self, store: Any, now: float | None = None) -> CloseResult:
        """One pass on ``store`` (the caller's thread), as of ``now`` (default: the clock)."""
        res = close_due(store, self.idle_s, owner=self.owner,
                        now=self.clock() if now is None else now, embed=self.embed,
                        registered=self._registered, judge_metrics=self.judge_metrics)
        self.closed += len(res.closed)
        self.passes += 1
        if res.closed and self.judge_metrics and self.on_closed is not None:
            self.on_closed()
        return res

    def _pass(self) -> None:
        from ..store.base import open_store

        if self._store is None:
            self._store = open_store(self.db_path)
        stopping = self._service.stopping
        while len(self.close_now(self._store).closed) >= 20 and not stopping.is_set():
            pass  # (a backlog: the next batch at once)

    def _failed(self, exc: Exception) -> None:
        from .._internal.db_faults import storage_fault

        if storage_fault(exc) is not None:
            log.debug("tracescore session closing deferred: %s", exc)
        else:
            record_internal_error("sessions.close", exc)
        try:
            self._close_store()
        except Exception:
            self._store = None

    def _close_store(self) -> None:
        store, self._store = self._store, None
        if store is not None:
            store.close()
