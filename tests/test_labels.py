"""Human labels (issue 17, part 1): ``ts.add_label`` / ``tracescore.add_label`` checks and
storage on both backends, replacement by the same annotator, the metric version a label is
bound to, retention keeping labelled traces, and ``tracescore label --import/--export``.
(The terminal queue itself: tests/test_label_tui.py; the v3 → v4 upgrade and
``copy-to-postgres``: tests/test_migrations.py.)"""

from __future__ import annotations

import csv
import json
import math
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import rows, run_cli

import tracescore
from tracescore.store import open_store
from tracescore.store.retention import Retention, prune
from tracescore.testing import ScriptedMetric


class Grounded(ScriptedMetric):
    """A yes/no metric at version 3."""

    name = "grounded"
    version = "3"
    binary = True


class Quality(ScriptedMetric):
    """A numeric metric that declares its range."""

    name = "quality"
    version = "2"
    value_range = (1.0, 5.0)


def _metrics() -> list[Any]:
    return [Grounded(lambda r: 1.0), Quality(lambda r: 4.0), ScriptedMetric(name="free")]


def _cli(*args: Any, input: str | None = None) -> Any:
    """``tracescore ARGS`` in this process, ``input`` on its stdin."""
    from click.testing import CliRunner

    from tracescore.cli import main

    return CliRunner().invoke(main, [str(a) for a in args], input=input)


def _traces(ts: Any, n: int) -> list[str]:
    return [ts.log_record(query=f"q{i}", answer=f"a{i}").trace_id for i in range(n)]


def test_add_label_refuses_bad_input_at_the_api(tmp_path: Path) -> None:
    ts = tracescore.init(db=tmp_path / "ts.db", metrics=_metrics())
    try:
        [tid] = _traces(ts, 1)
        with pytest.raises(ValueError, match="unknown score name 'nope'"):
            ts.add_label(tid, "nope", 1)
        for bad in (0.5, 2, "maybe"):
            with pytest.raises(ValueError, match="yes/no score"):
                ts.add_label(tid, "grounded", bad)
        with pytest.raises(TypeError, match="yes/no score"):
            ts.add_label(tid, "grounded", [1])
        for bad in (math.nan, math.inf, -math.inf):
            with pytest.raises(ValueError, match="finite"):
                ts.add_label(tid, "free", bad)
        for bad_type in (True, None, [0.5]):
            with pytest.raises(TypeError, match="numeric score"):
                ts.add_label(tid, "free", bad_type)
        with pytest.raises(ValueError, match=r"a number in \[1, 5\]"):
            ts.add_label(tid, "quality", 0.5)
        with pytest.raises(ValueError, match="32 hex"):
            ts.add_label("not-a-trace", "grounded", True)
        with pytest.raises(TypeError, match="annotator"):
            ts.add_label(tid, "grounded", True, annotator=7)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="comment"):
            ts.add_label(tid, "grounded", True, comment=b"x")  # type: ignore[arg-type]
        # a registered (built-in) metric not configured here is known too
        ts.add_label(tid, "exact_match", "yes")
        assert ts.flush(20)
    finally:
        ts.shutdown()
    got = open_store(str(tmp_path / "ts.db")).labels()
    assert [(r["name"], r["value"]) for r in got] == [("exact_match", 1.0)]


