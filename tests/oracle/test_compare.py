"""``tracescore compare --json`` (by release, by any dimension) and ``check --compare`` gates
against the raw rows."""

from __future__ import annotations

from hypothesis import assume, given
from hypothesis import strategies as st

from .build import BASE
from .compare_checks import assert_comparison
from .run import built, cli, since_arg
from .strategies import since_offsets, specs

NOW = BASE + 10 * 3600


def newest_two_releases(view):
    first: dict[str, float] = {}
    for r in view.rows["records"]:
        first[r["release"]] = min(first.get(r["release"], r["created_at"]), r["created_at"])
    order = sorted(first, key=lambda v: (first[v], v))
    return order[-1] if order else None, order[-2] if len(order) > 1 else None


@given(spec=specs(min_records=4, max_records=80, multi=True), since_off=since_offsets)
def test_compare_releases_matches_the_raw_rows(spec, since_off):
    """The default comparison (the two newest releases): each side's n, mean or rate and its
    interval, the difference with its interval and p (Welch / Newcombe with the score test or
    Fisher), Holm's adjusted p, the verdict, the error and skip rate rows."""
    since = None if since_off is None else BASE + since_off
    with built(spec) as (db, view):
        cur, base = newest_two_releases(view)
        c, code = cli("compare", "--db", db, "--since", since_arg(NOW, since), ok=(0, 2))
        if base is None:
            assert code == 2
            return
        assume(code == 0)  # a release without records in the window: a clear error
        assert_comparison(c, view, "release", cur, base, since)


@given(spec=specs(min_records=4, max_records=80, multi=True),
       by=st.sampled_from(["environment", "model", "metadata.route", "judge_model"]))
def test_compare_by_any_dimension_matches_the_raw_rows(spec, by):
    """``compare --by DIM --current X --baseline Y``: the same figures per side (the yes/no
    rates of a judge_model split: see the defect tests)."""
    col = by.removeprefix("metadata.")
    with built(spec) as (db, view):
        values = sorted({s[col] for s in view.rows["scores"]} - {"", None})
        assume(len(values) >= 2)
        c, _ = cli("compare", "--db", db, "--by", by, "--current", values[1],
                   "--baseline", values[0])
        assert_comparison(c, view, by, values[1], values[0], None,
                          check_rates=by != "judge_model")


@given(spec=specs(min_records=4, max_records=80, multi=True))
def test_check_compare_gate_is_the_comparison_and_its_exit(spec):
    """``check --compare release=CUR:BASE``: the gate prints the same figures as ``compare``
    and exits 1 exactly when a score regressed."""
    with built(spec) as (db, view):
        cur, base = newest_two_releases(view)
        assume(base is not None)
        out, code = cli("check", "--db", db, "--compare", f"release={cur}:{base}", ok=(0, 1))
        (gate,) = out["gates"]
        assert_comparison(gate, view, "release", cur, base, None)
        assert code == (1 if gate["regressed"] else 0) == out["exit"]


@given(spec=specs(min_records=1, max_records=60),
       windows=st.sampled_from([(1800, 3600), (3600, 7200), (5400, 3 * 3600), (900, 600)]),
       now_off=st.sampled_from([4 * 3600, 4 * 3600 + 1234.5, 5 * 3600 + 60]))
def test_compare_time_windows_matches_the_raw_rows(spec, windows, now_off):
    """``compare --current D1 --baseline D2``: the last D1 against the D2 before it — both
    edges cut hours (pruned ones count whole when they start inside) — per score n, mean or
    rate, the difference and its interval, the verdicts."""
    from .compare_checks import assert_comparison_sides

    cw, bw = windows
    now = BASE + now_off
    with built(spec) as (db, view):
        c, _ = cli("compare", "--db", db, "--current", f"{cw}s", "--baseline", f"{bw}s",
                   now=now)
    assert c["current_window"] == [now - cw, now]
    assert c["baseline_window"] == [now - cw - bw, now - cw]
    assert_comparison_sides(c, view.scores(now - cw, now), view.scores(now - cw - bw, now - cw))
    assert c["current_records"] == len(view.records(now - cw, now))
    assert c["baseline_records"] == len(view.records(now - cw - bw, now - cw))
