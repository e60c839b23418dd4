"""Writing an oracle database through the store's real write path, and reading its raw rows.

A :class:`Spec` (drawn by :mod:`.strategies`, or written out by a test) lists the records to
write: when, in which segment, and what each score job returns. :func:`build` writes them as
the pipeline does — ``write_batch`` with the record's segment, ``lease_jobs`` and
``complete_jobs`` (with the judge model) — on a real SQLite file, under a controlled store
clock, so the hourly rollups are maintained exactly as production maintains them; then it
re-scores (a metric version bump: the new row replaces the old one and takes its
contribution out of the rollups), replays a batch, and prunes (retention folds the oldest
hours into the rollups only). :func:`raw` reads the ``records`` and ``scores`` rows back
*before* the prune: the oracle's ground truth.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

HOUR = 3600.0
#: An hour boundary (2026-05-28 11:00 UTC): the databases live in the hours after it.
BASE = 494_444 * HOUR
#: Score names and what their metric declares.
QUALITY, GROUNDED, TONE = "quality", "grounded", "tone"
METRICS = (QUALITY, GROUNDED, TONE)
#: "error" / "skip": the job fails / is skipped instead of giving a value.
Outcome = float | str


@dataclass(frozen=True)
class Rec:
    """One record and its scores."""

    t: float  # seconds after BASE: the record's time and its scores' time
    release: str = "v1"
    environment: str = "prod"
    route: str = "a"  # the declared metadata key "route"
    model: str = "m1"
    judge_model: str = "judge-a"  # judges "grounded"
    forced: str | None = None  # forced into scoring (e.g. "feedback")
    u: float = 0.5  # the sampling hash
    scores: tuple[tuple[str, Outcome], ...] = ()
    error: bool = False  # the app's run failed


@dataclass(frozen=True)
class Spec:
    recs: tuple[Rec, ...]
    #: (index into recs, seconds after BASE, new value): re-scored under metric version 2
    rescore: tuple[tuple[int, float, float], ...] = ()
    #: prune records older than BASE + this (None: no prune)
    prune_before: float | None = None
    #: write the first k records' batch again (a replay: nothing may count twice)
    replay: int = 0

    @property
    def end(self) -> float:
        ts = [r.t for r in self.recs] + [t for _, t, _ in self.rescore]
        return max(ts, default=0.0)


class Clock:
    """Stands in for the ``time`` module inside the store modules."""

    def __init__(self, t: float) -> None:
        self.t = t

    def time(self) -> float:
        return self.t

    def __getattr__(self, name: str) -> Any:
        import time

        return getattr(time, name)


@contextlib.contextmanager
def store_clock(t: float) -> Iterator[Clock]:
    """The stores' (and the retention's) clock set to ``t`` (move it with ``.t``); put back
    after. (Not pytest's monkeypatch: Hypothesis runs many examples in one test.)"""
    import tracescore.store.postgres as pg_mod
    import tracescore.store.postgres_jobs as pg_jobs_mod
    import tracescore.store.retention as ret_mod
    import tracescore.store.sqlite as sqlite_mod
    import tracescore.store.sqlite_jobs as sqlite_jobs_mod

    c = Clock(t)
    # (each backend's jobs role is a module of its own: its clock too)
    mods = (sqlite_mod, sqlite_jobs_mod, pg_mod, pg_jobs_mod, ret_mod)
    old = [m.time for m in mods]
    for m in mods:
        m.time = c  # type: ignore[attr-defined]
    try:
        yield c
    finally:
        for m, o in zip(mods, old):
            m.time = o  # type: ignore[attr-defined]


def _register(store: Any) -> None:
    from tracescore.metrics.base import Metric
    from tracescore.record import RagRecord

    class _M(Metric):  # a declaration only: direction, threshold, yes/no
        version = "1"
        requires = frozenset()

        def __init__(self, name: str, binary: bool, kind: str, threshold: float | None,
                     higher: bool) -> None:
            self.name = name
            self.binary = binary
            self.kind = kind
            self.higher_is_better = higher
            self.threshold = threshold
            self.description = name

        def score(self, record: RagRecord) -> Any:  # pragma: no cover - never scored
            raise NotImplementedError

    store.register_metrics([_M(QUALITY, False, "local", 0.5, True),
                            _M(GROUNDED, True, "judge", None, True),
                            _M(TONE, False, "local", None, False)])


def _score(name: str, outcome: Outcome, version: str = "1") -> Any:
    from tracescore.score import Score

    if outcome == "error":
        return Score.failed(name, "boom", metric=name, metric_version=version)
    v = float(outcome)
    label = None
    if name == QUALITY:
        label = "pass" if v >= 0.5 else "fail"
    return Score(name, v, label=label, metric=name, metric_version=version)


def _write(store: Any, clock: Clock, recs: Sequence[tuple[int, Rec]], offset: int = 0) -> None:
    from tracescore.record import RagRecord
    from tracescore.sampling import Decision
    from tracescore.store import SKIPPED, NewJob
    from tracescore.store.segments import SegmentSpec

    for i, r in recs:
        i += offset
        t = BASE + r.t
        clock.t = t
        rec = RagRecord(trace_id=f"{i:032x}", span_id=f"{i:016x}", query=f"q{i}", answer="a",
                        end_time_ns=int(round(t * 1e9)),
                        start_time_ns=int(round((t - 0.5) * 1e9)),
                        metadata={"route": r.route}, model=r.model,
                        error="Timeout" if r.error else None)
        spec = SegmentSpec(release=r.release, environment=r.environment, keys=("route",))
        names = tuple(n for n, _ in r.scores)
        jobs = [NewJob(rec.record_id, n, "1", SKIPPED, "record has no contexts")
                if o == "skip" else NewJob(rec.record_id, n, "1") for n, o in r.scores]
        store.write_batch([(rec, Decision(r.u, names, r.forced))], jobs, None,
                          segments=spec)
        todo = [n for n, o in r.scores if o != "skip"]
        if not todo:
            continue
        leased = store.lease_jobs("oracle", 10, 60.0, todo)
        outcome = dict(r.scores)
        done = [(j, [_score(j.metric, outcome[j.metric])]) for j in leased]
        store.complete_jobs("oracle", done, "none",
                            judge_models={j.job_id: r.judge_model for j in leased
                                          if j.metric == GROUNDED})


def record_id(spec: Spec, i: int) -> str:
    return f"{i:032x}-{i:016x}"


def build(path: str, spec: Spec, offset: int = 0) -> dict[str, list[dict[str, Any]]]:
    """Write ``spec`` to the SQLite file at ``path`` (new, or one built before: ``offset``
    then keeps the new records' ids apart); return its raw rows as they were before the
    prune (``{"records": [...], "scores": [...], ...}``)."""
    from tracescore.store import NewJob, open_store

    with store_clock(BASE) as clock:
        store = open_store(path)
        try:
            _register(store)
            order = sorted(enumerate(spec.recs), key=lambda ir: (ir[1].t, ir[0]))
            _write(store, clock, order, offset)
            if spec.replay:
                _write(store, clock, order[:spec.replay], offset)
            for i, t, value in sorted(spec.rescore, key=lambda x: x[1]):
                clock.t = BASE + t
                rid = _record_id_of(store, i + offset)
                if rid is None:
                    continue
                store.upsert_jobs([NewJob(rid, QUALITY, "2")])
                leased = [j for j in store.lease_jobs("oracle", 10, 60.0, [QUALITY])
                          if j.record_id == rid]
                store.complete_jobs("oracle", [(j, [_score(QUALITY, value, "2")])
                                               for j in leased], "none")
        finally:
            store.close()
        rows = raw(path)
        if spec.prune_before is not None:
            from tracescore.store.retention import Retention, prune

            day = 86400.0  # the shortest retention: prune as if a day after the cut-off
            now = clock.t = BASE + spec.prune_before + day
            store = open_store(path)
            try:
                prune(store, Retention(max_age_s=day, pause_s=0.0), now=now, vacuum=False)
            finally:
                store.close()
            left = {r["record_id"] for r in raw(path)["records"]}
            rows["pruned"] = [{"record_id": r["record_id"]} for r in rows["records"]
                              if r["record_id"] not in left]
    return rows


def _record_id_of(store: Any, i: int) -> str | None:
    row = store.conn.execute("SELECT record_id FROM records WHERE trace_id = ?",
                             (f"{i:032x}",)).fetchone()
    return None if row is None else str(row[0])


def raw(path: str) -> dict[str, list[dict[str, Any]]]:
    """The raw ``records`` and ``scores`` rows, each joined with its record's segment."""
    conn = sqlite3.connect(path)
    conn.row_factory = sqlite3.Row
    try:
        recs = [dict(r) for r in conn.execute(
            "SELECT r.record_id, r.created_at, r.release, r.environment, r.model, r.error,"
            " r.sampled, r.forced, json_extract(r.metadata, '$.route') AS route"
            " FROM records r")]
        scores = [dict(r) for r in conn.execute(
            "SELECT s.score_id, s.record_id, s.name, s.metric, s.metric_version, s.value,"
            " s.label, s.status, s.created_at, s.judge_model, r.release, r.environment,"
            " r.model, json_extract(r.metadata, '$.route') AS route"
            " FROM scores s JOIN records r USING (record_id)")]
        skips = [dict(r) for r in conn.execute(
            "SELECT j.record_id, j.metric, j.reason, r.created_at, r.release, r.environment,"
            " r.model, json_extract(r.metadata, '$.route') AS route"
            " FROM jobs j JOIN records r USING (record_id) WHERE j.status = 'skipped'")]
        return {"records": recs, "scores": scores, "skips": skips, "pruned": []}
    finally:
        conn.close()


@dataclass
class Db:
    """A built database: its path, its spec and its raw rows (before any prune)."""

    path: str
    spec: Spec
    rows: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
