"""The human ``tracescore report``: monitors first, a summary line, a table per score with its
95 % interval, the worst records. Takes a :class:`~.model.Report`; no I/O. Control characters
in names and captured text come out as visible escapes (:func:`.textfmt.printable`)."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import Any

from ..read.model import FeedbackSummary, MetricSummary, PendingReason, Report
from .active_text import ACTIVE_MARK, active_lines
from .population_text import population_lines
from .textfmt import WIDTH, monitor_estimate, printable
from .textfmt import clip as _clip
from .textfmt import num as _num
from .textfmt import pct as _pct
from .textfmt import plural as _n
from .textfmt import share as _share
from .textfmt import table as _table
from .textfmt import when as _when
from .textfmt import wrap as _wrap
from .trust_text import compare_trust_lines, trust_lines

__all__ = ["format_comparison", "format_report"]


def format_report(report: Report, width: int = WIDTH) -> str:
    """The human report: a summary line, a table per score name, the worst records."""
    window = "all time" if report.since is None else f"since {_when(report.since)}"
    errors = sum(m.errors for m in report.metrics)
    summary = (
        f"{_n(report.records, 'record')}, {report.sampled} sampled"
        f"{_share(report.sampled, report.records)}, {report.dropped} dropped; "
        f"{_n(report.scores, 'score')}, {_n(errors, 'error')}; "
        f"{_n(report.pending_jobs, 'job')} pending"
    )
    if report.lost:
        summary += "; lost (all time): " + ", ".join(
            f"{n} {reason}" for reason, n in sorted(report.lost.items()))
    if report.undelivered:
        summary += (f"; {_n(report.undelivered, 'score')} not yet exported (held, in flight, or "
                    "the export failed: a running pipeline sends it again)")
    scope = "".join(f", {k}={v}" for k, v in report.where.items())
    out = [f"tracescore report on {report.db} ({window}{scope})"]
    out += _monitor_lines(report, width)
    out += _wrap(summary, width)
    out += _pending_lines(report.pending_reasons, width)
    out.append("")
    if report.overflow:
        out += [*_wrap(
            "segments past their cardinality limit, counted as 'other': " + ", ".join(
                f"{dim} ({n} records)" for dim, n in report.overflow.items()), width), ""]
    for j in report.judges:
        line = (f"judge {j['model']}: agreed with {j['agreement']:.0%} of {j['cases']} canary "
                "cases")
        if j["degenerate"]:
            line = f"WARNING: {line}: DEGENERATE ({j['reason']}); do not trust its scores"
        out += [*_wrap(line, width), ""]
    if not report.metrics:
        out.append("No scores yet." if report.records else "No records yet.")
        if report.pending_jobs and not report.pending_reasons:
            out.append(f"{report.pending_jobs} scoring jobs are waiting for a running pipeline.")
        out += _feedback_lines(report.feedback, width)
        return printable("\n".join(out), keep="\n")

    out += _score_tables(report.metrics)
    notes = []
    if any(m.higher_is_better is False for m in report.metrics):
        notes.append("↓ lower is better")
    if any(m.higher_is_better is None for m in report.metrics):
        notes.append("· no better direction")
    unlabelled = [m.name for m in report.metrics if m.fail_rate is None and m.count]
    if unlabelled:
        notes.append(f"no pass/fail threshold: {', '.join(unlabelled)}")
    if notes:
        out += _wrap("; ".join(notes), width)
    out += _skip_notes(report.metrics, width)
    out += active_lines(getattr(report, "active", {}), width)
    out += population_lines(report.population, width)
    out += _feedback_lines(report.feedback, width)
    out += trust_lines(report.trust, width)

    for g in report.groups:
        out += ["", f"{report.by} = {g.value if g.value is not None else '(none)'}: "
                f"{_n(g.records, 'record')}, {g.sampled} sampled"]
        out += _score_tables(g.metrics) if g.metrics else ["  no scores"]
    if report.worst:
        n = max(len(items) for items in report.worst.values())
        title = "Worst record per score" if n == 1 else f"Worst {n} records per score"
        out += ["", f"{title} (details: tracescore show TRACE)"]
        wrows: list[list[str]] = []
        for name, items in report.worst.items():
            for i, w in enumerate(items):
                wrows.append([name if i == 0 else "", _num(w.value), w.trace_id[:12], w.query or ""])
        fixed = max(len("score"), *(len(r[0]) for r in wrows)) + 2 + 5 + 2 + 12 + 2
        room = max(20, width - fixed)
        for r in wrows:
            r[3] = _clip(r[3], room)
        out += _table(["score", "value", "trace", "query"], wrows, "<><<")
    return printable("\n".join(out), keep="\n")


_MARKS = {True: "", False: " ↓", None: " ·"}


def _ci(m: MetricSummary, rate: bool = False) -> str:
    if m.lo is None or m.hi is None:
        return "-"
    if rate:
        return f"{100 * m.lo:.1f}–{100 * m.hi:.1f}%"
    # every value equal: the range bound, not a t interval (which would have zero width)
    return f"{m.lo:.3f}–{m.hi:.3f}" + ("*" if m.ci_method == "range bound" else "")


def _active(m: MetricSummary) -> str:
    return ACTIVE_MARK if m.estimator == "active" else ""


def _score_tables(metrics: Sequence[MetricSummary]) -> list[str]:
    """A table of scores (mean with its 95 % interval) and one of yes/no checks (rate)."""
    out: list[str] = []
    rows = [
        [m.name + _MARKS[m.higher_is_better] + _active(m), str(m.count), _num(m.mean), _ci(m),
         _num(m.p10),
         _num(m.p50), _num(m.p90), _pct(m.fail_rate), str(m.errors), str(m.skipped)]
        for m in metrics if not m.binary
    ]
    if rows:
        out += _table(["score", "n", "mean", "95% CI", "p10", "p50", "p90", "fail", "errors",
                       "skipped"], rows, "<>>>>>>>>>")
        if any(m.ci_method == "range bound" for m in metrics if not m.binary):
            out.append("* every value equal (no spread): the exact bound for scores in [0, 1]")
    # Yes/no metrics (values 0/1): how many said yes, not percentiles of 0s and 1s.
    checks = [
        [m.name + _MARKS[m.higher_is_better] + _active(m), str(m.count),
         "-" if m.yes is None else f"{m.yes}/{m.count}", _pct(m.rate), _ci(m, rate=True),
         _pct(m.fail_rate), str(m.errors), str(m.skipped)]
        for m in metrics if m.binary
    ]
    if checks:
        if rows:
            out.append("")
        out += _table(["yes/no check", "n", "yes", "rate", "95% CI", "fail", "errors",
                       "skipped"], checks, "<>>>>>>>")
    return out


def _monitor_lines(report: Report, width: int) -> list[str]:
    """The monitors' states, alerts first (one line each; OK ones summed up)."""
    if not report.monitors:
        return []
    ok = [m for m in report.monitors if m.state == "OK"]
    lines = []
    for m in report.monitors:
        if m.state == "OK":
            continue
        est = "" if m.value is None else " " + monitor_estimate(m.value, m.lo, m.hi)
        if m.n is not None:
            est += f" n={m.n}"
        text = f"{m.state} {m.name}:{est}" + (f" — {m.summary}" if m.summary else "")
        text += f" (since {_when(m.since)})"
        lines += _wrap(text, width)
    if ok:
        lines.append(f"OK: {len(ok)} monitor{'s' if len(ok) != 1 else ''}"
                     + ("" if lines else " (tracescore check for details)"))
    return lines


