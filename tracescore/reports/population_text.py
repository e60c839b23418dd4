"""The population block of ``report`` and ``compare``: what the figures speak for (the scored
records, or all records weighted by 1/π) — text and HTML. Takes
:class:`~.inclusion.PopulationSummary` data; no I/O."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from typing import Any

from .inclusion import SESSIONS
from .textfmt import WIDTH
from .textfmt import table as _table
from .textfmt import wrap as _wrap

__all__ = ["population_html", "population_lines"]

LEGEND = ("scored records = the plain figure over the records the metrics scored; all records "
          "(weighted) = each scored record weighted by 1/pi, its inclusion probability (pi = 1 "
          "for a record a rule or negative feedback forced, the metric's sample rate "
          "otherwise): the Hajek mean with its linearised variance, 95 % t interval "
          "(docs/monitoring.md, 'Populations')")


#: the population of the session scores (``session.*``, :mod:`tracescore.sessions`)
SESSIONS_LINE = ("session.* scores: one per closed session, every session scored: they speak "
                 "for the sessions (a census), not for the requests")


def _fmt(e: Any, binary: bool) -> str:
    if e is None or e.value is None:
        return "-"
    if binary:
        v = f"{100 * e.value:.1f}%"
        return v if e.lo is None else f"{v} [{100 * e.lo:.1f}, {100 * e.hi:.1f}]"
    return f"{e.value:.3f}" if e.lo is None else f"{e.value:.3f} [{e.lo:.3f}, {e.hi:.3f}]"


def _rows(pops: Sequence[Any]) -> list[list[str]]:
    return [[p.name, str(p.scored.n), _fmt(p.scored, p.binary),
             _fmt(None if p.weighted is None else p.weighted.estimate, p.binary),
             ", ".join(f"{r} {n}" for r, n in p.certain) + (
                 f"{', ' if p.certain else ''}priority {p.priority}" if p.priority else ""),
             "-" if p.rate.value is None else f"{p.rate.value:g}"]
            for p in pops]


def population_lines(pops: Sequence[Any], width: int = WIDTH, title: str = "") -> list[str]:
    """The population of the score figures: one line when every score was a uniform sample,
    else a table of the plain and the weighted figure per score."""
    if not pops:
        return []
    sessions = [p for p in pops if p.rate.source == SESSIONS]
    pops = [p for p in pops if p.rate.source != SESSIONS]
    head = f"Population{' (' + title + ')' if title else ''}: "
    if not pops:  # session scores only
        return ["", *_wrap(head + SESSIONS_LINE, width)]
    unequal = [p for p in pops if p.unequal]
    if not unequal:
        rates = sorted({(p.rate.value, p.rate.source) for p in pops if p.rate.value is not None})
        said = ", ".join(f"{r:g}" if src == "decisions" else f"about {r:.3g}"
                         for r, src in rates) or "-"
        out = ["", *_wrap(head + "the figures above are over the scored records, each "
                          f"scored with the same probability (sample rate {said}; no record "
                          "forced): they speak for all records", width)]
    else:
        out = ["", *_wrap(head + "the figures above cover only the scored records: some were "
                          "chosen with a higher probability (forced by a rule or by negative "
                          "feedback) and are not typical. Weighted to all records:", width)]
        out += ["  " + line for line in _table(
            ["score", "n", "scored records", "all records (weighted)", "forced (pi = 1), priority",
             "rate"], _rows(unequal), "<>>><>")]
        out += _wrap(LEGEND, width, "  ")
    if sessions:
        out += _wrap(SESSIONS_LINE, width, "  ")
    for p in pops:
        for note in p.notes:
            out += _wrap(f"{p.name}: {note}", width, "  ")
    return out


def population_html(pops: Sequence[Any], title: str = "") -> str:
    """The population section of a page ("" without scores)."""
    if not pops:
        return ""
    sessions = [p for p in pops if p.rate.source == SESSIONS]
    pops = [p for p in pops if p.rate.source != SESSIONS]
    unequal = [p for p in pops if p.unequal]
    if not pops:
        body = ""
    elif not unequal:
        body = ('<p class="meta" data-population="scored records">Population: the figures '
                "are over the scored records, each scored with the same probability (no "
                "record forced): they speak for all records.</p>")
    else:
        rows = "".join(
            f'<tr data-population-score="{escape(r[0])}"><td>{escape(r[0])}</td>'
            f'<td class="num">{escape(r[1])}</td><td class="num">{escape(r[2])}</td>'
            f'<td class="num">{escape(r[3])}</td><td>{escape(r[4])}</td>'
            f'<td class="num">{escape(r[5])}</td></tr>' for r in _rows(unequal))
        body = ('<p class="warn" data-population="scored records only">The score figures '
                "cover only the scored records: some were chosen with a higher probability "
                "(forced by a rule or by negative feedback). Weighted to all records:</p>"
                "<table><thead><tr><th>score</th><th>n</th><th>scored records</th>"
                "<th>all records (weighted)</th><th>forced (pi = 1), priority</th><th>rate</th></tr>"
                f'</thead><tbody>{rows}</tbody></table><p class="meta">{escape(LEGEND)}</p>')
    if sessions:
        body += f'<p class="meta" data-population="sessions">{escape(SESSIONS_LINE)}</p>'
    notes = "".join(f'<p class="meta">{escape(p.name)}: {escape(n)}</p>'
                    for p in pops for n in p.notes)
    heading = "Population" + (f" ({escape(title)})" if title else "")
    anchor = "population" + ("-" + escape(title.split(":")[0]) if title else "")
    return (f'<section class="card" id="{anchor}"><h2>{heading}</h2>{body}{notes}'
            "</section>")