def test_labels_are_stored_bound_to_the_score_version_on_both_backends(db: str) -> None:
    ts = tracescore.init(db=db, metrics=_metrics())
    try:
        t1, t2 = _traces(ts, 2)
        assert ts.flush(20)
        ts.add_label(t1, "grounded", "no", annotator="ann", comment="cites nothing")
        ts.add_label(t1, "grounded", True, annotator="bob")
        ts.add_label(t1, "quality", 3)
        ts.add_label(t1.upper(), "grounded", 1, annotator="ann", comment="on second look")
        ts.add_label(t2, "free", -0.25)
        ts.add_label("f" * 32, "free", 0.5)  # a trace nobody scored: no version to bind
        assert ts.flush(20)
    finally:
        ts.shutdown()
    store = open_store(db)
    try:
        got = {(r["trace_id"], r["name"], r["annotator"]): r for r in store.labels()}
        assert len(got) == 5  # "ann" relabelled t1's grounded: replaced, not added
        ann = got[(t1, "grounded", "ann")]
        assert (ann["value"], ann["comment"], ann["metric_version"], ann["source"]) == \
            (1.0, "on second look", "3", "manual")
        assert got[(t1, "grounded", "bob")]["value"] == 1.0  # another annotator: own row
        assert (got[(t1, "quality", "")]["value"], got[(t1, "quality", "")]["metric_version"]) \
            == (3.0, "2")
        assert got[(t2, "free", "")]["value"] == -0.25
        assert got[("f" * 32, "free", "")]["metric_version"] is None
        assert [r["name"] for r in store.labels(name="quality")] == ["quality"]
        assert store.labels(since=time.time() + 60) == []
        # the module-level form writes at once; a custom metric that only the metrics table
        # knows (declared by the app's process) is accepted in its scale
        tracescore.add_label(t2, "grounded", False, "cli", db=db)
        with pytest.raises(ValueError, match="yes/no score"):
            tracescore.add_label(t2, "grounded", 0.3, db=db)
        assert [(r["value"], r["annotator"]) for r in store.labels(name="grounded")
                if r["trace_id"] == t2] == [(0.0, "cli")]
    finally:
        store.close()


def test_plans_and_canary_runs_round_trip(db: str) -> None:
    store = open_store(db)
    try:
        plan = [{"trace_id": "a" * 32, "name": "grounded", "stratum": "judge=1", "stratum_size":
                 40, "stratum_draws": 2},
                {"trace_id": "b" * 32, "name": "grounded", "stratum": "judge=0",
                 "stratum_size": 10, "stratum_draws": 1}]
        assert store.add_label_plan("p1", plan) == 2
        got = store.label_plan("p1")
        assert [(r["position"], r["trace_id"], r["stratum"], r["stratum_size"],
                 r["stratum_draws"]) for r in got] == [
            (0, "a" * 32, "judge=1", 40, 2), (1, "b" * 32, "judge=0", 10, 1)]
        store.add_label_plan("p1", plan[:1])  # the same id again: replaced
        assert len(store.label_plan("p1")) == 1 and store.label_plan("other") == []
        store.add_canary_run({"at": 100.0, "judge_model": "gpt-x", "reported_model": "gpt-x-2",
                              "prompt_version": "abc", "trigger": "startup", "cases": 8,
                              "agreed": 7, "yes_share": 0.5, "degenerate": False,
                              "reason": None, "details": [{"expected": 1, "got": 0}]})
        store.add_canary_run({"at": 200.0, "judge_model": "other", "trigger": "manual"})
        [run] = store.canary_runs(judge_model="gpt-x")
        assert (run["reported_model"], run["agreed"], run["degenerate"], run["details"]) == \
            ("gpt-x-2", 7, 0, [{"expected": 1, "got": 0}])
        assert [r["judge_model"] for r in store.canary_runs(since=150.0)] == ["other"]
        with pytest.raises(ValueError, match="unknown canary column"):
            store.add_canary_run({"model": "x"})
    finally:
        store.close()


