"""The read layer's windows and segments: ``Window``, the ``segments`` table as a
``SegmentIndex``, the dimensions and their values, the rollup-hour arithmetic of a window, and
the SQL clauses every reader filters with (a segment set, score names, score dimensions).

Blocking I/O on a read connection (:func:`tracescore.read.db.open_db`); SQLite or PostgreSQL.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

HOUR = 3600
#: Dimensions of a record (the ``segments`` table), besides ``metadata.KEY``.
RECORD_DIMS = ("release", "environment", "model")
#: Dimensions of a score (columns of ``hourly_scores`` and ``scores``).
SCORE_DIMS = ("judge_model", "metric_version")

Group = str | None  # a dimension's value, or None when the query is not split


@dataclass(frozen=True, slots=True)
class Window:
    """``[since, until)`` in unix seconds; None: unbounded (``until`` None is "now")."""

    since: float | None = None
    until: float | None = None

    def contains(self, t: float) -> bool:
        return (self.since is None or t >= self.since) and (self.until is None or t < self.until)

    def bounds(self) -> tuple[float, float]:
        """``(since, until)`` as SQL parameters: an open end as a huge finite number."""
        return (_num(-math.inf if self.since is None else self.since),
                _num(math.inf if self.until is None else self.until))


# -- segments ---------------------------------------------------------------------------------
class SegmentIndex:
    """The ``segments`` table, read as far as a query needs it: seg_id → {dimension: value}.

    ``matching(where)`` reads only the segments whose release/environment/model columns match
    (a ``--where`` read touches those and no others); :meth:`value` of a segment not read yet,
    :attr:`rows`, :attr:`first_seen`, :meth:`dims` and :meth:`values` read the whole table
    once. The table itself is bounded (``max_segments`` combinations, see
    :mod:`tracescore.store.segments`). One connection, one thread."""

    _COLS = "seg_id, release, environment, model, meta, first_seen"

    def __init__(self, conn: Any) -> None:
        from ..store.compat import has_table

        self._conn = conn
        self._rows: dict[int, dict[str, str | None]] = {}
        self._first: dict[int, float] = {}
        self._all = not has_table(conn, "segments")  # (no table: nothing more to read)

    def _read(self, where_sql: str = "", args: Sequence[Any] = ()) -> list[int]:
        got = []
        for seg_id, release, env, model, meta, first in self._conn.execute(
                f"SELECT {self._COLS} FROM segments{where_sql}", tuple(args)).fetchall():
            sid = int(seg_id)
            got.append(sid)
            if sid in self._rows:
                continue
            dims: dict[str, str | None] = {"release": release, "environment": env,
                                           "model": model}
            try:
                for k, v in (json.loads(meta or "{}") or {}).items():
                    dims[f"metadata.{k}"] = None if v is None else str(v)
            except (TypeError, ValueError):
                pass
            self._rows[sid] = dims
            self._first[sid] = float(first or 0.0)
        return got

    def _read_all(self) -> None:
        if not self._all:
            self._read()
            self._all = True

    @property
    def rows(self) -> dict[int, dict[str, str | None]]:
        self._read_all()
        return self._rows

    @property
    def first_seen(self) -> dict[int, float]:
        self._read_all()
        return self._first

    def dims(self) -> list[str]:
        """Every record dimension present (metadata keys included), plus the score ones."""
        out = list(RECORD_DIMS)
        for dims in self.rows.values():
            out += [d for d in dims if d not in out]
        return out + list(SCORE_DIMS)

    def value(self, seg_id: int | None, dim: str) -> str | None:
        if seg_id is None:
            return None
        sid = int(seg_id)
        if sid not in self._rows:
            self._read_all()
        return self._rows.get(sid, {}).get(dim)

    def matching(self, where: Mapping[str, str] | None) -> set[int] | None:
        """seg_ids whose record dimensions equal ``where`` (score dimensions ignored here);
        None when ``where`` has no record dimension (no filter)."""
        crit = {k: v for k, v in (where or {}).items() if k not in SCORE_DIMS}
        if not crit:
            return None
        if self._all:
            candidates: Iterable[int] = self._rows
        else:  # the columns in SQL; the metadata keys (JSON) on the rows that pass them
            cols = [k for k in ("release", "environment", "model") if k in crit]
            candidates = self._read(
                " WHERE " + " AND ".join(f"{k} = ?" for k in cols) if cols else "",
                [crit[k] for k in cols])
            if not cols:
                self._all = True
        return {sid for sid in candidates
                if all(self._rows[sid].get(k) == v for k, v in crit.items())}

    def values(self, dim: str) -> list[tuple[str, float]]:
        """The values of a record dimension, each with when it was first seen, oldest first."""
        first: dict[str, float] = {}
        for sid, dims in self.rows.items():
            v = dims.get(dim)
            if v is not None:
                t = self.first_seen.get(sid, 0.0)
                first[v] = min(first.get(v, t), t)
        return sorted(first.items(), key=lambda kv: (kv[1], kv[0]))


def dims_of(conn: Any) -> list[str]:
    """The dimensions a database can be split or filtered by."""
    return SegmentIndex(conn).dims()


def values_of(conn: Any, dim: str, window: Window = Window(),
              seg: SegmentIndex | None = None) -> list[tuple[str, float]]:
    """The values ``dim`` takes (with when each was first seen), oldest first."""
    if dim in SCORE_DIMS:
        lo, hi = _hours(window)
        first: dict[str, float] = {}
        rows = conn.execute(
            f"SELECT {dim}, min(hour) FROM hourly_scores WHERE hour >= ? AND hour < ?"
            f" AND {dim} IS NOT NULL AND {dim} != '' GROUP BY {dim}",
            (_num(lo), _num(hi))).fetchall() if lo < hi else []
        # an hour the window cuts: its raw rows inside the window, as score_aggs counts them
        # (a judge model seen only there is a value of the window too)
        for _hour, t0, t1 in _edges(window):
            rows += conn.execute(
                f"SELECT {dim}, min(created_at) FROM scores WHERE created_at >= ?"
                f" AND created_at < ? AND {dim} IS NOT NULL AND {dim} != '' GROUP BY {dim}",
                (t0, t1)).fetchall()
        for v, t in rows:
            first[str(v)] = min(first.get(str(v), float(t)), float(t))
        return sorted(first.items(), key=lambda kv: (kv[1], kv[0]))
    return (seg or SegmentIndex(conn)).values(dim)


# -- window arithmetic -------------------------------------------------------------------------
def _floor_hour(t: float) -> int:
    return int(math.floor(t / HOUR)) * HOUR


def _hours(window: Window) -> tuple[float, float]:
    """The [lo, hi) range of rollup hours that lie wholly inside the window (edges excluded
    when they cut an hour; :func:`_edges` reads those)."""
    lo = -math.inf if window.since is None else math.ceil(window.since / HOUR) * HOUR
    hi = math.inf if window.until is None else _floor_hour(window.until)
    return lo, hi


def _edges(window: Window) -> list[tuple[int, float, float]]:
    """The hours a window edge cuts: (hour, from, to) — the part of the hour in the window."""
    out: list[tuple[int, float, float]] = []
    if window.since is not None and window.since % HOUR:
        h = _floor_hour(window.since)
        out.append((h, window.since, min(h + HOUR, window.until if window.until is not None
                                          else math.inf)))
    if window.until is not None and window.until % HOUR:
        h = _floor_hour(window.until)
        start = h if window.since is None else max(h, window.since)
        if not out or out[0][0] != h:
            if start < window.until:
                out.append((h, float(start), window.until))
    return out


def seg_clause(ids: set[int] | None, col: str = "seg_id") -> tuple[str, list[Any]]:
    if ids is None:
        return "", []
    if not ids:
        return " AND 1 = 0", []
    ordered = sorted(ids)
    return f" AND {col} IN ({','.join('?' * len(ordered))})", list(ordered)


def _names_in_hour(conn: Any, hour: int) -> list[str]:
    """The score names with rows in ``hour`` (from the rollups): raw reads of that hour then
    filter by name, which the (name, created_at) index serves — a bare time range would scan
    the whole table (there is no index on scores.created_at alone)."""
    return [str(r[0]) for r in conn.execute(
        "SELECT DISTINCT name FROM hourly_scores WHERE hour = ?", (hour,)).fetchall()]


def _names_clause(names: Sequence[str] | None, col: str = "name") -> tuple[str, list[Any]]:
    """`` AND name IN (...)`` for a list of score names (None: no filter)."""
    if names is None:
        return "", []
    if not names:
        return " AND 1 = 0", []
    return f" AND {col} IN ({','.join('?' * len(names))})", list(names)


def score_dim_clause(where: Mapping[str, str] | None, prefix: str = ""
                      ) -> tuple[str, list[Any]]:
    sql, args = "", []
    for d in SCORE_DIMS:
        if where and d in where:
            sql += f" AND coalesce({prefix}{d}, '') = ?"
            args.append(where[d])
    return sql, args


def _num(x: float) -> float:
    # ±inf as bounds: both engines compare a BIGINT hour with a float fine, but psycopg
    # cannot send inf for a bigint parameter: use a huge finite float instead
    return x if math.isfinite(x) else math.copysign(1e300, x)


