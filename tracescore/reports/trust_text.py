"""Text for the judge-vs-humans numbers (:mod:`.trust`): the report's and compare's "Judge vs
humans" lines and ``calibrate``'s human-labels section. Takes data; no I/O. Every name passes
through :func:`.textfmt.printable` (the callers' tables and :func:`.textfmt.wrap` do it).

Each number says what it is: "judge mean" (the judge's own scores, uncorrected), "corrected
with N human labels" (PPI++ / stratified PPI++, :mod:`tracescore.stats.ppi`), "labels only".
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .textfmt import WIDTH, wrap
from .textfmt import num as _num
from .textfmt import plural as _n
from .textfmt import table as _table

__all__ = ["agreement_lines", "compare_trust_lines", "estimate_text", "label_calibration_lines",
           "trust_lines"]


def estimate_text(value: float | None, lo: float | None, hi: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.3f}" + (f" [{lo:.3f}, {hi:.3f}]" if lo is not None and hi is not None
                             else "")


def _pct_ci(e: Any) -> str:
    if e is None or e.value is None:
        return "-"
    text = f"{100 * e.value:.1f}%"
    return text + (f" [{100 * e.lo:.1f}, {100 * e.hi:.1f}]" if e.lo is not None else "")


def _diff(d: Any) -> str:
    if d is None or d.estimate is None:
        return "-"
    text = f"{d.estimate:+.3f}"
    return text + (f" [{d.lo:+.3f}, {d.hi:+.3f}]" if d.lo is not None and d.hi is not None
                   else "")


def agreement_lines(ag: Any, width: int = WIDTH, indent: str = "  ") -> list[str]:
    """Agreement of a judge with humans (binary or numeric), or why there is none."""
    if ag.status != "ok":
        return wrap(f"not enough labels for agreement: {ag.reason}", width, indent)
    bias = f"bias (judge mean - human mean) {_diff(ag.bias)}"
    from ..trust.agreement import BinaryAgreement

    if isinstance(ag, BinaryAgreement):
        k = ag.kappa
        kappa = ("undefined: " + str(k and k.reason)) if k is None or k.value is None else \
            estimate_text(k.value, k.shown_lo, k.shown_hi)
        c = ag.confusion
        lines = wrap(f"n {ag.n}; accuracy {_pct_ci(ag.accuracy)}; Cohen's kappa {kappa}; "
                     f"{bias}", width, indent)
        lines += [indent + "confusion (rows: human, columns: judge):"]
        lines += [indent + "  " + r for r in _table(
            ["", "judge no", "judge yes"],
            [["human no", str(c.both_no), str(c.judge_yes_human_no)],
             ["human yes", str(c.judge_no_human_yes), str(c.both_yes)]], "<>>")]
        return lines
    s = ag.spearman
    rho = ("undefined: " + str(s and s.reason)) if s is None or s.value is None else \
        estimate_text(s.value, s.lo, s.hi)
    mae = "-" if ag.mae is None else estimate_text(ag.mae.value, ag.mae.lo, ag.mae.hi)
    return wrap(f"n {ag.n}; Spearman {rho}; MAE {mae}; {bias}", width, indent)


def _corrected_rows(t: Any) -> list[list[str]]:
    rows = [["judge mean (uncorrected)", str(t.judge_n),
             "-" if t.judge_mean is None else f"{t.judge_mean:.3f}"]]
    corr = t.correction
    if corr is None:
        return rows
    if corr.result is None:
        rows.append([f"corrected with {_n(t.pairs, 'human label')}", str(t.pairs),
                     f"not available: {corr.reason}"])
        return rows
    r = corr.result
    c = r.corrected
    shown = (estimate_text(c.value, c.lo, c.hi) if c.value is not None
             else f"not enough labels: {c.reason}")
    rows[0][2] = estimate_text(r.judge.value, r.judge.lo, r.judge.hi)
    rows.append([f"corrected with {_n(c.n, 'human label')}", str(c.n), shown])
    rows.append(["human labels only", str(r.labels.n),
                 estimate_text(r.labels.value, r.labels.lo, r.labels.hi)
                 if r.labels.value is not None else "-"])
    return rows


def trust_lines(rows: Sequence[Any], width: int = WIDTH) -> list[str]:
    """The report's "Judge vs humans" section (nothing when no score has labels)."""
    if not rows:
        return []
    out = ["", "Judge vs humans (human labels in the window; tracescore calibrate for more)"]
    for t in rows:
        who = f"{_n(t.pairs, 'labelled record')}, {_n(t.labels, 'label')}"
        if len(t.annotators) > 1:
            who += (f" by {len(t.annotators)} annotators (human value: their "
                    f"{'majority' if t.binary else 'mean'})")
        if t.stale:
            who += f"; {t.stale} labels of another metric version left out"
        out += ["", *wrap(f"{t.name}{' (yes/no)' if t.binary else ''}: {who}", width)]
        out += ["  " + line for line in _table(["estimate of the mean", "n", "value [95% CI]"],
                                               _corrected_rows(t), "<><")]
        if t.correction is not None:
            c = t.correction
            # the method only beside an estimate made by it
            method = ("" if c.result is None or c.result.corrected.value is None
                      else f"; {c.result.corrected.method}")
            out += wrap(f"({c.assumption}{method}; population: {c.population})", width, "  ")
            if c.warning:
                out += wrap(c.warning, width, "  ")
            if c.unused:
                out += wrap(f"({c.unused} labels not used: {c.unused_reason})", width, "  ")
        out += agreement_lines(t.agreement, width)
        if t.ties:
            out += wrap(f"({t.ties} records whose annotators split evenly are left out of "
                        "the agreement)", width, "  ")
        if t.inter_annotator is not None:
            ia = t.inter_annotator
            out += wrap(f"between annotators {ia['annotators'][0]} and "
                        f"{ia['annotators'][1]} ({ia['traces']} traces in common):", width,
                        "  ")
            out += agreement_lines(ia["agreement"], width, "    ")
    return out