def _pending_lines(reasons: Sequence[PendingReason], width: int) -> list[str]:
    """Why the open jobs wait, one line per reason: "3 pending: waiting for the judge at URL
    (unreachable since T: connection refused); retried when it answers"."""
    lines: list[str] = []
    for p in reasons:
        head = f"{p.jobs} pending" if p.state == "pending" else f"{p.jobs} leased"
        lines += textwrap.wrap(printable(f"{head}: {p.reason}"), width, initial_indent="  ",
                               subsequent_indent="    ")
    return lines


def _feedback_lines(feedback: Sequence[FeedbackSummary], width: int) -> list[str]:
    """Users' feedback in the window: one row per feedback name."""
    if not feedback:
        return []
    rows = []
    for f in feedback:
        rate = "-" if f.rate is None else f"{100 * f.rate:.0f}%"
        ci = "-" if f.lo is None or f.hi is None else \
            f"{100 * f.lo:.1f}–{100 * f.hi:.1f}%"
        labels = _clip(", ".join(f"{label} {n}" for label, n in f.labels) or "-", 30)
        rows.append([f.name, str(f.count), str(f.traces), f"{f.positive}/{f.negative}", rate,
                     ci, _num(f.mean), str(f.comments), labels])
    out = ["", "User feedback (ts.add_feedback; up = value >= 0.5 or a positive label)"]
    table = _table(["feedback", "n", "traces", "up/down", "up", "95% CI", "mean", "comments",
                    "labels"], rows, "<>>>>>>><")
    return out + table


def _skip_notes(metrics: Sequence[MetricSummary], width: int) -> list[str]:
    """Why metrics skipped most of their records (once per metric, not per score name)."""
    # Metrics skipped alike (an agent without answers skips every answer metric) share a line.
    alike: dict[str, list[str]] = {}
    for m in metrics:
        if not m.mostly_skipped:
            continue
        total = m.skipped + m.count + m.errors
        why = "; ".join(f"{reason} ({n})" for reason, n in m.skip_reasons[:3]) or "no reason"
        names = alike.setdefault(f"skipped {m.skipped} of {total} records: {why}", [])
        if m.metric not in names:
            names.append(m.metric)
    lines: list[str] = []
    for text, names in alike.items():
        lines += textwrap.wrap(printable(f"{', '.join(names)}: {text}"), width,
                               initial_indent="  ", subsequent_indent="    ")
    if lines:
        lines = ["", "Mostly skipped (these metrics could not run on most records):", *lines]
    return lines




