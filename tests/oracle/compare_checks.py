"""One ``compare`` JSON object (``compare --json`` or a ``check --compare`` gate) against the
raw rows of its two sides."""

from __future__ import annotations

from typing import Any

from .build import GROUNDED, METRICS, TONE
from .checks import approx, assert_interval_holds
from .expect import (
    Side,
    View,
    holm,
    hour_of,
    newcombe,
    rate_p,
    side,
    t_interval,
    verdict,
    welch,
    wilson,
)

HIGHER = {"quality": True, GROUNDED: True, TONE: False, "all scores": False}


def split_rows(view: View, by: str, cur: str, base: str, since: float | None
               ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], Any, Any]:
    col = by.removeprefix("metadata.")

    def is_(v: str) -> Any:
        return lambda r: (r.get(col) or None) == v

    return (view.scores(since, where=is_(cur)), view.scores(since, where=is_(base)),
            is_(cur), is_(base))


def assert_comparison(c: dict[str, Any], view: View, by: str, cur: str, base: str,
                      since: float | None, *, check_rates: bool = True) -> None:
    rows_c, rows_b, in_c, in_b = split_rows(view, by, cur, base, since)
    assert (c["current"], c["baseline"]) == (f"{by}={cur}", f"{by}={base}")
    if by != "judge_model":  # records have no judge model: both sides count every record
        assert c["current_records"] == len(view.records(since, where=in_c))
        assert c["baseline_records"] == len(view.records(since, where=in_b))
    assert_comparison_sides(c, rows_c, rows_b, check_rates=check_rates)
    _assert_pipeline_rows(c, view, rows_c, rows_b, in_c, in_b, since)


def assert_comparison_sides(c: dict[str, Any], rows_c: list[dict[str, Any]],
                            rows_b: list[dict[str, Any]], *, check_rates: bool = True) -> None:
    """Every score row of ``c`` against the raw score rows of each side; Holm's adjustment
    and the verdicts from the printed numbers."""
    names = {s["name"] for s in rows_c + rows_b}
    rows = c["scores"]
    assert {k for k in rows if "(" not in k} == names
    for name in METRICS:
        if name not in names:
            continue
        r = rows[name]
        a, b = side(rows_c, name), side(rows_b, name)
        assert (r["current"]["n"], r["baseline"]["n"]) == (a.n, b.n), name
        d = r["difference"]
        if name == GROUNDED:
            assert r["kind"] == "rate"
            if not check_rates:
                continue
            _assert_rate_row(r, a, b)
        else:
            assert r["kind"] == "mean"
            _assert_mean_row(r, a, b)
        if a.n and b.n:
            assert d["estimate"] == approx(a.mean - b.mean), name
        assert_interval_holds(d, "estimate")
    # Holm across every row with a p-value, and the verdict from the printed numbers
    keyed = [(k, r) for k, r in rows.items() if r["difference"]["p_value"] is not None]
    for (k, r), p in zip(keyed, holm([r["difference"]["p_value"] for _, r in keyed])):
        assert r["p_adjusted"] == approx(p), k
    for k, r in rows.items():
        assert r["verdict"] == verdict(r["difference"], r["current"]["n"], r["baseline"]["n"],
                                       r["p_adjusted"], HIGHER[r["name"]],
                                       min_n=c["min_n"], min_effect=c["min_effect"],
                                       alpha=c["alpha"]), k
    assert sorted(c["regressed"]) == sorted(r["name"] for r in rows.values()
                                            if r["verdict"] == "regressed")


def _assert_rate_row(r: dict[str, Any], a: Side, b: Side) -> None:
    for est, s in ((r["current"], a), (r["baseline"], b)):
        assert est["value"] == approx(s.yes / s.n if s.n else None)
        if s.n:
            assert (est["lo"], est["hi"]) == tuple(map(approx, wilson(s.yes, s.n)))
    d = r["difference"]
    if a.n and b.n:
        assert (d["lo"], d["hi"]) == tuple(map(approx, newcombe(a.yes, a.n, b.yes, b.n)))
        p, how = rate_p(a.yes, a.n, b.yes, b.n)
        assert d["p_value"] == approx(p)
        assert d["method"] == f"newcombe+{how}"


def _assert_mean_row(r: dict[str, Any], a: Side, b: Side) -> None:
    for est, s in ((r["current"], a), (r["baseline"], b)):
        assert est["value"] == approx(s.mean)
        assert_interval_holds(est)
        if s.n >= 2 and not s.constant:
            assert (est["lo"], est["hi"]) == tuple(map(approx, t_interval(s.values)))
    d = r["difference"]
    if d["method"] == "welch" and a.n >= 2 and b.n >= 2 and not (a.constant or b.constant):
        p, lo, hi = welch(a.values, b.values)
        assert (d["p_value"], d["lo"], d["hi"]) == (approx(p), approx(lo), approx(hi))
    if d["p_value"] is not None:
        assert 0.0 <= d["p_value"] <= 1.0


def _assert_pipeline_rows(c: dict[str, Any], view: View, rows_c: list[dict[str, Any]],
                          rows_b: list[dict[str, Any]], in_c: Any, in_b: Any,
                          since: float | None) -> None:
    def errors(rows: list[dict[str, Any]]) -> tuple[int, int]:
        return (sum(1 for s in rows if s["status"] == "error"),
                sum(1 for s in rows if s["status"] in ("ok", "error")))

    (kc, nc), (kb, nb) = errors(rows_c), errors(rows_b)
    row = c["scores"].get("all scores (error rate)")
    if (kc or kb) and nc and nb:
        assert row is not None
        assert (row["current"]["n"], row["baseline"]["n"]) == (nc, nb)
        assert row["current"]["value"] == approx(kc / nc)
        assert row["baseline"]["value"] == approx(kb / nb)
        d = row["difference"]
        assert (d["lo"], d["hi"]) == tuple(map(approx, newcombe(kc, nc, kb, nb)))
        assert d["p_value"] == approx(rate_p(kc, nc, kb, nb)[0])
    else:
        assert row is None
    if c["by"] == "judge_model":
        return

    def skips(where: Any) -> int:
        return sum(1 for j in view.rows["skips"]
                   if (since is None or hour_of(j["created_at"]) >= since) and where(j))

    sc, sb = skips(in_c), skips(in_b)
    row = c["scores"].get("all scores (skip rate)")
    if (sc or sb) and nc + sc and nb + sb:
        assert row is not None
        assert (row["current"]["n"], row["baseline"]["n"]) == (nc + sc, nb + sb)
        assert row["current"]["value"] == approx(sc / (nc + sc))
    else:
        assert row is None