def compare_trust_lines(rows: Sequence[Any], current: str, baseline: str,
                        width: int = WIDTH) -> list[str]:
    """compare's corrected estimates per side and, with both, their difference."""
    if not rows:
        return []

    def side(s: Any) -> tuple[str, str, str]:
        if s is None:
            return "-", "no labels", "0"
        judge = "-" if s.judge_mean is None else _num(s.judge_mean)
        c = s.correction
        if c is None or c.result is None:
            why = "not available" if c is None else f"not available ({c.reason})"
            return judge, why, str(s.pairs)
        e = c.result.corrected
        shown = (estimate_text(e.value, e.lo, e.hi) if e.value is not None
                 else "not enough labels")
        return judge, shown, str(e.n)

    table = []
    for r in rows:
        for i, (who, s) in enumerate((("current", r.current), ("baseline", r.baseline))):
            table.append([r.name if i == 0 else "", who, *side(s)])
        d = r.diff
        table.append(["", "difference", "", "-" if d.estimate is None else _diff(d), ""])
    out = ["", "Judge vs humans: the judge mean and the estimate corrected with human labels",
           *_table(["score", "side", "judge mean", "corrected [95% CI]", "labels"], table,
                   "<<><>")]
    for r in rows:
        for who, s in (("current", r.current), ("baseline", r.baseline)):
            c = None if s is None else s.correction
            if c is not None and c.warning:
                out += wrap(f"{r.name}, {who}: {c.warning}", width)
            if c is not None and c.result is not None and not c.population.startswith(
                    "scored records in the window"):
                out += wrap(f"{r.name}, {who}: the corrected estimate covers {c.population}",
                            width)
    out += wrap(f"current = {current}, baseline = {baseline}; judge mean = the judge's own "
                "scores, uncorrected; corrected = PPI++ with the human labels of that side "
                "(assumed a random sample of it; labels of a plan: stratified); difference "
                "= current - baseline of the corrected estimates, sides independent, SE = "
                "sqrt(se_a^2 + se_b^2), normal; '-' unless both sides have enough labels.",
                width)
    return out


def label_calibration_lines(lc: Any, width: int = WIDTH) -> list[str]:
    """``calibrate``'s human-labels section (:class:`.trust_calibrate.LabelCalibration`)."""
    out = wrap("Judge vs human labels (ts.add_label / tracescore label; human value per "
               "record: the mean of the annotators, yes/no by majority)", width)
    unmatched = {k: v for k, v in getattr(lc, "unmatched", {}).items() if v}
    if not lc.names and not unmatched:
        out += wrap("No judge score has human labels yet"
                    + (f" ({', '.join(lc.missing)})" if lc.missing else "")
                    + ": label some with `tracescore label` or ts.add_label(trace_id, "
                    "score_name, value).", width)
        return out
    for n in lc.names:
        t = n.summary
        who = f"{_n(t.pairs, 'labelled record')}, {_n(t.labels, 'label')}"
        if len(t.annotators) > 1:
            who += f" by {len(t.annotators)} annotators"
        if t.stale:
            who += f"; {t.stale} labels of another metric version left out"
        if unmatched.get(t.name):
            who += f"; {unmatched[t.name]} labels match no scored record"
        out += ["", *wrap(f"{t.name} ({'yes/no' if t.binary else 'numeric'}): {who}", width)]
        out += agreement_lines(t.agreement, width)
        if t.inter_annotator is not None:
            ia = t.inter_annotator
            out += wrap(f"between annotators {ia['annotators'][0]} and "
                        f"{ia['annotators'][1]} ({ia['traces']} records in common):", width,
                        "  ")
            out += agreement_lines(ia["agreement"], width, "    ")
        for g, s in n.groups.items():
            out += wrap(f"{lc.by} = {'(none)' if g is None else g}:", width, "  ")
            out += agreement_lines(s.agreement, width, "    ")
    named = {t.summary.name for t in lc.names}
    for name, k in sorted(unmatched.items()):
        if name not in named:
            out += ["", *wrap(f"{name}: {k} labels match no scored record (their traces or "
                              "records are not in this database, or not scored under that "
                              "name yet)", width)]
    rest = [m for m in lc.missing if m not in unmatched]
    if rest:
        out += ["", *wrap(f"no labelled pairs: {', '.join(rest)}", width)]
    out += ["", *wrap("kappa: agreement beyond chance (1 perfect, 0 chance), Fleiss-Cohen-"
                      "Everitt interval (shown clipped to [-1, 1]); Spearman: rank agreement, Fisher-z interval; bias: "
                      "judge mean - human mean, paired t interval; intervals 95 %. "
                      "docs/trust.md: 'Can I trust these numbers?'", width)]
    return out
