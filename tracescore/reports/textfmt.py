"""Text helpers shared by the human renderers (report, compare, check, show, calibrate).

Captured text (queries, answers, contexts, a judge's reasons) and names a user chose (metrics,
monitors, segments) reach the terminal through these renderers, so every one of them passes
its text through :func:`printable`: a control character there could retitle the terminal,
clear it, hide text or write the clipboard (OSC 52), and a bidi override reorder what is
read. JSON output needs none of this (JSON escapes control characters itself).
"""

from __future__ import annotations

import datetime as _dt
import functools
import re
import textwrap
from collections.abc import Sequence

__all__ = ["WIDTH", "clip", "num", "pct", "plural", "printable", "share", "table", "when",
           "wrap"]

WIDTH = 80

# C0 controls, DEL, C1 controls (a UTF-8 terminal may read U+009B as CSI), and the bidi
# embeddings, overrides and isolates (U+202A-202E, U+2066-2069: "Trojan Source").
_UNSAFE = r"\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069"


@functools.lru_cache(maxsize=8)
def _unsafe(keep: str) -> re.Pattern[str]:
    if not keep:
        return re.compile(f"[{_UNSAFE}]")
    return re.compile(f"(?![{re.escape(keep)}])[{_UNSAFE}]")


def _escape(m: re.Match[str]) -> str:
    code = ord(m.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def printable(text: str, keep: str = "") -> str:
    """``text`` safe to write to a terminal: each control character shown as a visible
    escape (ESC as ``\\x1b``, U+202E as ``\\u202e``), except those in ``keep`` (``"\\n"``
    where the layout has lines). Idempotent; a text without any is returned as is."""
    pattern = _unsafe(keep)
    return pattern.sub(_escape, text) if pattern.search(text) else text


def num(v: float | None, digits: int = 3) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def monitor_estimate(value: float | None, lo: float | None, hi: float | None,
                     digits: int = 3) -> str:
    """A monitor's value and interval: ``0.712 [0.690, 0.734]`` when the interval holds the
    value as printed. A monitor's interval is an anytime-valid confidence sequence centred on
    the window's λ-weighted mean, not on the plain mean it reports, so the two can part; then
    the interval is named for what it is: ``0.641; anytime interval [0.645, 0.746] (of the
    weighted mean)`` — never a mean printed outside its own interval."""
    if value is None:
        return ""
    text = f"{value:.{digits}f}"
    if lo is None or hi is None:
        return text
    shown_lo, shown_hi = f"{lo:.{digits}f}", f"{hi:.{digits}f}"
    if float(shown_lo) <= float(text) <= float(shown_hi):
        return f"{text} [{shown_lo}, {shown_hi}]"
    return f"{text}; anytime interval [{shown_lo}, {shown_hi}] (of the weighted mean)"


def pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def clip(text: str | None, width: int) -> str:
    """One line of at most ``width`` characters (whitespace folded, controls escaped)."""
    text = printable(" ".join((text or "").split()))
    return text if len(text) <= width else text[: max(0, width - 1)] + "…"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], align: str) -> list[str]:
    """Columns padded to their widest cell; ``align`` has one ``<``/``>`` per column. Cells
    are escaped (:func:`printable`) before they are measured, so columns stay aligned."""
    headers = [printable(h) for h in headers]
    rows = [[printable(c) for c in r] for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(f"{c:{a}{w}}" for c, a, w in zip(cells, align, widths)).rstrip()

    return [line(headers), line(["-" * w for w in widths]), *(line(r) for r in rows)]


def when(ts: float | None) -> str:
    if ts is None:
        return "-"
    return _dt.datetime.fromtimestamp(ts, _dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def share(part: int, whole: int) -> str:
    return f" ({100 * part / whole:.0f}%)" if whole else ""




def wrap(text: str, width: int = WIDTH, indent: str = "") -> list[str]:
    """``text`` wrapped to ``width`` (controls escaped first, so none is folded to a space
    unseen)."""
    return textwrap.wrap(printable(text), width, initial_indent=indent,
                         subsequent_indent=indent) or [""]
