"""The page shell and the small helpers every page uses.

:func:`_document` wraps a page's body in one self-contained document (the stylesheet inline);
the rest turn numbers and user text into HTML, and tone a value against its metric's
threshold. Every piece of user text goes through :func:`html.escape` here or at its caller;
no connection, no queries: pure functions, safe from any thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from typing import Any

from ...read.model import MetricSummary
from ...score import label_for
from ..textfmt import num as _num
from ..textfmt import when as _when
from ._css import _CSS


def _document(title: str, body: Sequence[str], script: str = "") -> str:
    js = f"<script>{script}</script>\n" if script else ""
    return (
        "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{escape(title)}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n"
        f'<main>\n{chr(10).join(b for b in body if b)}\n</main>\n{js}</body>\n</html>\n'
    )


def _scope(db: str, since: float | None, where: dict[str, str]) -> str:
    window = "all time" if since is None else f"since {_when(since)}"
    scope = "".join(f" · {k} = {v}" for k, v in where.items())
    return f'<span class="mono">{escape(db)}</span> · {escape(window + scope)}'


def _attr(v: float | None) -> str:
    return "" if v is None else escape(repr(v))


def _val(v: float | None) -> str:
    """Scores in [0, 1] with 3 decimals, like the text report; larger values with fewer."""
    if v is None or abs(v) < 10:
        return _num(v)
    return f"{v:,.1f}" if abs(v) < 10_000 else f"{v:,.0f}"


def _clip(text: str | None, width: int) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _estimate(value: float | None, lo: float | None, hi: float | None,
              rate: bool = False) -> str:
    """``0.712 [0.690, 0.734]``, or for a rate ``71.2% [69.0, 73.4]``."""
    if value is None:
        return "—"
    if rate:
        text = f"{100 * value:.1f}%"
        return text + (f" [{100 * lo:.1f}, {100 * hi:.1f}]"
                       if lo is not None and hi is not None else "")
    text = _val(value)
    return text + (f" [{_val(lo)}, {_val(hi)}]" if lo is not None and hi is not None else "")


def _stat(label: str, key: str, shown: str, value: Any = None, tone: str = "") -> str:
    raw = "" if value is None else f' data-value="{escape(repr(value))}"'
    cls = f' class="{tone}"' if tone else ""
    return (f'<div><dt>{escape(label)}</dt><dd data-stat="{key}"{raw}{cls}>'
            f"{escape(shown)}</dd></div>")


def _tone(value: float | None, m: MetricSummary) -> str:
    """``good``/``bad`` against the metric's threshold, else neutral."""
    if value is None or m.threshold is None or m.higher_is_better is None:
        return ""
    return "good" if label_for(value, m.threshold, m.higher_is_better) == "pass" else "bad"
