"""Hypothesis strategies for oracle databases: small, and awkward on purpose.

Each drawn :class:`~.build.Spec` mixes the cases that broke readers before: a continuous score
that is constant, constant but for one value, or made of ties; a yes/no score that is all
yes, all no or mixed; several score names (one lower-is-better, with errors and skipped
jobs); several releases, environments, models, judge models and values of a declared
metadata key; records forced into scoring; re-scored jobs (a metric version bump, possibly
in a later hour); a replayed batch; and a prune that folds the oldest hours into the
rollups. Times are seconds after :data:`~.build.BASE` over a few hours, so windows cut
hours wherever the test puts their edge.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from .build import GROUNDED, HOUR, QUALITY, TONE, Rec, Spec

HOURS = 5
#: how the continuous score "quality" is distributed in one database
QUALITY_SHAPES = ("constant", "one_off", "ties", "spread")
#: how the yes/no score "grounded" is
GROUNDED_SHAPES = ("all_yes", "all_no", "mixed")

_values = st.sampled_from([0.0, 0.2, 0.5, 0.73, 1.0])


@st.composite
def quality_values(draw: Any, n: int, shape: str | None = None) -> list[float]:
    shape = shape or draw(st.sampled_from(QUALITY_SHAPES))
    if n == 0:
        return []
    if shape == "constant":
        return [draw(_values)] * n
    if shape == "one_off":
        c, other = draw(_values), draw(_values)
        out = [c] * n
        out[draw(st.integers(0, n - 1))] = other
        return out
    if shape == "ties":
        pool = draw(st.lists(_values, min_size=1, max_size=3, unique=True))
        return [draw(st.sampled_from(pool)) for _ in range(n)]
    return [round(draw(st.floats(0.0, 1.0)), 3) for _ in range(n)]


@st.composite
def grounded_values(draw: Any, n: int) -> list[float]:
    shape = draw(st.sampled_from(GROUNDED_SHAPES))
    if shape == "all_yes":
        return [1.0] * n
    if shape == "all_no":
        return [0.0] * n
    return [float(draw(st.booleans())) for _ in range(n)]


@st.composite
def specs(draw: Any, *, min_records: int = 0, max_records: int = 60, releases: int = 3,
          prune: bool = True, rescore: bool = True, multi: bool = False) -> Spec:
    """``multi``: at least two releases and two values of every other dimension (for
    comparisons; a record's values are still drawn, so a side may hold few of them)."""
    n = draw(st.integers(min_records, max_records))
    # times: whole seconds plus a fraction, some records sharing a second (ties in time)
    ts = sorted(draw(st.lists(st.integers(0, HOURS * int(HOUR) - 1), min_size=n, max_size=n)))
    ts = [t + draw(st.sampled_from([0.0, 0.25, 0.5])) for t in ts]
    n_rel = draw(st.integers(2 if multi else 1, releases))
    by_time = draw(st.booleans())  # releases in time order (deploys), or interleaved

    def values(*vs: str) -> tuple[str, ...]:
        return vs if multi else draw(st.sampled_from([vs[:1], vs]))

    envs = values("prod", "canary")
    routes = values("a", "b")
    models = values("m1", "m2")
    judges = values("judge-a", "judge-b")
    q = draw(quality_values(n))
    g = draw(grounded_values(n))
    p_error = draw(st.sampled_from([0.0, 0.0, 0.1, 0.3]))
    p_skip = draw(st.sampled_from([0.0, 0.0, 0.2]))
    recs = []
    for i, t in enumerate(ts):
        rel = (min(n_rel - 1, i * n_rel // max(n, 1)) if by_time
               else draw(st.integers(0, n_rel - 1)))
        tone: Any = round(draw(st.floats(0.0, 1.0)), 2)
        roll = draw(st.floats(0.0, 1.0))
        if roll < p_error:
            tone = "error"
        elif roll < p_error + p_skip:
            tone = "skip"
        scores: tuple[tuple[str, Any], ...] = ((QUALITY, q[i]), (GROUNDED, g[i]), (TONE, tone))
        if draw(st.integers(0, 9)) == 0:  # now and then a record without its judge score
            scores = ((QUALITY, q[i]), (TONE, tone))
        recs.append(Rec(
            t=t, release=f"v{rel + 1}", environment=draw(st.sampled_from(envs)),
            route=draw(st.sampled_from(routes)), model=draw(st.sampled_from(models)),
            judge_model=draw(st.sampled_from(judges)),
            forced=draw(st.sampled_from([None, None, None, "feedback"])),
            u=draw(st.floats(0.0, 0.999)), scores=scores,
            error=draw(st.integers(0, 7)) == 0))
    res: list[tuple[int, float, float]] = []
    if rescore and n:
        for _ in range(draw(st.integers(0, 3))):
            i = draw(st.integers(0, n - 1))
            later = ts[i] + draw(st.sampled_from([0.0, 1.0, 1800.0, 5400.0]))
            res.append((i, later, draw(_values)))
    cut = None
    if prune and draw(st.booleans()):
        cut = draw(st.sampled_from([HOUR, 2 * HOUR, 1.5 * HOUR]))
    replay = draw(st.integers(0, min(n, 3)))
    return Spec(tuple(recs), tuple(res), cut, replay)


#: a window's start: an hour boundary or inside an hour, relative to BASE
since_offsets = st.one_of(st.none(), st.sampled_from([0.0, HOUR, 1800.0, 2 * HOUR + 1,
                                                      3 * HOUR - 0.5, 4 * HOUR + 2400]))
