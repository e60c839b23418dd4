"""The HTML pages' data — the trend page (:func:`build_trend`), the report page's per-score
timelines (:func:`build_page`) — and ``export`` rows, against the raw rows."""

from __future__ import annotations

import json
import math

from hypothesis import example, given

from .build import BASE, GROUNDED, QUALITY, Rec, Spec
from .checks import approx
from .expect import hour_of, side, t_interval, wilson
from .run import built
from .strategies import specs


def _open(db: str):
    from tracescore.read.db import open_db

    return open_db(db)


def _by_hour(view):
    hours: dict[float, list[dict]] = {}
    for s in view.scores():
        hours.setdefault(hour_of(s["created_at"]), []).append(s)
    return hours


@given(spec=specs())
def test_trend_page_points_match_the_raw_rows(spec):
    """Each hourly point of the trend page: n, the mean (the rate of a yes/no score) and its
    interval (Student t, unclipped; Wilson), pruned hours included (rollups)."""
    from tracescore.reports.trend import build_trend

    with built(spec) as (db, view):
        conn = _open(db)
        try:
            page = build_trend(conn, by_hour=True, now=BASE + 10 * 3600).to_json()
        finally:
            conn.close()
    hours = _by_hour(view)
    for name, series in page["series"].items():
        assert series["kind"] == ("rate" if name == GROUNDED else "mean")
        want = {h: side(rows, name) for h, rows in hours.items()}
        want = {h: s for h, s in want.items() if s.n}
        assert [p[0] for p in series["points"]] == sorted(want)
        for start, n, value, lo, hi in series["points"]:
            s = want[start]
            assert n == s.n
            if name == GROUNDED:
                assert value == approx(s.yes / s.n)
                assert (lo, hi) == tuple(map(approx, wilson(s.yes, s.n)))
            else:
                assert value == approx(s.mean)
                if s.n >= 2 and not s.constant:  # Student t, clipped to [0, 1] or not
                    assert (lo, hi) in [tuple(map(approx, t_interval(s.values, clip=c)))
                                        for c in (False, True)]


def _report_page(db: str):
    from tracescore.reports.report import build_page, build_report

    conn = _open(db)
    try:
        return build_page(conn, build_report(conn, worst=0))
    finally:
        conn.close()


@given(spec=specs(prune=False))
def test_report_page_timelines_match_the_raw_rows(spec):
    """The HTML report's timeline of a continuous score: per bucket n, mean, interval."""
    with built(spec) as (db, view):
        page = _report_page(db)
    if page.bucket is None:
        assert not view.scores()
        return
    size = page.bucket[0]
    for name in (QUALITY,):
        buckets: dict[float, list[dict]] = {}
        for s in view.scores():
            buckets.setdefault(math.floor(s["created_at"] / size) * size, []).append(s)
        want = {t: side(rows, name) for t, rows in buckets.items()}
        want = {t: s for t, s in want.items() if s.n}
        got = page.timelines.get(name, [])
        assert [b.start for b in got] == sorted(want)
        for b in got:
            s = want[b.start]
            assert (b.count, b.mean) == (s.n, approx(s.mean))


def _all_yes() -> Spec:
    """80 verdicts, all "yes", by two judges over two hours."""
    return Spec(tuple(Rec(t=90.0 * i, judge_model=f"judge-{'ab'[i % 2]}",
                          scores=((GROUNDED, 1.0),)) for i in range(80)))


@given(spec=specs(prune=False))
@example(spec=_all_yes())
def test_trend_band_counts_yes(spec):
    """The report page's timeline of a yes/no score: each bucket's rate and Wilson band are
    those of the bucket's yes count."""
    with built(spec) as (db, view):
        page = _report_page(db)
    if page.bucket is None:
        return
    size = page.bucket[0]
    buckets: dict[float, list[dict]] = {}
    for s in view.scores():
        buckets.setdefault(math.floor(s["created_at"] / size) * size, []).append(s)
    for b in page.timelines.get(GROUNDED, []):
        s = side(buckets[b.start], GROUNDED)
        assert b.count == s.n
        assert (b.lo, b.hi) == tuple(map(approx, wilson(s.yes, s.n)))


@given(spec=specs(prune=False, rescore=True))
def test_export_rows_are_the_raw_rows(spec):
    """``export --format jsonl``: one row per record and score, with the stored value,
    label and status of each score (re-scored ones: the new value)."""
    from click.testing import CliRunner

    from tracescore.cli import main

    with built(spec) as (db, view):
        res = CliRunner().invoke(main, ["export", "--db", db, "--format", "jsonl",
                                        "--no-contexts"])
    assert res.exit_code == 0, res.output
    rows = [json.loads(line) for line in res.stdout.splitlines() if line.strip()]
    got = {(r["record_id"], r["score_name"]): (r["score_value"], r["score_label"],
                                               r["score_status"])
           for r in rows if r["score_name"] is not None}
    want = {(s["record_id"], s["name"]): (s["value"], s["label"], s["status"])
            for s in view.rows["scores"]}
    assert got == want
    assert {r["record_id"] for r in rows} == {r["record_id"] for r in view.rows["records"]}


def test_export_carries_segments():
    """Each exported row says which release, environment, model, judge model and declared
    segment key values its record and score belong to."""
    from click.testing import CliRunner

    from tracescore.cli import main

    spec = Spec(tuple(Rec(t=60.0 * i, release=f"v{1 + i % 2}", environment="canary",
                          route="b", model="m2", judge_model="judge-b",
                          scores=((GROUNDED, 1.0),)) for i in range(4)))
    with built(spec) as (db, _):
        res = CliRunner().invoke(main, ["export", "--db", db, "--format", "jsonl",
                                        "--no-contexts"])
    rows = [json.loads(line) for line in res.stdout.splitlines() if line.strip()]
    assert rows
    for r in rows:
        flat = json.dumps(r)
        assert r.get("release") in ("v1", "v2"), sorted(r)
        assert r.get("environment") == "canary"
        assert "judge-b" in flat and '"b"' in flat and "route" in flat
