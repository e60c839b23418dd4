"""`tracescore report --html`: one self-contained page whose numbers are the database's.

The databases are real SQLite files written through :class:`tracescore.store.Store` (the
pipeline's own write path: records, jobs, leases, scores), with scores placed at known times
so the charts' buckets can be checked. No browser: the page is parsed with html.parser.
"""

from __future__ import annotations

import json
import math
import re
import statistics
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from helpers import rows

from tracescore import Metric, RagRecord, Score
from tracescore.cli import main
from tracescore.metrics import registry
from tracescore.read.db import open_db
from tracescore.record import Context, TokenUsage
from tracescore.reports.report import histogram, pick_bucket
from tracescore.sampling import Decision
from tracescore.score import label_for
from tracescore.store import SKIPPED, NewJob, Store, open_store
from tracescore.store.compat import connect_reader
from tracescore.store.rollup import Delta

HOUR = 3600.0


def _t975(df: int) -> float:
    from scipy import stats

    return float(stats.t.ppf(0.975, df))
NASTY_QUERY = 'Which "bike", <script>alert("x")</script> & co\nsecond line?'
NASTY_CONTEXT = "Frames: <b>S</b>, M & L; see </details> for more"


class AnswerLength(Metric):
    """Lower is better, values far outside [0, 1]: the observed-range histogram."""

    name = "test_html_answer_length"
    requires = frozenset({"answer"})
    higher_is_better = False
    threshold = 40.0
    description = "characters in the answer"

    def __call__(self, record: RagRecord) -> Score:
        return self.result(len(record.answer or ""))


METRICS = [registry.get("token_f1"), registry.get("faithfulness"), AnswerLength()]
F1_VALUES = [0.0, 0.1, 0.3, 0.5, 0.7, 0.95, 1.0, 0.25, 0.6, 0.85]


@dataclass
class Run:
    """One record to store and the scores its metrics produced."""

    query: str
    answer: str
    age_h: float
    scores: dict[str, float | str] = field(default_factory=dict)  # "error: ..." for errors
    skipped: dict[str, str] = field(default_factory=dict)  # metric -> reason
    sampled: bool = True
    contexts: tuple[str, ...] = ("The Commuter ships with a 500 Wh battery.",)
    tokens: tuple[int, int] | None = (120, 30)


def standard_runs(n: int = 30) -> list[Run]:
    """30 records over 30 hours: values with known bins, an error, a skip, an unsampled one."""
    runs = []
    for i in range(n):
        answer = "word " * (i % 12 + 1)
        run = Run(query=f"question {i}?", answer=answer.strip(), age_h=29.5 - i,
                  tokens=None if i % 7 == 3 else (100 + i, 20 + i))
        run.scores["token_f1"] = F1_VALUES[i % len(F1_VALUES)]
        run.scores["test_html_answer_length"] = float(len(run.answer))
        if i % 2 == 0:
            run.scores["faithfulness"] = round(i / n, 4)
        runs.append(run)
    runs[0].query = NASTY_QUERY
    runs[0].contexts = (NASTY_CONTEXT, "Second context,\nwith a newline")
    runs[5].scores["token_f1"] = "error: TimeoutError: the judge took too long\nmore detail"
    del runs[6].scores["token_f1"]
    runs[6].skipped["token_f1"] = "record has no ground_truths"
    runs[7].scores.clear()
    runs[7].sampled = False
    return runs


