"""Chart primitives shared by the report's and the trend's charts: round scales and their
gridline labels, time labels, runs of consecutive buckets (a gap breaks a line) and the
interval bands drawn over them.

Numbers in, SVG path text or plain strings out; no user text, no connection, no queries.
"""

from __future__ import annotations

import datetime as _dt
import math
from collections.abc import Iterable, Sequence
from typing import Any


def _fmt_axis(v: float) -> str:
    return f"{v:.2f}".rstrip("0").rstrip(".") if abs(v) < 1000 else f"{v:,.0f}"


def _nice_step(top: int, ticks: int = 3) -> int:
    """A 1/2/5×10^k count step giving at most ``ticks`` gridlines up to ``top``."""
    step = 1
    while True:
        for m in (1, 2, 5):
            if step * m * ticks >= top:
                return step * m
        step *= 10


def _nice_up(x: float, mantissas: tuple[float, ...] = (1, 2, 2.5, 5)) -> float:
    """The smallest 1/2/2.5/5×10^k (or other ``mantissas``) at or above ``x`` (> 0)."""
    k = 10.0 ** math.floor(math.log10(x))
    for m in (*mantissas, 10):
        if m * k >= x * (1 - 1e-12):
            return m * k
    return 10 * k


def _zoom_range(values: Iterable[float | None]) -> tuple[float, float, float]:
    """(lo, hi, step) around the values and their intervals, on round gridlines: a trend is
    read for its changes, so its scale follows the data (kept within [0, 1] for scores
    there; at least 0.1 high, so noise is not blown up into a cliff)."""
    vals = [v for v in values if v is not None and math.isfinite(v)]
    if not vals:
        return 0.0, 1.0, 0.25
    lo, hi = min(vals), max(vals)
    unit = lo >= -1e-9 and hi <= 1 + 1e-9
    span = max(hi - lo, 0.1 if unit else max(abs(hi), abs(lo)) * 0.1 or 1.0)
    mid = (lo + hi) / 2
    lo, hi = min(lo, mid - span / 2), max(hi, mid + span / 2)
    if unit and lo < 0:
        lo, hi = 0.0, hi - lo
    elif unit and hi > 1:
        lo, hi = lo - (hi - 1), 1.0
    step = _nice_up(span / 4, (1, 2, 5))  # gridlines at 0.05, not 0.025: short labels
    lo = math.floor(round((lo - span * 0.04) / step, 9)) * step
    hi = math.ceil(round((hi + span * 0.04) / step, 9)) * step
    if unit:
        lo, hi = max(0.0, lo), min(1.0, hi)
    return lo, hi, step


def _tick(v: float, step: float, rate: bool = False) -> str:
    """A gridline's label with the decimals its step needs (0.875, not 0.88)."""
    if rate:
        v, step = 100 * v, 100 * step
    places = 0
    while places < 6 and abs(step * 10 ** places - round(step * 10 ** places)) > 1e-9:
        places += 1
    text = f"{v:.{places}f}" if abs(v) < 1000 else f"{v:,.{places}f}"
    return text + ("%" if rate else "")


def _y_range(values: Iterable[float]) -> tuple[float, float]:
    """[0, 1] for scores in [0, 1] (a fixed scale reads the same on every chart); else from 0
    (or the least value) to a round number above the greatest."""
    vals = [v for v in values if math.isfinite(v)]
    if not vals or (min(vals) >= -1e-9 and max(vals) <= 1 + 1e-9):
        return 0.0, 1.0
    lo, hi = min(0.0, min(vals)), max(vals)
    if hi <= lo:
        return lo, lo + 1.0
    top = _nice_up(hi - lo)
    return lo, lo + top


def _time_label(t: float, bucket_s: float) -> str:
    d = _dt.datetime.fromtimestamp(t, _dt.timezone.utc)
    if bucket_s < 1:
        return d.strftime("%H:%M:%S.") + f"{d.microsecond // 1000:03d}"
    if bucket_s < 60:
        return d.strftime("%H:%M:%S")
    return d.strftime("%b %d" if bucket_s >= 86400 else "%b %d %H:%M")


def _runs(starts: Sequence[float], bucket_s: float) -> list[list[int]]:
    """Indexes of consecutive buckets: a gap (a bucket without scores) breaks a line."""
    runs: list[list[int]] = []
    for i, t in enumerate(starts):
        # (1.5 buckets: sub-second bucket starts carry float rounding)
        if runs and t - starts[runs[-1][-1]] <= 1.5 * bucket_s:
            runs[-1].append(i)
        else:
            runs.append([i])
    return runs


def _band_paths(xs: Sequence[float], los: Sequence[float | None],
                his: Sequence[float | None], runs: Sequence[Sequence[int]],
                y: Any) -> list[str]:
    """A shaded polygon per run of buckets that have an interval (upper edge left to right,
    lower edge back); a lone bucket's interval is a short vertical bar."""
    out = []
    for run in runs:
        seg: list[int] = []
        for i in [*run, -1]:
            if i >= 0 and los[i] is not None and his[i] is not None:
                seg.append(i)
                continue
            if len(seg) > 1:
                top = " ".join(f"{'M' if k == 0 else 'L'}{xs[j]:.1f},{y(his[j]):.1f}"
                               for k, j in enumerate(seg))
                bottom = " ".join(f"L{xs[j]:.1f},{y(los[j]):.1f}" for j in reversed(seg))
                out.append(f'<path class="band" d="{top} {bottom} Z" data-from="{seg[0]}" '
                           f'data-to="{seg[-1]}"/>')
            elif seg:
                j = seg[0]
                out.append(f'<line class="bandbar" x1="{xs[j]:.1f}" x2="{xs[j]:.1f}" '
                           f'y1="{y(his[j]):.1f}" y2="{y(los[j]):.1f}" data-from="{j}" '
                           f'data-to="{j}"/>')
            seg = []
    return out
