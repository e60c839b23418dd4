"""``tracescore report --json``'s adaptive judge estimates (issue 33) against the raw rows:
the active estimate, its interval and its counts, over windows cut mid-hour and one release —
read by the report from the hourly sums, recomputed here from every decision row."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from .adaptive import METRIC, built, decisions, expected, raw
from .build import BASE, HOUR
from .run import cli, since_arg

NOW = BASE + 10 * HOUR


@given(decs=decisions(), since_off=st.none() | st.floats(0, 6 * HOUR).map(lambda x: round(x, 1)),
       release=st.none() | st.just("v1"))
def test_adaptive_estimates_match_the_raw_rows(decs, since_off, release):
    since = None if since_off is None else BASE + since_off
    with built(decs) as db:
        where = ["--where", f"release={release}"] if release else []
        rep, _ = cli("report", "--db", db, "--since", since_arg(NOW, since), "--worst", 0,
                     *where, now=NOW)
        want = expected(raw(db, since, release))
    got = (rep.get("judge_budget") or {}).get(METRIC)
    if got is None:  # the report lists score names it has scores of in the window
        assert METRIC not in rep["metrics"] or want["decided"] == 0
        return
    assert got["decided"] == want["decided"]
    assert got["not_represented_budget_spent"] == want["not_represented"]
    assert got["judged_without_score"] == want["missing"]
    assert got["judged"] == want["judged"]
    est = got["estimate"]
    assert est["n_judged"] == want["judged"] and est["n_proxied"] == want["n_proxied"]
    if want["value"] is None:
        assert est["value"] is None
        return
    for key in ("value", "lo", "hi"):
        assert est[key] == pytest.approx(want[key], rel=1e-9, abs=1e-12), key
    assert got["judged_records_plain_mean"]["value"] == pytest.approx(want["plain"], rel=1e-9)