def build_db(path: Path, runs: list[Run], *, now: float | None = None,
             judge_calls: list[dict[str, Any]] = ()) -> dict[str, str]:
    """Write ``runs`` through the Store; returns query -> record_id."""
    now = time.time() if now is None else now
    store = open_store(path)
    by_metric = {m.name: m for m in METRICS}
    try:
        store.register_metrics(METRICS)
        batch, jobs, ids, by_id = [], [], {}, {}
        for i, run in enumerate(runs):
            end = int((now - run.age_h * HOUR) * 1e9)
            rec = RagRecord(
                trace_id=f"{i + 1:032x}", span_id=f"{i + 1:016x}", query=run.query,
                answer=run.answer, contexts=tuple(Context(text=c, id=f"doc{j}", score=1.5 - j)
                                                  for j, c in enumerate(run.contexts)),
                ground_truths=("word word",), start_time_ns=end - 2_500_000,
                end_time_ns=end, model="test-model",
                usage=TokenUsage(*run.tokens) if run.tokens else None,
            )
            metrics = tuple(m.name for m in METRICS) if run.sampled else ()
            batch.append((rec, Decision(u=0.5, metrics=metrics)))
            ids[run.query] = rec.record_id
            by_id[rec.record_id] = run
            for name in run.scores:
                jobs.append(NewJob(rec.record_id, name, "1"))
            for name, reason in run.skipped.items():
                jobs.append(NewJob(rec.record_id, name, "1", status=SKIPPED, reason=reason))
        store.write_batch(batch, jobs)
        leased = store.lease_jobs("test", 10_000, 60.0, list(by_metric))
        for job in leased:
            value = by_id[job.record_id].scores[job.metric]
            m = by_metric[job.metric]
            if isinstance(value, str):
                score = Score.failed(job.metric, value.removeprefix("error: "), metric=job.metric)
            else:
                score = Score(name=job.metric, value=value, metric=job.metric,
                              label=label_for(value, m.threshold, m.higher_is_better is not False),
                              explanation=f"{job.metric} explained: {value}", duration_ms=1.0)
            assert store.complete_job(job, "test", [score]) is not None
        for call in judge_calls:
            store.judge_call_log(**call)
    finally:
        store.close()
    conn = connect_reader(str(path))
    with conn:  # scores computed 2 s after their record, judge calls at the record's time
        conn.execute("UPDATE scores SET created_at = (SELECT r.created_at + 2 FROM records r"
                     " WHERE r.record_id = scores.record_id)")
        conn.execute("UPDATE judge_calls SET created_at = coalesce((SELECT r.created_at"
                     " FROM records r WHERE r.record_id = judge_calls.record_id), created_at)")
        # the scores moved in time, so their hourly rollups move with them: folded again by
        # the store's own aggregation (as the schema-3 migration folds existing rows)
        conn.execute("DELETE FROM hourly_scores")
        conn.execute("DELETE FROM hourly_bins")
        delta = Delta()
        for row in conn.execute("SELECT created_at, name, seg_id, metric_version, judge_model,"
                                " metric, value, label, status FROM scores").fetchall():
            delta.add_score(*row)
        delta.write(conn)
    conn.close()
    return ids


