"""The issue's defects in ``compare``, ``check --compare`` and ``report``: each a named test
that reads the figures a user gets and holds them to the raw rows or to a stated property."""

from __future__ import annotations

from hypothesis import example, given
from hypothesis import strategies as st

from .build import BASE, GROUNDED, QUALITY, Rec, Spec
from .checks import approx
from .expect import side, welch, wilson
from .run import built, cli
from .strategies import specs


def _sides(cur: list[float], base: list[float]) -> Spec:
    """Release v1 (baseline) then v2 (current), one quality score per record."""
    recs = [Rec(t=30.0 * i, release="v1", scores=((QUALITY, v),)) for i, v in enumerate(base)]
    recs += [Rec(t=3600.0 + 30.0 * i, release="v2", scores=((QUALITY, v),))
             for i, v in enumerate(cur)]
    return Spec(tuple(recs))


@given(n=st.integers(30, 60), c=st.sampled_from([1.0, 0.8]), dip=st.sampled_from([0.2, 0.6]))
@example(n=40, c=1.0, dip=0.2)
def test_constant_side_is_not_regressed(n, c, dip):
    """n × c against (n − 1) × c plus one lower value: Welch's p is far above 0.05 (one
    value's difference), so neither ``compare`` nor the ``check --compare`` gate may say
    REGRESSED."""
    base = [c] * n
    cur = [c] * (n - 1) + [dip]
    p_welch = welch(cur, base)[0]
    assert p_welch > 0.05
    with built(_sides(cur, base)) as (db, _):
        c_json, _ = cli("compare", "--db", db)
        gate, code = cli("check", "--db", db, "--compare", "release=v2:v1", ok=(0, 1))
    row = c_json["scores"][QUALITY]
    assert row["verdict"] not in ("regressed", "improved"), row
    assert row["difference"]["p_value"] > 0.05, row
    assert code == 0 and gate["exit"] == 0


@given(n=st.integers(2, 60), c=st.sampled_from([0.0, 0.5, 1.0]))
@example(n=40, c=1.0)
def test_constant_side_interval_is_not_zero_width(n, c):
    """All-equal values: ``report``'s interval and each ``compare`` side's interval have
    width (a 95 % interval of zero width claims certainty that n values cannot give)."""
    other = [0.5 + 0.01 * (i % 7) for i in range(n)]
    with built(_sides([c] * n, other)) as (db, _):
        rep, _ = cli("report", "--db", db, "--where", "release=v2", "--worst", 0)
        cmp_, _ = cli("compare", "--db", db)
    m = rep["metrics"][QUALITY]
    assert m["lo"] is not None and m["lo"] < m["hi"], m
    cur = cmp_["scores"][QUALITY]["current"]
    assert cur["lo"] < cur["hi"], cur


def _all_yes_two_judges() -> Spec:
    """80 verdicts, all "yes", 40 by each of two judges (the issue's case)."""
    return Spec(tuple(Rec(t=45.0 * i, judge_model=f"judge-{'ab'[i % 2]}",
                          release=f"v{1 + i // 40}", scores=((GROUNDED, 1.0),))
                      for i in range(80)))


@given(spec=specs(min_records=10, multi=True))
@example(spec=_all_yes_two_judges())
def test_yes_counts_in_split_by_judge_model(spec):
    """``report --by judge_model`` and ``compare --by judge_model``: each judge's yes count,
    rate and Wilson interval are those of its raw rows."""
    with built(spec) as (db, view):
        rep, _ = cli("report", "--db", db, "--by", "judge_model", "--worst", 0)
        judges = sorted({s["judge_model"] for s in view.rows["scores"]} - {""})
        cmp_ = None
        if len(judges) >= 2:
            cmp_, _ = cli("compare", "--db", db, "--by", "judge_model", "--current",
                          judges[1], "--baseline", judges[0])
    rows = view.scores()
    for g in rep["groups"]:
        if GROUNDED not in g["metrics"]:
            continue
        s = side([r for r in rows if r["judge_model"] == g["value"]], GROUNDED)
        m = g["metrics"][GROUNDED]
        assert (m["count"], m["yes"]) == (s.n, s.yes), g["value"]
        assert (m["lo"], m["hi"]) == tuple(map(approx, wilson(s.yes, s.n)))
    if cmp_ is not None and GROUNDED in cmp_["scores"]:
        row = cmp_["scores"][GROUNDED]
        for key, judge in (("current", judges[1]), ("baseline", judges[0])):
            s = side([r for r in rows if r["judge_model"] == judge], GROUNDED)
            if s.n:
                assert row[key]["value"] == approx(s.yes / s.n), key


@given(minute=st.sampled_from([10, 20, 40]))
@example(minute=10)
def test_compare_by_judge_model_sees_the_cut_hour(minute):
    """Two judges' scores only in the last hour, which ``--since 1h`` cuts: ``compare --by
    judge_model`` compares them with the n that ``report --since 1h --by judge_model``
    prints."""
    from .build import HOUR

    recs = tuple(Rec(t=4 * HOUR + 60.0 * minute + 20.0 * i, judge_model=f"judge-{'ab'[i % 2]}",
                     scores=((GROUNDED, float(i % 3 > 0)),)) for i in range(80))
    now = BASE + 5 * HOUR + 600
    with built(Spec(recs)) as (db, view):
        rep, _ = cli("report", "--db", db, "--since", "1h", "--by", "judge_model",
                     "--worst", 0, now=now)
        c, code = cli("compare", "--db", db, "--since", "1h", "--by", "judge_model",
                      "--current", "judge-b", "--baseline", "judge-a", now=now, ok=(0, 2))
    n = {g["value"]: g["metrics"][GROUNDED]["count"] for g in rep["groups"]
         if GROUNDED in g["metrics"]}
    assert n == {"judge-a": 40, "judge-b": 40}
    assert code == 0
    row = c["scores"][GROUNDED]
    assert (row["current"]["n"], row["baseline"]["n"]) == (n["judge-b"], n["judge-a"])