def test_retention_keeps_labels_and_labelled_traces(db: str) -> None:
    ts = tracescore.init(db=db, metrics=_metrics())
    try:
        kept, gone = _traces(ts, 2)
        assert ts.flush(20)
        ts.add_label(kept, "grounded", True, annotator="ann")
        assert ts.flush(20)
    finally:
        ts.shutdown()
    store = open_store(db)
    try:
        res = prune(store, Retention(max_age_s=86400), now=time.time() + 10 * 86400)
    finally:
        store.close()
    assert res.records == 1
    assert [r["trace_id"] for r in rows(db, "SELECT trace_id FROM records")] == [kept]
    assert {r["name"] for r in rows(db, "SELECT name FROM scores WHERE trace_id = ?", kept)} \
        == {"grounded", "quality", "free"}
    assert rows(db, "SELECT trace_id, value FROM labels") == [{"trace_id": kept, "value": 1.0}]
    assert rows(db, "SELECT count(*) AS n FROM records WHERE trace_id = ?", gone) == [{"n": 0}]


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_import_export_round_trip(db: str, tmp_path: Path, fmt: str) -> None:
    ts = tracescore.init(db=db, metrics=_metrics())
    try:
        t1, t2 = _traces(ts, 2)
        assert ts.flush(20)
        ts.add_label(t1, "grounded", True, annotator="ann", comment='say "hi", then,\nbye')
        ts.add_label(t2, "quality", 4.5, annotator="bob")
        assert ts.flush(20)
    finally:
        ts.shutdown()
    out = tmp_path / f"labels.{fmt}"
    result = run_cli("label", "--db", db, "--export", out)
    assert result.exit_code == 0, result.output
    assert "2 labels" in result.output
    if fmt == "jsonl":
        exported = [json.loads(line) for line in out.read_text().splitlines()]
    else:
        with out.open(newline="") as f:
            exported = list(csv.DictReader(f))
    assert [list(r) for r in exported] == [["trace_id", "record_id", "name", "value",
                                            "annotator", "comment", "created_at"]] * 2
    assert {r["trace_id"] for r in exported} == {t1, t2}

    # into a fresh database of the other kind of file: the same labels
    target = str(tmp_path / "other.db")
    declared = open_store(target)  # where the app runs: its metrics are declared there
    declared.register_metrics(_metrics())
    declared.close()
    result = run_cli("label", "--db", target, "--import", out)
    assert result.exit_code == 0, result.output
    assert "imported 2 labels" in result.output

    def key(r: dict[str, Any]) -> tuple[Any, ...]:
        return (r["trace_id"], r["name"], float(r["value"]), r["annotator"], r["comment"],
                round(float(r["created_at"]), 3))
    source_rows = open_store(db).labels()
    target_store = open_store(target)
    assert sorted(map(key, target_store.labels())) == sorted(map(key, source_rows))
    assert {r["source"] for r in target_store.labels()} == {"import"}
    # importing the same file again replaces (same trace, name, annotator): still two
    assert run_cli("label", "--db", target, "--import", out).exit_code == 0
    assert len(target_store.labels()) == 2
    target_store.close()


def test_import_refuses_bad_rows_and_writes_none(tmp_path: Path) -> None:
    db = tmp_path / "ts.db"
    open_store(str(db)).close()
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"trace_id": "a" * 32, "name": "exact_match", "value": 1}) + "\n"
                   + json.dumps({"trace_id": "a" * 32, "name": "exact_match",
                                 "value": "NaN"}) + "\n")
    result = run_cli("label", "--db", db, "--import", bad)
    assert result.exit_code == 2
    assert "line 2" in result.output and "exact_match" in result.output
    assert rows(db, "SELECT count(*) AS n FROM labels") == [{"n": 0}]
    other = tmp_path / "labels.txt"
    other.write_text("x")
    result = run_cli("label", "--db", db, "--import", other)
    assert result.exit_code == 2 and ".jsonl or .csv" in result.output


