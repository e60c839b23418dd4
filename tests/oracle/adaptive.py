"""The oracle of the adaptive judge's estimates (issue 33): a database of judge decisions
written through the store's real write path, and the active estimate recomputed from its raw
rows with numpy's least squares — nothing here calls tracescore's statistics or readers.

Each drawn decision has a time (seconds after :data:`~.build.BASE`), a release, a proxy, the
inclusion probability π (0: the day's budget was spent), whether the record was selected, and
what came of it: an ok score, a judge error, nothing yet (pending), and for some unselected
records an ok score anyway (not a judged term) or negative feedback that reopens the decision
(π = 1) and is then judged. The estimate (Zrnic & Candès 2024; docs/judge_budget.md): over the
decisions kept (π > 0, not selected-without-an-ok-score), μ̂ = mean of g + ξ(y − g)/π with g
the (1 − π)/π²-weighted least-squares line of y on f over the judged (1/π where every π is 1;
a flat line at their weighted mean when those of positive weight have one proxy), V̂ = Σ_judged
(1 − π)/π²·(y − g)²/N², a normal interval; an exact fit has no correction and no width.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
from hypothesis import strategies as st
from scipy import stats as sps

from .build import BASE, HOUR, store_clock

METRIC = "faith"


@dataclass(frozen=True)
class Dec:
    t: float
    release: str
    proxy: float
    pi: float
    selected: bool
    #: "ok" (with y), "error", "pending", "unselected_ok" (an ok score of an unselected
    #: record), "reopened" (negative feedback: judged with π = 1, score y)
    outcome: str
    y: float


@st.composite
def decisions(draw: Any) -> tuple[Dec, ...]:
    n = draw(st.integers(0, 40))
    vals = st.sampled_from([0.0, 0.1, 0.25, 0.5, 0.8, 1.0]) | st.floats(0, 1).map(
        lambda x: round(x, 3))
    out = []
    for _ in range(n):
        pi = draw(st.sampled_from([0.0, 0.05, 0.2, 0.5, 0.9, 1.0]))
        sel = pi > 0 and draw(st.booleans())
        if sel:
            outcome = draw(st.sampled_from(["ok", "ok", "ok", "error", "pending"]))
        else:
            outcome = draw(st.sampled_from(["none", "none", "unselected_ok"]
                                           + (["reopened"] if pi > 0 else [])))
        out.append(Dec(draw(st.floats(0, 8 * HOUR - 1).map(lambda x: round(x, 1))),
                       draw(st.sampled_from(["v1", "v2"])), draw(vals), pi, sel, outcome,
                       draw(vals)))
    return tuple(out)


@contextlib.contextmanager
def built(decs: tuple[Dec, ...]) -> Iterator[str]:
    """``decs`` written to a fresh SQLite file through the store (write_batch, decide,
    lease/complete, feedback and the reopened decision); its path."""
    from tracescore.record import RagRecord
    from tracescore.sampling import Decision
    from tracescore.score import Score
    from tracescore.store import NewJob, open_store
    from tracescore.store.judge_budget import decide
    from tracescore.store.segments import SegmentSpec

    shm = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    with tempfile.TemporaryDirectory(prefix="oracle-", dir=shm) as d, \
            store_clock(BASE) as clock:
        path = os.path.join(d, "ts.db")
        store = open_store(path)
        try:
            for i, x in enumerate(decs):
                clock.t = BASE + x.t
                rec = RagRecord(trace_id=f"{i + 1:032x}", span_id=f"{i + 1:016x}",
                                query=f"q{i}", answer="a")
                store.write_batch([(rec, Decision(0.1, (METRIC,)))],
                                  [NewJob(rec.record_id, METRIC, "1")], None,
                                  segments=SegmentSpec(release=x.release))
                decide(store, METRIC, rec.record_id, x.proxy, 0, BASE + x.t, 1e9,
                       lambda _s, _n, _f, x=x: (x.pi, x.selected))
                [job] = store.lease_jobs("w", 1, 60.0, [METRIC])
                if x.outcome in ("ok", "unselected_ok"):
                    store.complete_job(job, "w", [Score(METRIC, x.y)], "none")
                elif x.outcome == "error":
                    store.complete_job(job, "w", [Score.failed(METRIC, "judge down")], "none")
                elif x.outcome in ("none", "reopened"):
                    store.complete_job(job, "w", [Score.skipped(METRIC, "not judged")], "none")
                if x.outcome == "reopened":
                    clock.t = BASE + x.t + 30
                    store.add_feedback(rec.trace_id, "thumbs", 0.0, None, None, clock.t)
                    decide(store, METRIC, rec.record_id, x.proxy, 0, clock.t, 1e9,
                           lambda _s, _n, _f: (0.5, False), trace_id=rec.trace_id)
                    store.write_batch([], [NewJob(rec.record_id, METRIC, "2")])
                    [job] = store.lease_jobs("w", 1, 60.0, [METRIC])
                    store.complete_job(job, "w", [Score(METRIC, x.y)], "none")
        finally:
            store.close()
        yield path


def raw(path: str, since: float | None, release: str | None) -> list[dict[str, Any]]:
    """The window's decisions joined to their record's release and their ok score."""
    conn = sqlite3.connect(path)
    conn.row_factory = sqlite3.Row
    try:
        got = [dict(r) for r in conn.execute(
            "SELECT d.created_at, d.proxy, d.pi, d.selected, g.release, s.value, s.status"
            " FROM judge_decisions d JOIN records r ON r.record_id = d.record_id"
            " JOIN segments g ON g.seg_id = r.seg_id"
            " LEFT JOIN scores s ON s.record_id = d.record_id AND s.name = ?", (METRIC,))]
    finally:
        conn.close()
    return [r for r in got if (since is None or r["created_at"] >= since)
            and (release is None or r["release"] == release)]


def expected(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The report's ``judge_budget`` figures of these decisions."""
    ok = [r["selected"] and r["status"] == "ok" and r["value"] is not None for r in rows]
    unrep = sum(1 for r in rows if r["pi"] <= 0)
    missing = sum(1 for r, k in zip(rows, ok) if r["selected"] and not k)
    keep = [r for r, k in zip(rows, ok) if r["pi"] > 0 and not (r["selected"] and not k)]
    f = np.array([r["proxy"] for r in keep], dtype=float)
    pi = np.array([r["pi"] for r in keep], dtype=float)
    sel = np.array([bool(r["selected"]) for r in keep])
    y = np.array([r["value"] if s else 0.0 for r, s in zip(keep, sel)], dtype=float)
    out: dict[str, Any] = {"decided": len(rows), "not_represented": unrep,
                           "missing": missing, "judged": int(sel.sum()), "n_proxied": len(keep)}
    if sel.sum() < 2:
        out["value"] = None
        return out
    fj, pj, yj = f[sel], pi[sel], y[sel]
    v = (1 - pj) / pj ** 2
    w = v if np.any(v > 0) else 1 / pj
    if np.ptp(fj[w > 0]) == 0:  # one proxy value among the weighted: a flat line
        a, b = float(np.sum(w * yj) / np.sum(w)), 0.0
    else:
        sw = np.sqrt(w)
        (a, b), *_ = np.linalg.lstsq(np.column_stack([sw, sw * fj]), sw * yj, rcond=None)
    g = a + b * f
    r = np.where(sel, y - g, 0.0)
    if np.max(np.abs(r)) <= 1e-7:
        r[:] = 0.0
    mean = float(np.mean(g + np.where(sel, r / pi, 0.0)))
    se = float(np.sqrt(np.sum(np.where(sel, (1 - pi) / pi ** 2 * r ** 2, 0.0)))) / len(keep)
    z = float(sps.norm.ppf(0.975))
    out.update(value=mean, lo=mean - z * se, hi=mean + z * se,
               plain=float(np.mean(yj)))
    return out
