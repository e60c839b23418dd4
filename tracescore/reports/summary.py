"""Reports over a tracescore database: the queries and their text/JSON formatting.

Used by the ``tracescore report`` and ``tracescore show`` commands; no click in here, so other
front ends (a notebook, a web page) can reuse it. Everything opens the database read-only and
may run while an app is writing to it (WAL mode). All functions block on SQLite I/O.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import re
import sqlite3
import textwrap
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..store import SCHEMA_VERSION
from . import rollups as _rollups

__all__ = [
    "DatabaseError",
    "Histogram",
    "JudgeUsage",
    "MetricSummary",
    "Report",
    "TimeBucket",
    "Usage",
    "WorstRecord",
    "DEFAULT_WORST",
    "build_report",
    "find_records",
    "format_records",
    "format_report",
    "has_table",
    "histogram",
    "open_db",
    "parse_since",
    "percentile",
    "pick_bucket",
    "record_details",
    "score_time_span",
    "skip_reasons",
    "timeline",
    "usage_summary",
]

WIDTH = 80
#: Worst records listed per score, by ``report`` and by the report ``demo`` prints.
DEFAULT_WORST = 3


class DatabaseError(Exception):
    """The database is missing, unreadable or not a tracescore database."""


# -- opening ---------------------------------------------------------------------------------
def open_db(path: str | Path) -> sqlite3.Connection:
    """Open a tracescore database read-only; :class:`DatabaseError` with a clear reason if not.

    ``path`` may be a ``postgresql://`` URL: the connection is then a
    :class:`~tracescore.store.compat.PgConnection`, which runs the same SQL (typed as
    ``sqlite3.Connection`` for the readers: it has the methods they use).
    """
    if isinstance(path, str) and path.startswith(("postgresql://", "postgres://")):
        return _open_pg(path)
    p = Path(path)
    if not p.exists():
        raise DatabaseError(f"database not found: {p}")
    if p.is_dir():
        raise DatabaseError(f"{p} is a folder, not a tracescore database")
    # mode=ro: a report never writes, and works on a file the user may only read.
    uri = p.resolve().as_uri() + "?mode=ro"
    try:
        conn = sqlite3.connect(uri, uri=True, timeout=30.0)
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA busy_timeout=30000")
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    except sqlite3.Error as exc:
        raise DatabaseError(f"cannot read {p} as a SQLite database: not a tracescore "
                            f"database or it is corrupt ({exc})") from exc
    missing = {"records", "jobs", "scores", "counters", "meta"} - tables
    if missing:
        conn.close()
        raise DatabaseError(
            f"{p} is not a tracescore database (no {', '.join(sorted(missing))} table)"
        )
    row = conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
    if row is not None and int(row[0]) > SCHEMA_VERSION:
        conn.close()
        raise DatabaseError(
            f"{p} has schema version {row[0]}, newer than this tracescore understands "
            f"({SCHEMA_VERSION}); upgrade tracescore"
        )
    return conn


def _open_pg(url: str) -> sqlite3.Connection:
    from ..store import redact_url
    from ..store.compat import PgConnection
    from ..store.migrations import POSTGRES_MIGRATIONS

    try:
        conn = PgConnection(url, read_only=True)  # a report never writes, as on SQLite
        tables = conn.table_names()
    except ImportError as exc:
        raise DatabaseError(str(exc)) from None
    except Exception as exc:  # psycopg.Error: server down, no such database, auth
        raise DatabaseError(f"cannot read {redact_url(url)}: {exc}".strip()) from None
    missing = {"records", "jobs", "scores", "counters", "meta"} - tables
    if missing:
        conn.close()
        raise DatabaseError(f"{redact_url(url)} is not a tracescore database "
                            f"(no {', '.join(sorted(missing))} table)")
    row = conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
    latest = POSTGRES_MIGRATIONS[-1].version
    if row is not None and int(row[0]) > latest:
        conn.close()
        raise DatabaseError(f"{redact_url(url)} has schema version {row[0]}, newer than this "
                            f"tracescore understands ({latest}); upgrade tracescore")
    return conn  # type: ignore[return-value]


def has_table(conn: sqlite3.Connection, name: str) -> bool:
    """Whether the database has table ``name`` (older databases lack newer tables)."""
    from ..store.compat import has_table as has

    return has(conn, name)


# -- --since ---------------------------------------------------------------------------------
_SINCE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_since(text: str | None, now: float | None = None) -> float | None:
    """``"30m"``, ``"1h"``, ``"2d"``, ``"1w"`` → a unix-seconds cutoff; ``"all"``/None → None."""
    if text is None or text.strip().lower() == "all":
        return None
    m = _SINCE_RE.match(text.lower())
    if not m:
        raise ValueError(
            f"{text!r} is not a duration; use a number and a unit (s, m, h, d, w), e.g. 30m, "
            "1h, 2d, or 'all'"
        )
    now = time.time() if now is None else now
    return now - float(m.group(1)) * _UNIT_S[m.group(2)]


# -- the report ------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class MetricSummary:
    """One score name (``scores.name``); a metric such as rouge emits several."""

    name: str
    metric: str
    higher_is_better: bool | None  # None: the metric declares no direction (no "worst")
    count: int  # ok scores
    mean: float | None
    p10: float | None
    p50: float | None
    p90: float | None
    fail_rate: float | None  # share of ok scores labelled "fail"; None when none has a label
    labelled: int  # ok scores with a pass/fail label
    errors: int  # scores with status "error"
    skipped: int  # records the metric skipped (missing inputs, content capture off)
    threshold: float | None = None  # the pass/fail threshold the metric declares, if any
    #: a yes/no metric (values 0/1): shown as a rate, not percentiles (p10/p50/p90 are None)
    binary: bool = False
    yes: int | None = None  # binary only: ok scores with value 1
    rate: float | None = None  # binary only: yes / count
    #: why records were skipped, most frequent first: (reason, records)
    skip_reasons: tuple[tuple[str, int], ...] = ()

    @property
    def mostly_skipped(self) -> bool:
        """More than half of the metric's jobs in the window were skipped."""
        return self.skipped * 2 > self.skipped + self.count + self.errors

    def to_json(self) -> dict[str, Any]:
        out = {k: v for k, v in asdict(self).items() if k not in ("name", "skip_reasons")}
        out["skip_reasons"] = [{"reason": r, "records": n} for r, n in self.skip_reasons]
        out["mostly_skipped"] = self.mostly_skipped
        return out