def test_a_plan_is_stored_and_walked_then_finished_later(tmp_path: Path) -> None:
    """``--plan N``: N traces drawn stratified over the judge's verdict, stored in
    ``label_plan`` with their strata, walked in plan order; ``--plan-id`` finishes it."""
    db = tmp_path / "ts.db"
    verdict = {f"q{i}": float(i % 3 == 0) for i in range(12)}  # 4 yes, 8 no
    ts = tracescore.init(db=db, metrics=[Grounded(lambda r: verdict[r.query])])
    for q in verdict:
        ts.log_record(query=q, answer=f"answer to {q}")
    assert ts.flush(20)
    ts.shutdown()

    first = _cli("label", "--db", db, "--metric", "grounded", "--plan", "4", "--seed", "7",
                 "--annotator", "ann", input="y\nn\nq\n")
    assert first.exit_code == 0, first.output
    [plan_id] = {r["plan_id"] for r in rows(db, "SELECT plan_id FROM label_plan")}
    assert f"--plan-id {plan_id}" in first.output and "2 labels saved by ann." in first.output
    plan = open_store(str(db)).label_plan(plan_id)
    assert len(plan) == 4 and {r["stratum"] for r in plan} == {"judge < 0.5", "judge >= 0.5"}
    assert {(r["stratum"], r["stratum_size"], r["stratum_draws"]) for r in plan} == {
        ("judge < 0.5", 8, 2), ("judge >= 0.5", 4, 2)}
    # the judge's verdict is not shown: only the records' own text
    assert "judge" not in first.output

    rest = _cli("label", "--db", db, "--metric", "grounded", "--plan-id", plan_id,
                "--annotator", "ann", input="y\ny\n")
    assert rest.exit_code == 0, rest.output
    assert "── 1/2 ──" in rest.output and "2 labels saved by ann." in rest.output
    got = open_store(str(db)).labels(name="grounded")
    assert sorted(r["trace_id"] for r in got) == sorted(r["trace_id"] for r in plan)
    assert {r["source"] for r in got} == {f"plan:{plan_id}"}
    # in plan order: the first two positions got y, n
    by_trace = {r["trace_id"]: r["value"] for r in got}
    assert [by_trace[r["trace_id"]] for r in plan] == [1.0, 0.0, 1.0, 1.0]
    done = run_cli("label", "--db", db, "--metric", "grounded", "--plan-id", plan_id,
                   "--annotator", "ann")
    assert done.exit_code == 0 and "nothing to label" in done.output


def test_label_command_usage_errors(tmp_path: Path) -> None:
    db = tmp_path / "ts.db"
    assert run_cli("label", "--db", db, "--metric", "x").exit_code == 2  # no database
    open_store(str(db)).close()
    for args, says in ((("--metric", "nope"), "unknown score name 'nope'"),
                       ((), "--metric NAME"),
                       (("--metric", "exact_match", "--plan-id", "none"), "no plan 'none'"),
                       (("--metric", "exact_match", "--plan", "3"), "cannot plan 3 labels")):
        result = run_cli("label", "--db", db, *args)
        assert result.exit_code == 2 and says in result.output, (args, result.output)


# -- issue 17, outside tester's defects ------------------------------------------------------
def _two_record_trace(db: str) -> tuple[str, str, str]:
    """A trace with two records (the judge says yes to the older, no to the newer), and a
    one-record trace; (trace, older record id, newer record id)."""
    ts = tracescore.init(db=db, metrics=[Grounded(lambda r: float(r.query == "older"))])
    try:
        trace = "3" * 32
        a = ts.log_record(query="older", answer="A", trace_id=trace, span_id="a" * 16)
        assert ts.flush(20)
        time.sleep(0.01)  # distinct created_at: "newer" is newer
        b = ts.log_record(query="newer", answer="B", trace_id=trace, span_id="b" * 16)
        ts.log_record(query="alone", answer="C")
        assert ts.flush(20)
    finally:
        ts.shutdown()
    return trace, a.record_id, b.record_id