def format_comparison(c: Any, width: int = WIDTH) -> str:
    """The human ``tracescore compare``: one row per score, verdicts first in the summary."""
    def est(e: Any, rate: bool) -> str:
        if e.value is None:
            return "-"
        if rate:
            text = f"{100 * e.value:.1f}%"
            return text + (f" [{100 * e.lo:.1f}, {100 * e.hi:.1f}]" if e.lo is not None else "")
        return (f"{e.value:.3f}" + (f" [{e.lo:.3f}, {e.hi:.3f}]" if e.lo is not None else "")
                + ("*" if getattr(e, "note", "") else ""))

    def dif(d: Any, rate: bool) -> str:
        if d.estimate is None:
            return "-"
        k = 100 if rate else 1
        unit = " pp" if rate else ""
        text = f"{k * d.estimate:+.{1 if rate else 3}f}{unit}"
        if d.lo is not None and d.hi is not None:
            text += f" [{k * d.lo:+.{1 if rate else 3}f}, {k * d.hi:+.{1 if rate else 3}f}]"
        return text

    scope = "".join(f", {k}={v}" for k, v in c.where.items())
    out = [f"tracescore compare on {c.db}{scope}",
           f"current:  {c.current_label} ({_n(c.current_records, 'record')}"
           f"{_window(c.current_window)})",
           f"baseline: {c.baseline_label} ({_n(c.baseline_records, 'record')}"
           f"{_window(c.baseline_window)})", ""]
    counts: dict[str, int] = {}
    for r in c.rows:
        counts[r.verdict] = counts.get(r.verdict, 0) + 1
    if c.regressed:
        out += _wrap("REGRESSED: " + ", ".join(
            r.name if r.kind in ("mean", "rate") else f"{r.kind} ({r.name})"
            for r in c.regressed), width)
    out.append("; ".join(f"{n} {v}" for v, n in sorted(counts.items())) or "no scores")
    out.append("")
    rows = []
    for r in c.rows:
        rate = r.kind != "mean"
        label = r.name if r.kind in ("mean", "rate") else f"{r.kind}"
        p = "-" if r.p_adjusted is None else (f"{r.p_adjusted:.3f}" if r.p_adjusted >= 0.001
                                               else "<0.001")
        rows.append([label + _MARKS[r.higher_is_better], str(r.current.n),
                     est(r.current, rate), str(r.baseline.n), est(r.baseline, rate),
                     dif(r.diff, rate), p, r.verdict])
    if rows:
        out += _table(["score", "n", "current", "n", "baseline", "difference [95% CI]",
                       "p adj", "verdict"], rows, "<>>>>>><")
    methods = sorted({m for r in c.rows for m in (r.diff.method, r.current.method,
                                                  r.baseline.method)
                      if m and m not in ("t", "wilson")})
    adjust = {"holm": "Holm (family-wise)", "fdr_bh": "Benjamini-Hochberg (false discovery "
              "rate)"}.get(c.adjust, c.adjust)
    out += [""] + textwrap.wrap(
        f"difference = current - baseline; intervals 95 % ({', '.join(methods) or '-'}); "
        f"p-values adjusted across the {len(c.rows)} rows by {adjust}; alpha {c.alpha:g}; "
        f"'no change' = the interval lies inside ±{c.min_effect:g}; 'not enough data' = "
        f"fewer than {c.min_n} scored records on a side.", width)
    if any(getattr(e, "note", "") for r in c.rows for e in (r.current, r.baseline)):
        out += textwrap.wrap(
            "* no spread: every value on that side is equal; its interval is the exact bound "
            "over all scores in [0, 1] (range bound), and the difference's interval is built "
            "from it (mover+range), never a zero-width interval.", width)
    pops = getattr(c, "population", {})
    if any(p.unequal for side in pops.values() for p in side):
        out += [""] + textwrap.wrap(
            "The verdicts above compare the scored records of each side; where some were "
            "forced into scoring, the figures weighted to all records follow.", width)
    for side, label in (("current", c.current_label), ("baseline", c.baseline_label)):
        out += population_lines(pops.get(side, []), width, f"{side}: {label}")
    out += compare_trust_lines(getattr(c, "trust", []), c.current_label, c.baseline_label,
                               width)
    return printable("\n".join(out), keep="\n")


def _window(w: Any) -> str:
    if w.since is None and w.until is None:
        return ""
    if w.until is None:
        return f", since {_when(w.since)}"
    return f", {_when(w.since)} to {_when(w.until)}"
