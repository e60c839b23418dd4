"""Assertions shared by the oracle tests: one printed summary against the raw rows."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from .build import GROUNDED
from .expect import Side, t_interval, wilson

TOL = 1e-9


def approx(x: float | None) -> Any:
    return None if x is None else pytest.approx(x, rel=1e-9, abs=1e-9)


def assert_interval_holds(est: dict[str, Any], value_key: str = "value") -> None:
    """The interval contains its own point estimate."""
    v, lo, hi = est.get(value_key), est.get("lo"), est.get("hi")
    if v is None or lo is None or hi is None:
        return
    assert lo - TOL <= v <= hi + TOL, f"{value_key} {v} outside its interval [{lo}, {hi}]"


def assert_metric(got: dict[str, Any], want: Side, name: str, *, check_yes: bool = True,
                  where: str = "") -> None:
    """A report's MetricSummary JSON (``report`` / ``report --by``) against the raw rows."""
    ctx = f"{where}{name}"
    assert got["count"] == want.n, ctx
    assert got["errors"] == want.errors, ctx
    assert got["mean"] == approx(want.mean), ctx
    assert got["labelled"] == want.labelled, ctx
    if want.labelled and want.n:
        assert got["fail_rate"] == approx(want.failed / want.n), ctx
    jobs = want.n + want.errors
    assert got["error_rate"] == approx(want.errors / jobs if jobs else None), ctx
    if got["binary"]:
        assert name == GROUNDED, ctx
        if check_yes:
            assert_interval_holds(got, "mean")
            assert got["yes"] == want.yes, ctx
            if want.n:
                assert got["rate"] == approx(want.yes / want.n), ctx
                assert (got["lo"], got["hi"]) == tuple(map(approx, wilson(want.yes, want.n))), \
                    ctx
        return
    assert_interval_holds(got, "mean")
    # percentiles from the rollups' 100 bins over [0, 1]: within half a bin of the raw values'
    for q in (10, 50, 90):
        p = got[f"p{q}"]
        if p is not None:
            assert want.n, ctx
            assert abs(p - float(np.percentile(want.values, q))) <= 0.005 + 1e-9, (ctx, q)
    if want.n >= 2 and not want.constant:
        assert (got["lo"], got["hi"]) == tuple(map(approx, t_interval(want.values))), ctx
    elif want.n < 2:
        assert got["lo"] is None and got["hi"] is None, ctx