def test_a_label_is_about_one_record_of_a_two_record_trace(db: str) -> None:
    """Each record of a two-record trace is its own label: the queue stores both (the count
    printed is what is stored) and each pairs with its own record's judge score."""
    from tracescore.reports.trust import read_pairs
    from tracescore.store.compat import connect_reader

    trace, older, newer = _two_record_trace(db)
    out = _cli("label", "--db", db, "--metric", "grounded", "--annotator", "r",
               input="n\nn\nn\n")
    assert out.exit_code == 0, out.output
    assert "3 labels saved by r." in out.output
    got = {r["record_id"]: r["value"] for r in open_store(db).labels()}
    assert len(got) == 3 and got[newer] == 0.0 and got[older] == 0.0
    assert out.output.index("newer") < out.output.index("older")  # newest first
    conn = connect_reader(db)
    try:
        pairs = {p.record_id: (p.judge, p.human) for p in read_pairs(conn, "grounded").pairs}
    finally:
        conn.close()
    assert pairs[older] == (1.0, 0.0) and pairs[newer] == (0.0, 0.0)
    # by record id (as `tracescore show` prints it) and by trace id (its newest record)
    tracescore.add_label(older, "grounded", True, "s", db=db)
    tracescore.add_label(trace, "grounded", True, "t", db=db)
    mine = {r["annotator"]: r["record_id"] for r in open_store(db).labels()
            if r["annotator"] in ("s", "t")}
    assert mine == {"s": older, "t": newer}
    with pytest.raises(ValueError, match="record id"):
        tracescore.add_label(f"{trace}-xyz", "grounded", True, db=db)
    # a plan draws records: both records of the trace are candidates, each with its id
    plan = _cli("label", "--db", db, "--metric", "grounded", "--plan", "3", "--seed", "1",
                "--annotator", "p", input="q\n")
    assert plan.exit_code == 0, plan.output
    planned = rows(db, "SELECT trace_id, record_id FROM label_plan")
    assert sorted(r["record_id"] for r in planned if r["trace_id"] == trace) == \
        sorted([older, newer])


def test_labels_out_of_a_metrics_range_are_refused(tmp_path: Path) -> None:
    """Built-in 0-1 metrics declare value_range: faithfulness=5, -3 or 1e308 is refused."""
    from tracescore.labels import scale_for
    from tracescore.metrics import registry
    from tracescore.metrics.base import Metric

    assert Metric.value_range is None
    for name in ("faithfulness", "answer_relevance", "context_precision", "token_f1", "bleu"):
        assert registry._REGISTRY[name].value_range == (0.0, 1.0), name
    db = tmp_path / "ts.db"
    ts = tracescore.init(db=db, metrics=[Grounded(lambda r: 1.0)])
    tid = ts.log_record(query="q", answer="a").trace_id
    assert ts.flush(20)
    ts.shutdown()
    for bad in (5, -3, 1e308):
        with pytest.raises(ValueError, match=r"faithfulness.*a number in \[0, 1\]"):
            tracescore.add_label(tid, "faithfulness", bad, db=db)
    tracescore.add_label(tid, "faithfulness", 0.75, db=db)
    assert scale_for("geval").low == 1.0 and scale_for("geval").high == 5.0
    bad_file = tmp_path / "bad.jsonl"
    bad_file.write_text(json.dumps({"trace_id": tid, "name": "faithfulness", "value": 5}))
    result = run_cli("label", "--db", db, "--import", bad_file)
    assert result.exit_code == 2 and "[0, 1]" in result.output
    assert [r["value"] for r in open_store(str(db)).labels()] == [0.75]


class AnyRecord(Grounded):
    """Scores a record whatever it holds (text or not), like a metadata-based check."""

    requires = frozenset()


def test_a_plan_leaves_out_records_without_text(tmp_path: Path) -> None:
    db = tmp_path / "ts.db"
    ts = tracescore.init(db=db, metrics=[AnyRecord(lambda r: float(len(r.query or "") % 2))])
    for i in range(6):
        ts.log_record(query="q" * (i + 1), answer="a")
    assert ts.flush(20)
    ts.shutdown()
    hidden = tracescore.init(db=db, metrics=[AnyRecord(lambda r: 1.0)], capture_content=False)
    secret = {hidden.log_record(query=f"secret {i}", answer="s").record_id for i in range(4)}
    assert hidden.flush(20)
    hidden.shutdown()
    out = _cli("label", "--db", db, "--metric", "grounded", "--plan", "10", "--seed", "3",
               input="q\n")
    assert out.exit_code == 0, out.output
    assert "4 records without text to label left out" in out.output
    planned = {r["record_id"] for r in rows(db, "SELECT record_id FROM label_plan")}
    assert len(planned) == 6 and not planned & secret