# -- parsing the page ------------------------------------------------------------------------
class Page(HTMLParser):
    """Collects what the tests check: cards, stats, chart marks, records, scripts, links."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[tuple[str, dict[str, str]]] = []
        self.metrics: dict[str, dict[str, Any]] = {}
        self.records: dict[str, dict[str, Any]] = {}
        self.totals: dict[str, str] = {}
        self.stats: dict[str, str] = {}  # outside metric cards (cost)
        self.tags: Counter[str] = Counter()
        self.urls: list[str] = []
        self.scripts: list[str] = []
        self.text: list[str] = []
        self._capture: tuple[dict[str, Any], str, str] | None = None
        self.feed(html)
        self.close()

    def _card(self) -> dict[str, Any] | None:
        for _tag, attrs in reversed(self.stack):
            if "data-metric" in attrs:
                return self.metrics[attrs["data-metric"]]
            if "data-record" in attrs:
                return self.records[attrs["data-record"]]
        return None

    def handle_starttag(self, tag: str, attrs_list: list[tuple[str, str | None]]) -> None:
        attrs = {k: v or "" for k, v in attrs_list}
        self.tags[tag] += 1
        self.urls += [attrs[k] for k in ("src", "href") if k in attrs]
        if tag not in ("br", "meta", "img", "input", "link"):  # HTML's void elements
            self.stack.append((tag, attrs))
        if "data-metric" in attrs:
            self.metrics[attrs["data-metric"]] = {"charts": [], "bins": [], "points": [],
                                                   "stats": {}, "values": {}, "svg": {},
                                                   "ci": {}, "text": []}
        if "data-record" in attrs:
            self.records[attrs["data-record"]] = {"worst": [], "text": [], "contexts": 0}
        card = self._card()
        if tag == "svg" and card is not None:
            kind = attrs["class"].split()[-1]
            card["charts"].append(kind)
            card["svg"][kind] = attrs
        if card is not None and "data-bin" in attrs:
            card["bins"].append(int(attrs["data-count"]))
        if card is not None and tag == "circle":
            card["points"].append((float(attrs["data-start"]), float(attrs["data-mean"]),
                                   int(attrs["data-count"])))
        if card is not None and attrs.get("data-stat") == "ci":
            card["ci"] = attrs
        if card is not None and "data-worst" in attrs:
            card["worst"].append(attrs["data-worst"])
        if card is not None and tag == "li" and any(t == "details" for t, _ in self.stack):
            if any(a.get("class") == "ctx" for _, a in self.stack):
                card["contexts"] += 1
        if "data-stat" in attrs:
            target = card["stats"] if card is not None else self.stats
            self._capture = (target, attrs["data-stat"], "")
            if card is not None and "data-value" in attrs:
                card["values"][attrs["data-stat"]] = float(attrs["data-value"])
        if "data-total" in attrs:
            self._capture = (self.totals, attrs["data-total"], "")

    def handle_endtag(self, tag: str) -> None:
        if self._capture is not None:
            target, key, text = self._capture
            target[key] = text.strip()
            self._capture = None
        while self.stack:
            if self.stack.pop()[0] == tag:
                break

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self.stack and self.stack[-1][0] == "script":
            self.scripts.append(data)
        if self._capture is not None:
            target, key, text = self._capture
            self._capture = (target, key, text + data)
        card = self._card()
        if card is not None and "text" in card:
            card["text"].append(data)


def _page(db: Path | str, *args: Any) -> tuple[str, Page]:
    if isinstance(db, str):  # a PostgreSQL URL: the page goes to a temporary folder
        import tempfile

        out = Path(tempfile.mkdtemp()) / "report.html"
    else:
        out = db.with_suffix(".html")
    result = CliRunner().invoke(main, ["report", "--db", str(db), "--html", str(out),
                                       *map(str, args)])
    assert result.exit_code == 0, result.output
    assert result.stdout == ""  # the page is the output; the message goes to stderr
    assert f"Wrote {out.resolve()}" in result.stderr
    html = out.read_text(encoding="utf-8")
    return html, Page(html)


def _report_json(db: Path, *args: Any) -> dict[str, Any]:
    result = CliRunner().invoke(main, ["report", "--db", str(db), "--json", *map(str, args)])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.fixture(params=["sqlite", "postgres"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Path | str:
    """The standard runs, on SQLite and on PostgreSQL (the same tests read both)."""
    path: Path | str = tmp_path / "scores.db"
    if request.param == "postgres":
        path = request.getfixturevalue("pg_url")
    build_db(path, standard_runs())
    return path


# -- the cards -------------------------------------------------------------------------------
def test_one_card_per_score_with_the_databases_numbers(db: Path) -> None:
    _, page = _page(db)
    names = {r["name"] for r in rows(db, "SELECT DISTINCT name FROM scores")}
    assert set(page.metrics) == names == {"token_f1", "faithfulness", "test_html_answer_length"}
    for name, card in page.metrics.items():
        assert sorted(card["charts"]) == ["hist", "timeline"], name  # one of each per score
        ok = rows(db, "SELECT value, label, created_at FROM scores WHERE name=? AND"
                      " status='ok' ORDER BY value", name)
        values = [r["value"] for r in ok]
        errors = rows(db, "SELECT count(*) AS n FROM scores WHERE name=? AND status='error'",
                      name)[0]["n"]
        assert card["stats"]["count"] == str(len(values))
        assert card["values"]["mean"] == pytest.approx(statistics.fmean(values))
        assert card["stats"]["mean"] in (f"{statistics.fmean(values):.3f}",
                                          f"{statistics.fmean(values):,.1f}")
        assert card["stats"]["errors"] == str(errors)
        fails = sum(r["label"] == "fail" for r in ok)
        assert card["values"]["fail_rate"] == pytest.approx(fails / len(values))
        assert card["stats"]["fail_rate"] == f"{100 * fails / len(values):.1f}%"
        if all(0 <= v <= 1 for v in values):
            # percentiles come from the rollups' 100 bins over [0, 1]: within half a bin
            assert card["values"]["p50"] == pytest.approx(statistics.median(values),
                                                          abs=0.005 + 1e-9)
        # each mean with its 95 % interval (Student t over the exact Σx, Σx²)
        sd = statistics.stdev(values)
        half = _t975(len(values) - 1) * sd / math.sqrt(len(values))
        ci = card["ci"]
        assert (float(ci["data-lo"]), float(ci["data-hi"])) == pytest.approx(
            (statistics.fmean(values) - half, statistics.fmean(values) + half))
        # Histogram: every ok value in exactly one bin.
        assert len(card["bins"]) == 10 and sum(card["bins"]) == len(values)
    f1 = page.metrics["token_f1"]
    assert f1["stats"]["errors"] == "1" and f1["stats"]["skipped"] == "1"
    assert page.totals["records"] == "30" and page.totals["errors"] == "1"
    assert page.totals["scores"] == str(rows(db, "SELECT count(*) AS n FROM scores")[0]["n"])


def test_histogram_bins_are_exact(db: Path) -> None:
    _, page = _page(db)
    ok = rows(db, "SELECT value FROM scores WHERE name='token_f1' AND status='ok'")
    expected = [0] * 10
    for r in ok:  # [0, 1] in tenths, 1.0 in the last bin; 0.3 is in bin 3 (no float slip)
        expected[min(int(round(r["value"] * 10, 9)), 9)] += 1
    assert page.metrics["token_f1"]["bins"] == expected
    # The rollups bin [0, 1]: values beyond it (lengths) are counted in the end bin, and the
    # card says so.
    lengths = [r["value"] for r in rows(
        db, "SELECT value FROM scores WHERE name='test_html_answer_length'")]
    svg = page.metrics["test_html_answer_length"]["svg"]["hist"]
    assert (float(svg["data-lo"]), float(svg["data-hi"])) == (0.0, 1.0)
    assert min(lengths) > 1
    assert page.metrics["test_html_answer_length"]["bins"] == [0] * 9 + [len(lengths)]
    assert "outside [0, 1]" in " ".join(page.metrics["test_html_answer_length"]["text"])


def test_histogram_function_edges(tmp_path: Path) -> None:
    runs = [Run(query=f"q{i}", answer="a", age_h=1, scores={"token_f1": v})
            for i, v in enumerate([0.0, 0.3, 0.7, 0.99999, 1.0, 0.5, 0.5])]
    build_db(tmp_path / "h.db", runs)
    conn = open_db(tmp_path / "h.db")
    h = histogram(conn, "token_f1")
    assert h is not None and (h.lo, h.hi) == (0.0, 1.0)
    assert h.counts == [1, 0, 0, 1, 0, 2, 0, 1, 0, 2]
    assert h.failed == [1, 0, 0, 1, 0, 0, 0, 0, 0, 0]  # 0.5 passes: the threshold is inclusive
    assert histogram(conn, "no_such_score") is None
    assert histogram(conn, "token_f1", since=time.time()) is None
    conn.close()


def test_mean_over_time_per_hour(db: Path) -> None:
    _, page = _page(db)
    ok = rows(db, "SELECT name, value, created_at FROM scores WHERE status='ok'")
    span = (min(r["created_at"] for r in ok), max(r["created_at"] for r in ok))
    assert pick_bucket(*span) == (3600, "hour")  # 30 hours of data: hourly points
    for name, card in page.metrics.items():
        buckets: dict[float, list[float]] = defaultdict(list)
        for r in ok:
            if r["name"] == name:
                buckets[r["created_at"] // 3600 * 3600].append(r["value"])
        got = card["points"]
        assert [p[0] for p in got] == sorted(buckets)
        for start, mean, count in got:
            assert count == len(buckets[start])
            assert mean == pytest.approx(statistics.fmean(buckets[start]))
        assert card["svg"]["timeline"]["data-points"] == str(len(buckets))


def test_pick_bucket_grows_with_the_span() -> None:
    t = 1_800_000_000.0
    # A short run (the demo scores in a second or two) still gets a line, not one dot.
    assert pick_bucket(t, t + 1.5) == (0.05, "50 ms")
    assert pick_bucket(t, t + 5) == (0.25, "250 ms")
    assert pick_bucket(t, t + 30) == (1, "second")
    assert pick_bucket(t, t + 40 * 60) == (60, "minute")
    assert pick_bucket(t, t + 3 * HOUR)[1] == "5 minutes"
    assert pick_bucket(t, t + 40 * HOUR) == (3600, "hour")
    assert pick_bucket(t, t + 20 * 86400) == (86400, "day")
    assert pick_bucket(t, t + 400 * 86400) == (7 * 86400, "week")


# -- worst records ---------------------------------------------------------------------------
def test_worst_records_once_each_with_contexts_and_explanations(db: Path) -> None:
    html, page = _page(db, "--worst", 2)
    rep = _report_json(db, "--worst", 2)
    expected: dict[str, set[str]] = defaultdict(set)
    for name, items in rep["worst"].items():
        for w in items:
            expected[w["record_id"]].add(name)
    assert {rid: set(r["worst"]) for rid, r in page.records.items()} == expected
    for rid, rec in page.records.items():
        text = " ".join(rec["text"])
        stored = rows(db, "SELECT * FROM records WHERE record_id=?", rid)[0]
        assert stored["answer"] in text
        assert rec["contexts"] == stored["n_contexts"]
        for c in json.loads(stored["contexts"]):
            assert c["text"] in text
        for s in rows(db, "SELECT name, explanation, error FROM scores WHERE record_id=?", rid):
            assert (s["explanation"] or s["error"].split("\n")[0]) in text
    # The worst of a lower-is-better score are the highest values.
    longest = max(r["value"] for r in rows(
        db, "SELECT value FROM scores WHERE name='test_html_answer_length'"))
    assert [w["value"] for w in rep["worst"]["test_html_answer_length"]][0] == longest
    # Each card links to its worst records.
    for items in rep["worst"].values():
        for w in items:
            assert f'href="#rec-{w["record_id"]}"' in html


def test_user_text_is_escaped(db: Path) -> None:
    html, page = _page(db, "--worst", 30)
    assert "<script>alert" not in html and "</details> for more" not in html
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in html
    assert "&lt;b&gt;S&lt;/b&gt;" in html
    # Parsed back, the text is exactly what the app captured, and the only script is ours.
    text = "".join(page.text)
    assert NASTY_QUERY in text and NASTY_CONTEXT in text
    assert page.tags["script"] == 1 and "alert" not in "".join(page.scripts)
    assert "<b>S</b>" not in html


def test_the_page_is_self_contained(db: Path) -> None:
    html, page = _page(db)
    assert page.tags["link"] == page.tags["img"] == page.tags["iframe"] == 0
    assert all(u.startswith("#") for u in page.urls), page.urls
    assert not re.search(r"https?://", html)
    # two charts per score card, and one trend chart per score
    assert "<style>" in html and page.tags["svg"] == 3 * len(page.metrics)


# -- cost ------------------------------------------------------------------------------------
def test_cost_without_and_with_judge_calls(db: Path, tmp_path: Path) -> None:
    _, page = _page(db)
    app = rows(db, "SELECT sum(input_tokens) AS i, sum(output_tokens) AS o,"
                   " count(input_tokens) AS n, count(*) AS total FROM records")[0]
    assert page.stats["app_input_tokens"] == f"{app['i']:,}"
    assert page.stats["app_output_tokens"] == f"{app['o']:,}"
    assert page.stats["app_records"] == f"{app['n']} / {app['total']}"
    # faithfulness is a judge metric, but this database logged no judge calls.
    n_judged = rows(db, "SELECT count(*) AS n FROM scores WHERE name='faithfulness'")[0]["n"]
    assert f"{n_judged} judge scores, but no judge calls logged" in "".join(page.text)
    local = tmp_path / "local.db"
    build_db(local, [Run(query="q", answer="a", age_h=1, scores={"token_f1": 0.5})])
    assert "No judge calls in this window" in "".join(_page(local)[1].text)

    runs = standard_runs()
    calls = [dict(record_id=f"{i + 1:032x}-{i + 1:016x}", step=step, model=model,
                  input_tokens=400 + i, output_tokens=50, latency_ms=120.0,
                  cost_usd=None if model == "local-llama" else 0.001 * (i + 1),
                  error="RateLimitError" if i == 3 and step == "statements" else None)
             for i in range(len(runs)) for step, model in (("statements", "gpt-x"),
                                                          ("binary", "local-llama"))]
    judged = tmp_path / "judged.db"
    build_db(judged, runs, judge_calls=calls)
    _, page = _page(judged)
    assert page.stats["judge_calls"] == f"{len(calls):,}"
    assert page.stats["judge_tokens"] == f"{sum(c['input_tokens'] + 50 for c in calls):,}"
    cost = math.fsum(c["cost_usd"] for c in calls if c["cost_usd"] is not None)
    assert page.stats["judge_cost_usd"] == f"${cost:,.4f}"
    # --since keeps the calls of the window only (they are at their record's time).
    _, recent = _page(judged, "--since", "10h")
    in_window = [c for c, r in zip(calls, [r for r in runs for _ in range(2)])
                 if r.age_h < 10]
    assert recent.stats["judge_calls"] == str(len(in_window))


# -- the command -----------------------------------------------------------------------------
def test_since_limits_every_number(db: Path) -> None:
    _, page = _page(db, "--since", "10h")
    cutoff = time.time() - 10 * HOUR
    assert page.totals["records"] == str(rows(
        db, "SELECT count(*) AS n FROM records WHERE created_at >= ?", cutoff)[0]["n"])
    for name, card in page.metrics.items():
        n = rows(db, "SELECT count(*) AS n FROM scores WHERE name=? AND status='ok'"
                     " AND created_at >= ?", name, cutoff)[0]["n"]
        assert card["stats"]["count"] == str(n) and sum(card["bins"]) == n
        assert sum(p[2] for p in card["points"]) == n
        assert all(p[0] >= cutoff // 3600 * 3600 for p in card["points"])


def test_empty_database_and_stdout(tmp_path: Path) -> None:
    empty = tmp_path / "empty.db"
    Store(empty).close()
    _, page = _page(empty)
    assert page.metrics == {} and page.records == {}
    assert "No records yet." in "".join(page.text) and page.totals["records"] == "0"
    result = CliRunner().invoke(main, ["report", "--db", str(empty), "--html", "-"])
    assert result.exit_code == 0 and result.stdout.startswith("<!doctype html>")
    assert result.stderr == ""


def test_html_and_json_together_is_a_usage_error(db: Path, tmp_path: Path) -> None:
    out = tmp_path / "x.html"
    result = CliRunner().invoke(main, ["report", "--db", str(db), "--json", "--html", str(out)])
    assert result.exit_code == 2 and "cannot be combined" in result.output
    assert not out.exists()
    result = CliRunner().invoke(main, ["report", "--db", str(tmp_path / "nope.db"), "--html",
                                       str(out)])
    assert result.exit_code == 2 and "database not found" in result.output
    assert not out.exists()
    result = CliRunner().invoke(main, ["report", "--db", str(db), "--html",
                                       str(tmp_path / "no-such-dir" / "x.html")])
    assert result.exit_code == 2 and "no-such-dir" in result.output
    assert not any(p.name.endswith(".tmp") for p in tmp_path.rglob("*"))


def test_demo_database_end_to_end(tmp_path: Path) -> None:
    pytest.importorskip("langchain_core")
    demo = tmp_path / "demo.db"
    result = CliRunner().invoke(main, ["demo", "--db", str(demo), "--n", "6", "--worst", "0"])
    assert result.exit_code == 0, result.output
    html, page = _page(demo)
    names = {r["name"] for r in rows(demo, "SELECT DISTINCT name FROM scores")}
    assert set(page.metrics) == names and len(names) >= 9
    assert all(sorted(c["charts"]) == ["hist", "timeline"] for c in page.metrics.values())
    assert all(sum(c["bins"]) == 6 for c in page.metrics.values())
    assert page.records  # worst records with their contexts
    assert all(r["contexts"] > 0 for r in page.records.values())
    # Scored within a few seconds: the time bucket follows that span, so the chart has
    # points to join (not one dot for "this minute").
    ok = rows(demo, "SELECT min(created_at) AS a, max(created_at) AS b FROM scores")[0]
    bucket_s, label = pick_bucket(ok["a"], ok["b"])
    assert bucket_s < 60 and f"mean per {label}" in html
    if ok["b"] - ok["a"] > 2 * bucket_s:
        assert max(len(c["points"]) for c in page.metrics.values()) > 1
    # Yes/no metrics: a rate and two bars (0 · no, 1 · yes), no percentiles, no threshold.
    for name in ("exact_match", "rgb_accuracy", "rgb_rejection"):
        card = page.metrics[name]
        values = [r["value"] for r in rows(demo, "SELECT value FROM scores WHERE name=?", name)]
        assert card["bins"] == [values.count(0.0), values.count(1.0)]
        assert card["values"]["rate"] == pytest.approx(values.count(1.0) / 6)
        assert card["stats"]["yes"] == f"{values.count(1.0)} / 6"
        assert "p90" not in card["stats"] and "mean" not in card["stats"]
        section = html.split(f'data-metric="{name}"', 1)[1].split("</section>", 1)[0]
        assert 'class="thr"' not in section and "1 · yes" in section
    assert "p90" in page.metrics["token_f1"]["stats"]
    # Plain legends, nothing left dangling.
    text = " ".join(" ".join(page.text).split())
    assert "charts: distribution, " not in html and "among the worst of ·" not in text
    assert f"then the mean per {label} over time (UTC)" in text


def test_mostly_skipped_metrics_say_why_on_the_page(tmp_path: Path) -> None:
    runs = standard_runs(10)
    for run in runs[1:]:  # most records have no answer to score
        run.scores.pop("test_html_answer_length", None)
        run.skipped["test_html_answer_length"] = "record has no answer"
    db = tmp_path / "skips.db"
    build_db(db, runs)
    html, page = _page(db)
    n_skipped = len(runs) - 1
    banner = html.split('class="card skipbanner"', 1)[1].split("</section>", 1)[0]
    assert html.index('class="card skipbanner"') < html.index('class="grid"')  # above cards
    assert 'data-skipped="test_html_answer_length"' in banner  # the only one mostly skipped
    assert f"record has no answer ({n_skipped})" in banner
    card = html.split('data-metric="test_html_answer_length"', 1)[1].split("</section>", 1)[0]
    assert "data-skipnote" in card and "record has no answer" in card
    assert "data-skipnote" not in html.split('data-metric="token_f1"', 1)[1].split(
        "</section>", 1)[0]