@dataclass(frozen=True, slots=True)
class WorstRecord:
    name: str
    value: float
    label: str | None
    trace_id: str
    record_id: str
    query: str | None


@dataclass(frozen=True, slots=True)
class Report:
    db: str
    since: float | None
    generated_at: float
    records: int
    sampled: int
    dropped: int
    pending_jobs: int
    scores: int
    #: scores not (yet) confirmed as exported: held, in flight, or their export failed
    undelivered: int = 0
    metrics: list[MetricSummary] = field(default_factory=list)
    worst: dict[str, list[WorstRecord]] = field(default_factory=dict)
    judges: list[dict[str, Any]] = field(default_factory=list)
    #: accepted and then lost, by reason (the ``lost.<reason>`` counters; all time)
    lost: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "db": self.db,
            "since": self.since,
            "generated_at": self.generated_at,
            "records": self.records,
            "sampled": self.sampled,
            "dropped": self.dropped,
            "pending_jobs": self.pending_jobs,
            "scores": self.scores,
            "undelivered_scores": self.undelivered,
            "lost": dict(self.lost),
            "metrics": {m.name: m.to_json() for m in self.metrics},
            "worst": {
                name: [{k: v for k, v in asdict(w).items() if k != "name"} for w in rows]
                for name, rows in self.worst.items()
            },
            "judges": self.judges,
        }