def test_import_of_labels_for_unknown_traces_says_so(tmp_path: Path) -> None:
    db = tmp_path / "ts.db"
    ts = tracescore.init(db=db, metrics=[Grounded(lambda r: 1.0)])
    known = ts.log_record(query="q", answer="a").trace_id
    assert ts.flush(20)
    ts.shutdown()
    f = tmp_path / "l.jsonl"
    f.write_text("".join(json.dumps({"trace_id": t, "name": "grounded", "value": 1}) + "\n"
                         for t in [known, "a" * 32, "b" * 32, "c" * 32]))
    strict = run_cli("label", "--db", db, "--import", f, "--strict")
    assert strict.exit_code == 2 and "3 of 4 labels match no record" in strict.output
    assert rows(db, "SELECT count(*) AS n FROM labels") == [{"n": 0}]
    result = run_cli("label", "--db", db, "--import", f)
    assert result.exit_code == 0, result.output
    assert "imported 4 labels" in result.output and "3 of them match no record" in result.output
    cal = run_cli("calibrate", "--db", db)
    assert cal.exit_code == 0, cal.output
    assert "grounded (yes/no): 1 labelled record" in cal.output
    assert "3 labels match no scored record" in cal.output
    assert "No judge score has human labels yet" not in cal.output
    only_unknown = tmp_path / "u.db"
    ts = tracescore.init(db=only_unknown, metrics=[Grounded(lambda r: 1.0)])
    ts.log_record(query="q", answer="a")
    assert ts.flush(20)
    ts.shutdown()
    assert run_cli("label", "--db", only_unknown, "--import", f).exit_code == 0
    cal = run_cli("calibrate", "--db", only_unknown)
    assert "grounded: 4 labels match no scored record" in cal.output
    assert "No judge score has human labels yet" not in cal.output
    as_json = json.loads(run_cli("calibrate", "--db", only_unknown, "--json").output)
    assert as_json["labels"]["labels_matching_no_scored_record"] == {"grounded": 4}


@pytest.mark.parametrize("raw", [False, True])
def test_csv_export_neutralises_formulas_and_control_characters(tmp_path: Path,
                                                                raw: bool) -> None:
    db = tmp_path / "ts.db"
    ts = tracescore.init(db=db, metrics=[Grounded(lambda r: 1.0)])
    tid = ts.log_record(query="q", answer="a").trace_id
    assert ts.flush(20)
    ts.shutdown()
    evil = '=HYPERLINK("http://x","y")'
    tracescore.add_label(tid, "grounded", True, "@ann", comment=evil + " \x1b]0;T\x07", db=db)
    out = tmp_path / "l.csv"
    result = run_cli("label", "--db", db, "--export", out, *(["--raw-csv"] if raw else []))
    assert result.exit_code == 0, result.output
    with out.open(newline="") as f:
        [row] = list(csv.DictReader(f))
    if raw:
        assert row["comment"] == evil + " \x1b]0;T\x07" and row["annotator"] == "@ann"
    else:
        assert row["comment"] == "'" + evil + " \\x1b]0;T\\x07"
        assert row["annotator"] == "'@ann" and "\x1b" not in out.read_text()
    assert row["value"] == "1.0"  # numbers untouched


