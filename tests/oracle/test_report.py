"""``tracescore report --json`` and ``report --by DIM --json`` against the raw rows."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from .build import BASE, GROUNDED, METRICS
from .checks import assert_metric
from .expect import hour_of, side
from .run import built, cli, since_arg
from .strategies import since_offsets, specs

NOW = BASE + 10 * 3600


def _expected_skips(view, metric, since, where=None):
    return sum(1 for j in view.rows["skips"] if j["metric"] == metric
               and (since is None or hour_of(j["created_at"]) >= since)
               and (where is None or where(j)))


@given(spec=specs(), since_off=since_offsets)
def test_report_figures_match_the_raw_rows(spec, since_off):
    """Records, sampled, and per score: n, mean, errors, skips, fail rate, yes count and rate,
    the 95 % interval (Student t; Wilson for a yes/no rate) — windows cut mid-hour, pruned
    hours, re-scored and replayed jobs included."""
    since = None if since_off is None else BASE + since_off
    with built(spec) as (db, view):
        rep, _ = cli("report", "--db", db, "--since", since_arg(NOW, since), "--worst", 0)
    recs = view.records(since)
    assert rep["records"] == len(recs)
    assert rep["sampled"] == sum(1 for r in recs if r["sampled"])
    rows = view.scores(since)
    assert rep["scores"] == sum(1 for s in rows if s["status"] in ("ok", "error"))
    names = {s["name"] for s in rows}
    assert names <= set(rep["metrics"])
    for name in METRICS:
        if name in names:
            assert_metric(rep["metrics"][name], side(rows, name), name)
            assert rep["metrics"][name]["skipped"] == _expected_skips(view, name, since)
    for name in set(rep["metrics"]) - names:  # a row only for skipped jobs: no scores in it
        m = rep["metrics"][name]
        assert (m["count"], m["errors"]) == (0, 0), name
        assert m["skipped"] == _expected_skips(view, name, since) > 0, name


DIMS = ("release", "environment", "model", "metadata.route", "judge_model")


@given(spec=specs(), by=st.sampled_from(DIMS), since_off=since_offsets)
def test_report_by_splits_match_the_raw_rows(spec, by, since_off):
    """Each group of ``report --by``: records, and per score n, mean, errors, interval, yes
    count (record dimensions; judge_model's yes counts: see the defect tests); the groups'
    counts add up to the pooled report's."""
    since = None if since_off is None else BASE + since_off
    col = by.removeprefix("metadata.")
    with built(spec) as (db, view):
        rep, code = cli("report", "--db", db, "--since", since_arg(NOW, since), "--worst", 0,
                        "--by", by, ok=(0, 2))
    if not spec.recs and by.startswith("metadata."):
        assert code == 2  # no record has shown the key yet: an unknown dimension, said so
        return
    assert code == 0
    groups = {g["value"]: g for g in rep["groups"]}
    rows = view.scores(since)
    values = {s[col] for s in rows} | ({r[col] for r in view.records(since)}
                                       if by != "judge_model" else set())
    values.discard("")
    values.discard(None)
    assert set(groups) - {None} == values
    for value, g in groups.items():
        if by != "judge_model":
            assert g["records"] == sum(1 for r in view.records(since) if r[col] == value)
        mine = [s for s in rows if (s[col] or None) == value]
        for name in METRICS:
            if any(s["name"] == name for s in mine):
                assert_metric(g["metrics"][name], side(mine, name), name,
                              check_yes=by != "judge_model", where=f"{by}={value}: ")
    for name, pooled in rep["metrics"].items():
        parts = [g["metrics"][name] for g in groups.values() if name in g["metrics"]]
        assert sum(p["count"] for p in parts) == pooled["count"]
        assert sum(p["errors"] for p in parts) == pooled["errors"]
        if pooled["binary"] and by != "judge_model" and name == GROUNDED:
            assert sum(p["yes"] for p in parts) == pooled["yes"]
    if by != "judge_model":
        assert sum(g["records"] for g in groups.values()) == rep["records"]