def percentile(sorted_values: Sequence[float], q: float) -> float | None:
    """Linear-interpolated percentile (numpy's default) of already sorted values."""
    if not sorted_values:
        return None
    pos = (len(sorted_values) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


class _MetricInfo:
    """Direction and score names of metrics, from the registry when it knows them."""

    def __init__(self, conn: sqlite3.Connection | None = None) -> None:
        self._cache: dict[str, Any] = {}
        # What the writing process declared beats what this process's registry knows.
        self._declared: dict[str, tuple[bool | None, tuple[str, ...]]] = {}
        self._thresholds: dict[str, float | None] = {}
        self._binary: dict[str, bool] = {}
        if conn is not None:
            try:
                for metric, hib, names, threshold in conn.execute(
                    "SELECT metric, higher_is_better, score_names, threshold FROM metrics"
                ):
                    self._declared[metric] = (
                        None if hib is None else bool(hib), tuple(json.loads(names or "[]"))
                    )
                    self._thresholds[metric] = threshold
            except sqlite3.Error:  # a database written before the metrics table existed
                pass
            try:
                for metric, binary in conn.execute(
                    "SELECT metric, is_binary FROM metrics WHERE is_binary IS NOT NULL"
                ):
                    self._binary[metric] = bool(binary)
            except sqlite3.Error:  # written before metrics declared binarity
                pass

    def _get(self, metric: str) -> Any:
        if metric not in self._cache:
            try:
                from ..metrics import registry

                self._cache[metric] = registry.get(metric)
            except Exception:  # unknown here (a custom metric of another process), or broken
                self._cache[metric] = None
        return self._cache[metric]

    def higher_is_better(self, metric: str) -> bool | None:
        if metric in self._declared:
            return self._declared[metric][0]
        m = self._get(metric)
        if m is None:
            return True
        value = getattr(m, "higher_is_better", True)
        return None if value is None else bool(value)

    def threshold(self, metric: str) -> float | None:
        if metric in self._thresholds:
            return self._thresholds[metric]
        m = self._get(metric)
        value = getattr(m, "threshold", None) if m is not None else None
        return float(value) if isinstance(value, (int, float)) else None

    def binary(self, metric: str, values: Sequence[float]) -> bool:
        """Yes/no metric: as declared by the writer, else by this registry, else when every
        value is 0 or 1 (and there are a few values, so one 0 is not taken for a check)."""
        if metric in self._binary:
            return self._binary[metric]
        m = self._get(metric)
        if m is not None:
            return bool(getattr(m, "binary", False))
        return len(values) >= 5 and all(v in (0.0, 1.0) for v in values)

    def names(self, metric: str) -> tuple[str, ...]:
        if self._declared.get(metric, (None, ()))[1]:
            return self._declared[metric][1]
        m = self._get(metric)
        try:
            return tuple(m.names()) if m is not None else (metric,)
        except Exception:
            return (metric,)


def build_report(conn: sqlite3.Connection, *, since: float | None = None,
                 worst: int = DEFAULT_WORST,
                 db: str = "") -> Report:
    """Summarise the database: per score name, and totals; ``since`` is a unix-seconds cutoff.

    Records (and the skipped jobs of records) are filtered on ``records.created_at``, scores on
    ``scores.created_at``. ``dropped`` and ``pending_jobs`` are the database's current totals.
    Rows the retention pruner removed count through their hourly rollups (:mod:`.rollups`):
    totals, counts and means stay exact; percentiles over pruned hours come from 0.01-wide
    bins; the worst records are chosen among the rows still stored.
    """
    cutoff = since if since is not None else -math.inf
    one = conn.execute
    records, sampled = one(
        "SELECT count(*), coalesce(sum(sampled), 0) FROM records WHERE created_at >= ?",
        (cutoff,),
    ).fetchone()
    dropped_row = one("SELECT value FROM counters WHERE name='records_dropped'").fetchone()
    lost = {str(k)[5:]: int(v) for k, v in one(
        "SELECT name, value FROM counters WHERE name LIKE 'lost.%' AND value > 0 "
        "ORDER BY name").fetchall()}
    pending = one("SELECT count(*) FROM jobs WHERE status IN ('pending', 'leased')").fetchone()[0]
    n_scores = one("SELECT count(*) FROM scores WHERE created_at >= ?", (cutoff,)).fetchone()[0]
    # pruned rows, from the hourly rollups
    rolled_records, rolled_sampled = _rollups.record_totals(conn, since)
    records, sampled = records + rolled_records, (sampled or 0) + rolled_sampled
    rolled = _rollups.score_rollups(conn, since)
    n_scores += sum(r.n_ok + r.n_error + r.n_skipped for r in rolled.values())
    undelivered = one("SELECT count(*) FROM scores WHERE delivery IS NULL AND created_at >= ?",
                      (cutoff,)).fetchone()[0]

    # Which metric each score name belongs to; names of metrics seen only through skipped jobs.
    name_metric: dict[str, str] = {}
    for r in one("SELECT DISTINCT name, metric FROM scores WHERE created_at >= ?", (cutoff,)):
        name_metric.setdefault(r["name"], r["metric"] or r["name"])
    for name, roll in rolled.items():
        name_metric.setdefault(name, roll.metric)
    skipped_by_metric: dict[str, int] = dict(_rollups.skip_rollups(conn, since))
    for r in one(
        "SELECT metric, count(*) AS n FROM ("
        " SELECT j.metric AS metric, j.record_id AS record_id FROM jobs j"
        " JOIN records r ON r.record_id = j.record_id"
        " WHERE j.status = 'skipped' AND r.created_at >= ?"
        " UNION"
        " SELECT s.metric, s.record_id FROM scores s"
        " WHERE s.status = 'skipped' AND s.created_at >= ?"
        ") AS skipped GROUP BY metric",
        (cutoff, cutoff),
    ):
        skipped_by_metric[r["metric"]] = skipped_by_metric.get(r["metric"], 0) + r["n"]
    info = _MetricInfo(conn)
    for metric in skipped_by_metric:
        if metric not in name_metric.values():
            for name in info.names(metric):
                name_metric.setdefault(name, metric)

    errors = dict(one(
        "SELECT name, count(*) FROM scores WHERE status='error' AND created_at >= ? GROUP BY name",
        (cutoff,),
    ).fetchall())
    for name, roll in rolled.items():
        errors[name] = errors.get(name, 0) + roll.n_error
    values: dict[str, list[float]] = {}
    fails: dict[str, int] = {}
    labelled: dict[str, int] = {}
    for r in one(
        "SELECT name, value, label FROM scores WHERE status='ok' AND value IS NOT NULL"
        " AND created_at >= ? ORDER BY name, value",
        (cutoff,),
    ):
        values.setdefault(r["name"], []).append(r["value"])
        if r["label"] is not None:
            labelled[r["name"]] = labelled.get(r["name"], 0) + 1
            fails[r["name"]] = fails.get(r["name"], 0) + (r["label"] == "fail")

    reasons = skip_reasons(conn, since=since)
    summaries = []
    for name in sorted(name_metric, key=lambda n: (name_metric[n], n)):
        metric = name_metric[name]
        vals = values.get(name, [])
        n_lab = labelled.get(name, 0)
        # A yes/no metric has no meaningful interpolated percentile (p90 = 0.7 of 0/1 values).
        binary = info.binary(metric, vals)
        yes = sum(v == 1.0 for v in vals) if binary else None
        rolled_name = rolled.get(name)
        if rolled_name is not None and rolled_name.n_ok:
            summaries.append(_merged_summary(name, metric, vals, n_lab, fails.get(name, 0),
                                             rolled_name, info, errors.get(name, 0),
                                             skipped_by_metric.get(metric, 0),
                                             binary, tuple(reasons.get(metric, ()))))
            continue
        summaries.append(MetricSummary(
            name=name, metric=metric, higher_is_better=info.higher_is_better(metric),
            count=len(vals), mean=math.fsum(vals) / len(vals) if vals else None,
            p10=None if binary else percentile(vals, 0.1),
            p50=None if binary else percentile(vals, 0.5),
            p90=None if binary else percentile(vals, 0.9),
            fail_rate=fails.get(name, 0) / len(vals) if n_lab else None, labelled=n_lab,
            errors=errors.get(name, 0), skipped=skipped_by_metric.get(metric, 0),
            threshold=info.threshold(metric), binary=binary, yes=yes,
            rate=yes / len(vals) if yes is not None and vals else None,
            skip_reasons=tuple(reasons.get(metric, ())),
        ))

    worst_rows: dict[str, list[WorstRecord]] = {}
    if worst > 0:
        for m in summaries:
            if not m.count or m.higher_is_better is None:
                continue
            order = "ASC" if m.higher_is_better else "DESC"
            rows = one(
                "SELECT s.value, s.label, s.trace_id, s.record_id, r.query FROM scores s"
                " LEFT JOIN records r ON r.record_id = s.record_id"
                " WHERE s.name = ? AND s.status = 'ok' AND s.value IS NOT NULL"
                f" AND s.created_at >= ? ORDER BY s.value {order}, s.score_id DESC LIMIT ?",
                (m.name, cutoff, worst),
            ).fetchall()
            worst_rows[m.name] = [
                WorstRecord(m.name, r["value"], r["label"], r["trace_id"], r["record_id"],
                            r["query"])
                for r in rows
            ]

    return Report(
        db=db, since=since, generated_at=time.time(), records=records, sampled=int(sampled),
        dropped=int(dropped_row[0]) if dropped_row else 0, pending_jobs=pending,
        undelivered=undelivered,
        scores=n_scores, metrics=summaries, worst=worst_rows, judges=judge_health(conn),
        lost=lost,
    )


def skip_reasons(conn: sqlite3.Connection, *, since: float | None = None
                 ) -> dict[str, list[tuple[str, int]]]:
    """Per metric, why records were skipped (``record has no answer``), most frequent first,
    as (reason, records); filtered on ``records.created_at`` like the skipped counts."""
    cutoff = since if since is not None else -math.inf
    out: dict[str, list[tuple[str, int]]] = {}
    for metric, reason, n in conn.execute(
        "SELECT metric, reason, count(*) FROM ("
        " SELECT metric, record_id, max(reason) AS reason FROM ("
        "  SELECT j.metric AS metric, j.record_id AS record_id, j.reason AS reason FROM jobs j"
        "  JOIN records r ON r.record_id = j.record_id"
        "  WHERE j.status = 'skipped' AND r.created_at >= ?"
        "  UNION ALL"
        "  SELECT s.metric, s.record_id, s.error FROM scores s"
        "  WHERE s.status = 'skipped' AND s.created_at >= ?"
        " ) AS skips GROUP BY metric, record_id"
        ") AS per_record GROUP BY metric, reason ORDER BY metric, count(*) DESC, reason",
        (cutoff, cutoff),
    ):
        out.setdefault(metric, []).append((reason or "no reason recorded", n))
    return out


def _merged_summary(name: str, metric: str, vals: list[float], n_lab: int, n_fail: int,
                    roll: _rollups.ScoreRollup, info: _MetricInfo, errors: int,
                    skipped: int, binary: bool = False,
                    reasons: tuple[tuple[str, int], ...] = ()) -> MetricSummary:
    """A score name's summary over raw values plus the rollups of pruned hours (a yes/no
    metric's pruned values sit in the lowest or highest bin: its yes count stays exact)."""
    bins: dict[float, int] = {}
    for mid, _label, n in roll.bins:
        bins[mid] = bins.get(mid, 0) + n
    pairs = sorted(bins.items())
    count = len(vals) + roll.n_ok
    yes = (sum(v == 1.0 for v in vals) + sum(n for mid, n in pairs if mid >= 0.5)
           if binary else None)
    labelled = n_lab + roll.n_labelled

    def q(p: float) -> float | None:
        return _rollups.weighted_percentile(vals, pairs, p)

    return MetricSummary(
        name=name, metric=metric, higher_is_better=info.higher_is_better(metric), count=count,
        mean=(math.fsum(vals) + roll.value_sum) / count if count else None,
        p10=None if binary else q(0.1), p50=None if binary else q(0.5),
        p90=None if binary else q(0.9),
        fail_rate=(n_fail + roll.n_fail) / count if labelled else None, labelled=labelled,
        errors=errors, skipped=skipped, threshold=info.threshold(metric), binary=binary,
        yes=yes, rate=yes / count if yes is not None and count else None, skip_reasons=reasons,
    )


def judge_health(conn: sqlite3.Connection) -> list[dict[str, Any]]:
    """The judge canary's verdict per judge model (empty when no judge was checked)."""
    try:
        rows = conn.execute(
            "SELECT model, agreement, cases, degenerate, detail, checked_at FROM judge_health "
            "ORDER BY checked_at DESC").fetchall()
    except sqlite3.Error:  # a database from before the judge tables existed
        return []
    return [{"model": m, "agreement": a, "cases": c, "degenerate": bool(d),
             "reason": (json.loads(detail or "{}") or {}).get("reason", ""), "checked_at": t}
            for m, a, c, d, detail, t in rows]


# -- distributions, time series and token usage (the HTML report) ---------------------------
@dataclass(frozen=True, slots=True)
class Histogram:
    """Ok values of one score name in equal bins over ``[lo, hi]`` (the last bin is closed).

    Each bin is split by label: ``passed``, ``failed`` and ``unlabelled`` (no threshold).
    """

    lo: float
    hi: float
    passed: list[int]
    failed: list[int]
    unlabelled: list[int]

    @property
    def counts(self) -> list[int]:
        return [p + f + u for p, f, u in zip(self.passed, self.failed, self.unlabelled)]


def histogram(conn: sqlite3.Connection, name: str, *, since: float | None = None,
              bins: int = 10) -> Histogram | None:
    """Histogram of the ok values of score ``name`` (scores.created_at >= ``since``).

    The range is [0, 1] when every value lies in it, else the observed [min, max]. Counted in
    SQL, so it needs no memory for the values. None when there are no values.
    """
    cutoff = since if since is not None else -math.inf
    where = ("name = ? AND status = 'ok' AND value IS NOT NULL AND created_at >= ?")
    lo, hi, n = conn.execute(
        f"SELECT min(value), max(value), count(*) FROM scores WHERE {where}", (name, cutoff)
    ).fetchone()
    if not n:
        return None
    if lo >= 0.0 and hi <= 1.0:
        lo, hi = 0.0, 1.0
    elif lo == hi:
        lo, hi = lo - 0.5, hi + 0.5
    passed, failed, unlabelled = [0] * bins, [0] * bins, [0] * bins
    # (value - lo) * bins / width rather than / (width / bins): 0.3 lands in bin 3, not 2.
    for b, label, count in conn.execute(
        "SELECT CAST((value - ?) * ? / ? AS INTEGER) AS b, label, count(*)"
        f" FROM scores WHERE {where} GROUP BY b, label",
        (lo, bins, hi - lo, name, cutoff),
    ):
        target = {"pass": passed, "fail": failed}.get(label, unlabelled)
        target[min(max(b, 0), bins - 1)] += count  # (clamped here: portable SQL)
    return Histogram(lo, hi, passed, failed, unlabelled)


@dataclass(frozen=True, slots=True)
class TimeBucket:
    start: float  # unix seconds, a multiple of the bucket size (UTC-aligned)
    count: int
    mean: float
    failed: int
    labelled: int


#: Bucket sizes for time series, smallest first: (seconds, name). Sub-minute sizes let a
#: short run (a demo scored in two seconds) show a line rather than one dot.
BUCKETS: tuple[tuple[float, str], ...] = (
    (0.05, "50 ms"), (0.1, "100 ms"), (0.25, "250 ms"), (0.5, "500 ms"), (1, "second"),
    (5, "5 seconds"), (15, "15 seconds"),
    (60, "minute"), (300, "5 minutes"), (900, "15 minutes"), (3600, "hour"),
    (6 * 3600, "6 hours"), (86400, "day"), (7 * 86400, "week"),
)


def pick_bucket(first: float, last: float, max_buckets: int = 48) -> tuple[float, str]:
    """The smallest bucket of :data:`BUCKETS` that covers ``[first, last]`` in at most
    ``max_buckets`` buckets: the bucket follows the data's time span."""
    for seconds, label in BUCKETS:
        if int(last // seconds) - int(first // seconds) + 1 <= max_buckets:
            return seconds, label
    return BUCKETS[-1]


def score_time_span(conn: sqlite3.Connection, *, since: float | None = None
                    ) -> tuple[float, float] | None:
    """(first, last) ``scores.created_at`` of ok scores in the window, or None."""
    cutoff = since if since is not None else -math.inf
    first, last = conn.execute(
        "SELECT min(created_at), max(created_at) FROM scores WHERE status = 'ok'"
        " AND value IS NOT NULL AND created_at >= ?", (cutoff,),
    ).fetchone()
    if _rollups.has_rollups(conn):  # pruned hours count too
        r_first, r_last = conn.execute(
            "SELECT min(hour), max(hour) FROM rollup_scores WHERE n_ok > 0 AND hour >= ?",
            (cutoff,)).fetchone()
        if r_first is not None:
            first = r_first if first is None else min(first, float(r_first))
            last = float(r_last) if last is None else max(last, float(r_last))
    return None if first is None else (first, last)


def timeline(conn: sqlite3.Connection, name: str, *, bucket_s: float,
             since: float | None = None) -> list[TimeBucket]:
    """Mean ok value of score ``name`` per ``bucket_s`` seconds of ``scores.created_at``."""
    cutoff = since if since is not None else -math.inf
    raw = [
        TimeBucket(float(t), n, mean, int(failed or 0), labelled)
        for t, n, mean, failed, labelled in conn.execute(
            "SELECT CAST(created_at / ? AS INTEGER) * ? AS t, count(*), avg(value),"
            " sum(CASE WHEN label = 'fail' THEN 1 ELSE 0 END), count(label) FROM scores WHERE name = ? AND status = 'ok'"
            " AND value IS NOT NULL AND created_at >= ? GROUP BY t ORDER BY t",
            (bucket_s, bucket_s, name, cutoff),
        )
    ]
    rolled = _rollups.timeline_rollups(conn, name, bucket_s, since)
    if not rolled:
        return raw
    merged = {b.start: (b.count, b.mean * b.count, b.failed, b.labelled) for b in raw}
    for t, (n, vsum, failed, labelled) in rolled.items():
        a = merged.get(t, (0, 0.0, 0, 0))
        merged[t] = (a[0] + n, a[1] + vsum, a[2] + failed, a[3] + labelled)
    return [TimeBucket(t, n, vsum / n, failed, labelled)
            for t, (n, vsum, failed, labelled) in sorted(merged.items()) if n]


@dataclass(frozen=True, slots=True)
class JudgeUsage:
    """LLM-judge calls of one (model, step) from the ``judge_calls`` table."""

    model: str
    step: str
    calls: int
    errors: int  # calls that failed (the error column is set)
    input_tokens: int
    output_tokens: int
    cost_usd: float | None  # None when no call had a known price


@dataclass(frozen=True, slots=True)
class Usage:
    """Tokens the app used (records) and what the LLM judge cost (judge_calls), in a window."""

    records: int
    with_usage: int  # records that reported token usage
    input_tokens: int
    output_tokens: int
    models: dict[str, int]  # app model -> records
    judge_scores: int  # scores of metrics declared as kind "judge"
    judge: list[JudgeUsage]  # most expensive first

    @property
    def judge_cost_usd(self) -> float | None:
        costs = [j.cost_usd for j in self.judge if j.cost_usd is not None]
        return math.fsum(costs) if costs else None


def usage_summary(conn: sqlite3.Connection, *, since: float | None = None) -> Usage:
    """Token usage of the app (records) and of the LLM judge (``judge_calls``), if any.

    Databases written before judge calls were logged have no ``judge_calls`` (or no
    ``metrics``) table: those parts are then empty, not an error.
    """
    cutoff = since if since is not None else -math.inf
    records, with_usage, tin, tout = conn.execute(
        "SELECT count(*),"
        " coalesce(sum(CASE WHEN input_tokens IS NOT NULL OR output_tokens IS NOT NULL"
        " THEN 1 ELSE 0 END), 0),"
        " coalesce(sum(input_tokens), 0), coalesce(sum(output_tokens), 0)"
        " FROM records WHERE created_at >= ?", (cutoff,),
    ).fetchone()
    models = {m or "unknown": n for m, n in conn.execute(
        "SELECT model, count(*) FROM records WHERE created_at >= ? GROUP BY model"
        " ORDER BY count(*) DESC, model", (cutoff,),
    )}
    judge_scores = 0
    judge: list[JudgeUsage] = []
    if has_table(conn, "metrics"):
        judge_scores = conn.execute(
            "SELECT count(*) FROM scores WHERE created_at >= ? AND metric IN"
            " (SELECT metric FROM metrics WHERE kind = 'judge')", (cutoff,),
        ).fetchone()[0]
    if has_table(conn, "judge_calls"):
        judge = [
            JudgeUsage(model or "unknown", step or "-", calls, int(errors),
                       int(tin_j), int(tout_j), cost)
            for model, step, calls, errors, tin_j, tout_j, cost in conn.execute(
                "SELECT model, step, count(*),"
                " coalesce(sum(CASE WHEN error IS NOT NULL THEN 1 ELSE 0 END), 0),"
                " coalesce(sum(input_tokens), 0), coalesce(sum(output_tokens), 0),"
                " sum(cost_usd) FROM judge_calls WHERE created_at >= ?"
                " GROUP BY model, step ORDER BY coalesce(sum(cost_usd), 0) DESC,"
                " sum(input_tokens) + sum(output_tokens) DESC, model, step",
                (cutoff,),
            )
        ]
    r_n, r_wu, r_tin, r_tout, r_models = _rollups.usage_rollups(conn, since)
    for m, k in r_models.items():  # pruned hours (judge calls are not rolled up)
        models[m] = models.get(m, 0) + k
    return Usage(records=records + r_n, with_usage=with_usage + r_wu,
                 input_tokens=int(tin) + r_tin, output_tokens=int(tout) + r_tout,
                 models=models, judge_scores=judge_scores, judge=judge)


# -- text formatting -------------------------------------------------------------------------
def _num(v: float | None, digits: int = 3) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def _clip(text: str | None, width: int) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= width else text[: max(0, width - 1)] + "…"


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], align: str) -> list[str]:
    """Columns padded to their widest cell; ``align`` has one ``<``/``>`` per column."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(f"{c:{a}{w}}" for c, a, w in zip(cells, align, widths)).rstrip()

    return [line(headers), line(["-" * w for w in widths]), *(line(r) for r in rows)]


def _when(ts: float | None) -> str:
    if ts is None:
        return "-"
    return _dt.datetime.fromtimestamp(ts, _dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _share(part: int, whole: int) -> str:
    return f" ({100 * part / whole:.0f}%)" if whole else ""


def format_report(report: Report, width: int = WIDTH) -> str:
    """The human report: a summary line, a table per score name, the worst records."""
    window = "all time" if report.since is None else f"since {_when(report.since)}"
    errors = sum(m.errors for m in report.metrics)
    summary = (
        f"{_n(report.records, 'record')}, {report.sampled} sampled"
        f"{_share(report.sampled, report.records)}, {report.dropped} dropped; "
        f"{_n(report.scores, 'score')}, {_n(errors, 'error')}; "
        f"{_n(report.pending_jobs, 'job')} pending"
    )
    if report.lost:
        summary += "; lost (all time): " + ", ".join(
            f"{n} {reason}" for reason, n in sorted(report.lost.items()))
    if report.undelivered:
        summary += (f"; {_n(report.undelivered, 'score')} not yet exported (held, in flight, or "
                    "the export failed: a running pipeline sends it again)")
    out = [f"tracescore report on {report.db} ({window})", *textwrap.wrap(summary, width), ""]
    for j in report.judges:
        line = (f"judge {j['model']}: agreed with {j['agreement']:.0%} of {j['cases']} canary "
                "cases")
        if j["degenerate"]:
            line = f"WARNING: {line}: DEGENERATE ({j['reason']}); do not trust its scores"
        out += [*textwrap.wrap(line, width), ""]
    if not report.metrics:
        out.append("No scores yet." if report.records else "No records yet.")
        if report.pending_jobs:
            out.append(f"{report.pending_jobs} scoring jobs are waiting for a running pipeline.")
        return "\n".join(out)

    marks = {True: "", False: " ↓", None: " ·"}
    rows = [
        [m.name + marks[m.higher_is_better], str(m.count), _num(m.mean), _num(m.p10),
         _num(m.p50), _num(m.p90), _pct(m.fail_rate), str(m.errors), str(m.skipped)]
        for m in report.metrics if not m.binary
    ]
    if rows:
        out += _table(["score", "n", "mean", "p10", "p50", "p90", "fail", "errors", "skipped"],
                      rows, "<>>>>>>>>")
    # Yes/no metrics (values 0/1): how many said yes, not percentiles of 0s and 1s.
    checks = [
        [m.name + marks[m.higher_is_better], str(m.count),
         "-" if m.yes is None else f"{m.yes}/{m.count}", _pct(m.rate), _pct(m.fail_rate),
         str(m.errors), str(m.skipped)]
        for m in report.metrics if m.binary
    ]
    if checks:
        if rows:
            out.append("")
        out += _table(["yes/no check", "n", "yes", "rate", "fail", "errors", "skipped"],
                      checks, "<>>>>>>")
    notes = []
    if any(m.higher_is_better is False for m in report.metrics):
        notes.append("↓ lower is better")
    if any(m.higher_is_better is None for m in report.metrics):
        notes.append("· no better direction")
    unlabelled = [m.name for m in report.metrics if m.fail_rate is None and m.count]
    if unlabelled:
        notes.append(f"no pass/fail threshold: {', '.join(unlabelled)}")
    if notes:
        out += textwrap.wrap("; ".join(notes), width=width)
    out += _skip_notes(report.metrics, width)

    if report.worst:
        n = max(len(items) for items in report.worst.values())
        title = "Worst record per score" if n == 1 else f"Worst {n} records per score"
        out += ["", f"{title} (details: tracescore show TRACE)"]
        wrows: list[list[str]] = []
        for name, items in report.worst.items():
            for i, w in enumerate(items):
                wrows.append([name if i == 0 else "", _num(w.value), w.trace_id[:12], w.query or ""])
        fixed = max(len("score"), *(len(r[0]) for r in wrows)) + 2 + 5 + 2 + 12 + 2
        room = max(20, width - fixed)
        for r in wrows:
            r[3] = _clip(r[3], room)
        out += _table(["score", "value", "trace", "query"], wrows, "<><<")
    return "\n".join(out)


def _skip_notes(metrics: Sequence[MetricSummary], width: int) -> list[str]:
    """Why metrics skipped most of their records (once per metric, not per score name)."""
    # Metrics skipped alike (an agent without answers skips every answer metric) share a line.
    alike: dict[str, list[str]] = {}
    for m in metrics:
        if not m.mostly_skipped:
            continue
        total = m.skipped + m.count + m.errors
        why = "; ".join(f"{reason} ({n})" for reason, n in m.skip_reasons[:3]) or "no reason"
        names = alike.setdefault(f"skipped {m.skipped} of {total} records: {why}", [])
        if m.metric not in names:
            names.append(m.metric)
    lines: list[str] = []
    for text, names in alike.items():
        lines += textwrap.wrap(f"{', '.join(names)}: {text}", width, initial_indent="  ",
                               subsequent_indent="    ")
    if lines:
        lines = ["", "Mostly skipped (these metrics could not run on most records):", *lines]
    return lines


# -- show ------------------------------------------------------------------------------------
def find_records(conn: sqlite3.Connection, ident: str) -> tuple[list[dict[str, Any]], list[str]]:
    """Records for a trace id, a record id (``trace-span``) or a unique trace-id prefix.

    Returns ``(records, candidates)``: records found (oldest first), or no records and the
    trace ids a too-short prefix matches (empty when nothing matches).
    """
    ident = ident.strip().lower()
    if "-" in ident:
        rows = conn.execute("SELECT * FROM records WHERE record_id = ?", (ident,)).fetchall()
        return [dict(r) for r in rows], []
    if not ident or not re.fullmatch(r"[0-9a-f]+", ident):
        return [], []
    ids = [r[0] for r in conn.execute(
        "SELECT DISTINCT trace_id FROM records WHERE trace_id >= ? AND trace_id < ? LIMIT 11",
        (ident, ident + "g"),  # a range, so the trace_id index serves the prefix search
    )]
    if len(ids) != 1:
        return [], ids
    rows = conn.execute(
        "SELECT * FROM records WHERE trace_id = ? ORDER BY created_at, record_id", (ids[0],)
    ).fetchall()
    return [dict(r) for r in rows], []


def record_details(conn: sqlite3.Connection, row: dict[str, Any]) -> dict[str, Any]:
    """A record as plain data: decoded JSON columns, its scores and its unscored jobs."""
    rec = dict(row)
    for key, default in (("contexts", "[]"), ("ground_truths", "[]"), ("metadata", "{}"),
                         ("tags", "[]"), ("sampled_metrics", "[]")):
        try:
            rec[key] = json.loads(rec.get(key) or default)
        except (TypeError, ValueError):
            pass  # keep the raw text: show what is there rather than fail
    rec["sampled"] = bool(rec.get("sampled"))
    rec["content_captured"] = bool(rec.get("content_captured"))
    rec["scores"] = [
        {k: s[k] for k in ("name", "metric", "metric_version", "value", "label", "explanation",
                           "status", "error", "duration_ms", "created_at", "delivery")}
        for s in conn.execute(
            "SELECT * FROM scores WHERE record_id = ? ORDER BY metric, score_id",
            (rec["record_id"],),
        )
    ]
    rec["jobs"] = [
        dict(j) for j in conn.execute(
            "SELECT metric, metric_version, status, attempts, reason FROM jobs"
            " WHERE record_id = ? AND status != 'done' ORDER BY metric", (rec["record_id"],),
        )
    ]
    return rec


def _wrap(text: str, indent: str, width: int) -> list[str]:
    lines: list[str] = []
    for para in (text or "").splitlines() or [""]:
        lines += textwrap.wrap(para, width=width, initial_indent=indent,
                               subsequent_indent=indent) or [indent.rstrip()]
    return lines


def _field(label: str, value: Any, width: int) -> list[str]:
    text = "-" if value is None or value == "" else str(value)
    body = _wrap(text, " " * 15, width)
    body[0] = f"{label:<15}" + body[0][15:]
    return body


def format_records(recs: Sequence[dict[str, Any]], width: int = WIDTH,
                   context_chars: int = 300) -> str:
    """The human ``show`` output for records from :func:`record_details`."""
    out: list[str] = []
    for rec in recs:
        if out:
            out += ["", "=" * min(width, 60), ""]
        usage = "-"
        if rec.get("input_tokens") is not None or rec.get("output_tokens") is not None:
            usage = f"{rec.get('input_tokens') or 0} in / {rec.get('output_tokens') or 0} out"
        latency = rec.get("latency_ms")
        if rec["sampled"]:
            sampling = f"sampled (u={rec.get('sample_u') or 0:.4f})"
            if rec.get("forced"):
                sampling += f", forced: {rec['forced']}"
            metrics = rec["sampled_metrics"]
            if isinstance(metrics, list) and metrics:
                sampling += "; metrics: " + ", ".join(map(str, metrics))
        else:
            sampling = f"not sampled (u={rec.get('sample_u') or 0:.4f})"
        out += [f"record {rec['record_id']}", ""]
        out += _field("trace", rec["trace_id"], width)
        out += _field("created", _when(rec.get("created_at")), width)
        out += _field("source", rec.get("source"), width)
        out += _field("latency", None if latency is None else f"{latency:.1f} ms", width)
        out += _field("tokens", usage, width)
        out += _field("model", rec.get("model"), width)
        out += _field("error", rec.get("error"), width)
        out += _field("sampling", sampling, width)
        for key in ("session_id", "user_id"):
            if rec.get(key):
                out += _field(key.replace("_id", ""), rec[key], width)
        if rec.get("tags"):
            out += _field("tags", ", ".join(map(str, rec["tags"])), width)
        if rec.get("metadata"):
            out += _field("metadata", json.dumps(rec["metadata"], ensure_ascii=False), width)
        if not rec["content_captured"]:
            out += _field("content", "not captured (content capture was off)", width)
        compact = rec.get("text_kept") == 0
        if compact:
            note = ("stored compact: text not kept (the record was not sampled; "
                    "keep_full_text=False or its window passed)")
            if rec["jobs"] or rec["scores"]:
                note += "; scoring was asked for later (feedback or a reference) and skipped"
            out += _field("content", note, width)
        out += [""]
        if compact:
            for key in ("query", "answer"):
                chars, digest = rec.get(f"{key}_chars"), rec.get(f"{key}_hash")
                out += _field(key, "-" if chars is None else
                              f"(not kept: {chars} chars, hash {digest})", width)
        else:
            out += _field("query", rec.get("query"), width)
            out += _field("answer", rec.get("answer"), width)
        gts = rec["ground_truths"] if isinstance(rec["ground_truths"], list) else []
        if not gts:
            out += _field("ground truth", None, width)
        for i, g in enumerate(gts):
            out += _field("ground truth" if i == 0 else "", g, width)

        ctxs = rec["contexts"] if isinstance(rec["contexts"], list) else []
        out += ["", f"contexts ({len(ctxs)})"]
        for i, c in enumerate(ctxs):
            head = [f"[{i}]"]
            if c.get("source"):
                head.append(f"from {c['source']}")
            if c.get("id") is not None:
                head.append(f"id={c['id']}")
            if c.get("score") is not None:
                head.append(f"score={c['score']:.4g}" if isinstance(c["score"], (int, float))
                            else f"score={c['score']}")
            if compact:
                head.append(f"(text not kept: {c.get('chars')} chars, hash {c.get('hash')})")
            out.append("  " + "  ".join(head))
            text = c.get("text") or ""
            if len(text) > context_chars:
                text = text[:context_chars].rstrip() + f"… ({len(c['text'])} chars)"
            out += _wrap(text, "      ", width)

        scores = rec["scores"]
        out += ["", f"scores ({len(scores)})"]
        if scores:
            rows = []
            for s in scores:
                value = _num(s["value"]) if s["status"] == "ok" else s["status"]
                dur = "-" if s["duration_ms"] is None else f"{s['duration_ms']:.1f} ms"
                rows.append([s["name"], value, s["label"] or "-", dur])
            table = _table(["score", "value", "label", "duration"], rows, "<><>")
            out += ["  " + line for line in table[:2]]
            for line, s in zip(table[2:], scores):
                out.append("  " + line)
                note = s["error"] if s["status"] != "ok" else s["explanation"]
                if note:
                    out += _wrap(note if len(note) <= 600 else note[:600] + "…",
                                 "      ", width)
        for j in rec["jobs"]:
            reason = f": {j['reason']}" if j.get("reason") else ""
            out.append(f"  {j['metric']}: {j['status']}{reason}")
    return "\n".join(out)