def test_numbers_of_any_kind_and_one_rule_for_api_and_import(tmp_path: Path) -> None:
    np = pytest.importorskip("numpy")
    from tracescore.labels import Scale, label_value

    yes_no, num = Scale("g", "g", True), Scale("f", "f", False, 0.0, 1.0)
    for v, want in ((np.bool_(True), 1.0), (np.bool_(False), 0.0), (np.int64(1), 1.0),
                    (np.float32(0.0), 0.0), ("yes", 1.0), ("1", 1.0), (" 0 ", 0.0)):
        assert label_value(v, yes_no) == want, v
    for v, want in ((np.int64(1), 1.0), (np.float64(0.25), 0.25), ("0.4", 0.4), (0, 0.0)):
        assert label_value(v, num) == want, v
    with pytest.raises(TypeError, match="numeric score"):
        label_value(np.bool_(True), num)  # a bool is not a number here, numpy's neither
    with pytest.raises(ValueError, match="yes/no"):
        label_value(np.float64(0.5), yes_no)
    # the API and an import accept the same values
    db = tmp_path / "ts.db"
    ts = tracescore.init(db=db, metrics=[Grounded(lambda r: 1.0), Quality(lambda r: 4.0)])
    a, b = (ts.log_record(query=f"q{i}", answer="a").trace_id for i in range(2))
    assert ts.flush(20)
    ts.add_label(a, "grounded", np.bool_(True))
    ts.add_label(a, "quality", "2.5")
    assert ts.flush(20)
    ts.shutdown()
    f = tmp_path / "l.jsonl"
    f.write_text(json.dumps({"trace_id": b, "name": "grounded", "value": True}) + "\n"
                 + json.dumps({"trace_id": b, "name": "quality", "value": "2.5"}) + "\n")
    assert run_cli("label", "--db", db, "--import", f).exit_code == 0
    got = {(r["trace_id"], r["name"]): r["value"] for r in open_store(str(db)).labels()}
    assert got == {(a, "grounded"): 1.0, (a, "quality"): 2.5, (b, "grounded"): 1.0,
                   (b, "quality"): 2.5}


def test_a_label_without_version_pairs_only_with_the_score_of_its_time(db: str) -> None:
    """A label written before its record was scored (no metric version) is bound, when read,
    to the version the record was being scored with then (its first scoring job): a later
    re-scoring by another metric version does not pair with it."""
    from tracescore.reports.trust import read_pairs
    from tracescore.store.compat import connect_reader

    def pairs() -> Any:
        conn = connect_reader(db)
        try:
            return read_pairs(conn, "quality")
        finally:
            conn.close()

    trace = "4" * 32
    store = open_store(db)
    store.add_labels([{"trace_id": trace, "name": "quality", "value": 2.0,
                       "created_at": time.time() - 60}])  # ahead of its record
    store.close()
    [label] = rows(db, "SELECT record_id, metric_version FROM labels")
    assert label == {"record_id": None, "metric_version": None}
    ts = tracescore.init(db=db, metrics=[Quality(lambda r: 4.0)])
    record_id = ts.log_record(query="q", answer="a", trace_id=trace).record_id
    assert ts.flush(20)
    ts.shutdown()
    [pair] = pairs().pairs
    assert (pair.judge, pair.human, pair.metric_version) == (4.0, 2.0, "2")
    # the metric moves to version 9 and re-scores the record: its score is another judgement
    later = time.time() + 5
    rows(db, "INSERT INTO jobs(record_id, metric, metric_version, status, created_at)"
         " VALUES (?, 'quality', '9', 'done', ?) RETURNING job_id", record_id, later)
    rows(db, "UPDATE scores SET metric_version = '9', value = 1.0, created_at = ?"
         " WHERE record_id = ? RETURNING score_id", later, record_id)
    lp = pairs()
    assert lp.pairs == [] and lp.stale == 1


def test_label_usage_seed_without_plan_and_missing_databases(tmp_path: Path) -> None:
    db = tmp_path / "ts.db"
    open_store(str(db)).close()
    seed = run_cli("label", "--db", db, "--metric", "exact_match", "--seed", "3")
    assert seed.exit_code == 2 and "--seed" in seed.output and "--plan" in seed.output
    missing = tmp_path / "nope.db"
    with pytest.raises(FileNotFoundError, match="database not found"):
        tracescore.add_label("a" * 32, "exact_match", True, db=missing)
    f = tmp_path / "l.jsonl"
    f.write_text(json.dumps({"trace_id": "a" * 32, "name": "exact_match", "value": 1}))
    result = run_cli("label", "--db", missing, "--import", f)
    assert result.exit_code == 2 and "database not found" in result.output
    assert not missing.exists()
    helptext = run_cli("label", "--help").output
    assert "release" in helptext and "segments" not in helptext
