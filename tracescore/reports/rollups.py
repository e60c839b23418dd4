"""Reading the hourly rollups of pruned rows (issue 13), for the report over long windows.

A row is either raw (``records``/``scores``) or rolled up (pruned), never both: the pruner
rolls up and deletes in one transaction. So a window's total is raw rows in the window plus
rollup hours in the window. For pruned data the window's edge is an hour: an hour counts when
it *starts* at or after the cutoff. Percentiles that include pruned hours come from their
histogram bins (100 bins over [0, 1]: bin midpoints, exact to 0.01 for scores in [0, 1]).

Databases from before schema version 2 have no rollup tables: everything here is then empty.
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..store.rollup import bin_mid


@dataclass
class ScoreRollup:
    metric: str
    n_ok: int = 0
    value_sum: float = 0.0
    n_labelled: int = 0
    n_fail: int = 0
    n_error: int = 0
    n_skipped: int = 0
    #: (bin midpoint, label or "", count)
    bins: list[tuple[float, str, int]] = field(default_factory=list)


def has_rollups(conn: sqlite3.Connection) -> bool:
    from ..store.compat import has_table

    return has_table(conn, "rollup_records")


def _cut(since: float | None) -> float:
    return -math.inf if since is None else since


def record_totals(conn: sqlite3.Connection, since: float | None) -> tuple[int, int]:
    """(records, sampled) of pruned hours in the window."""
    if not has_rollups(conn):
        return 0, 0
    n, sampled = conn.execute(
        "SELECT coalesce(sum(records), 0), coalesce(sum(sampled), 0) FROM rollup_records"
        " WHERE hour >= ?", (_cut(since),)).fetchone()
    return int(n), int(sampled)


def score_rollups(conn: sqlite3.Connection, since: float | None) -> dict[str, ScoreRollup]:
    """Per score name: counts, sums and bins of pruned hours in the window."""
    if not has_rollups(conn):
        return {}
    out: dict[str, ScoreRollup] = {}
    for name, metric, n_ok, vsum, n_lab, n_fail, n_err, n_skip in conn.execute(
        "SELECT name, min(metric), sum(n_ok), sum(value_sum), sum(n_labelled), sum(n_fail),"
        " sum(n_error), sum(n_skipped) FROM rollup_scores WHERE hour >= ? GROUP BY name",
        (_cut(since),),
    ):
        out[name] = ScoreRollup(metric, int(n_ok), float(vsum), int(n_lab), int(n_fail),
                                int(n_err), int(n_skip))
    for name, b, label, n in conn.execute(
        "SELECT name, bin, label, sum(n) FROM rollup_score_bins WHERE hour >= ?"
        " GROUP BY name, bin, label ORDER BY name, bin", (_cut(since),),
    ):
        if name in out:
            out[name].bins.append((bin_mid(int(b)), label, int(n)))
    return out


def skip_rollups(conn: sqlite3.Connection, since: float | None) -> dict[str, int]:
    if not has_rollups(conn):
        return {}
    return {m: int(n) for m, n in conn.execute(
        "SELECT metric, sum(n) FROM rollup_skips WHERE hour >= ? GROUP BY metric",
        (_cut(since),))}


def usage_rollups(conn: sqlite3.Connection, since: float | None
                  ) -> tuple[int, int, int, int, dict[str, int]]:
    """(records, with_usage, input_tokens, output_tokens, {model: records}) of pruned hours."""
    if not has_rollups(conn):
        return 0, 0, 0, 0, {}
    n, wu, tin, tout = conn.execute(
        "SELECT coalesce(sum(records), 0), coalesce(sum(with_usage), 0),"
        " coalesce(sum(input_tokens), 0), coalesce(sum(output_tokens), 0) FROM rollup_records"
        " WHERE hour >= ?", (_cut(since),)).fetchone()
    models = {m: int(k) for m, k in conn.execute(
        "SELECT model, sum(n) FROM rollup_models WHERE hour >= ? GROUP BY model",
        (_cut(since),))}
    return int(n), int(wu), int(tin), int(tout), models


def timeline_rollups(conn: sqlite3.Connection, name: str, bucket_s: float,
                     since: float | None) -> dict[float, tuple[int, float, int, int]]:
    """Per time bucket (start): (n_ok, value_sum, n_fail, n_labelled) of pruned hours."""
    if not has_rollups(conn):
        return {}
    out: dict[float, tuple[int, float, int, int]] = {}
    for hour, n, vsum, n_fail, n_lab in conn.execute(
        "SELECT hour, n_ok, value_sum, n_fail, n_labelled FROM rollup_scores"
        " WHERE name = ? AND hour >= ? AND n_ok > 0", (name, _cut(since)),
    ):
        t = float(int(hour) // bucket_s * bucket_s)
        a = out.get(t, (0, 0.0, 0, 0))
        out[t] = (a[0] + int(n), a[1] + float(vsum), a[2] + int(n_fail), a[3] + int(n_lab))
    return out


def weighted_percentile(values: Sequence[float], bins: Sequence[tuple[float, int]],
                        q: float) -> float | None:
    """The linear-interpolated percentile of ``values`` (exact, sorted) together with
    ``bins`` ((midpoint, count), sorted), as if each bin were ``count`` copies of its midpoint."""
    merged: list[tuple[float, int]] = []
    i = j = 0
    while i < len(values) or j < len(bins):
        if j >= len(bins) or (i < len(values) and values[i] <= bins[j][0]):
            merged.append((values[i], 1))
            i += 1
        else:
            if bins[j][1] > 0:
                merged.append(bins[j])
            j += 1
    total = sum(n for _, n in merged)
    if total == 0:
        return None
    pos = (total - 1) * q
    lo_i = math.floor(pos)
    frac = pos - lo_i

    def at(k: int) -> float:
        seen = 0
        for v, n in merged:
            seen += n
            if k < seen:
                return v
        return merged[-1][0]

    lo, hi = at(lo_i), at(min(lo_i + 1, total - 1))
    return lo + (hi - lo) * frac
