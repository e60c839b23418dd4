"""Monitoring end to end: segments → rollups → report/compare/check → monitors → webhooks.

Real SQLite files and a real PostgreSQL (the ``db`` fixture), the real store API and the real
pipeline; the webhook receiver is a real HTTP server on 127.0.0.1. Data with known
distributions is written through the store's own write path with a controlled clock (the
store module's ``time``), so windows, hours and pruning are exercised as in production.
"""

from __future__ import annotations

import json
import random
import time as _time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from click.testing import CliRunner
from helpers import StoreClock, store_clock
from helpers import WebhookReceiver as _Hook

from tracescore.cli import main
from tracescore.monitor.config import monitors_from_objects
from tracescore.monitor.evaluate import GRACE_S, Evaluator
from tracescore.read.db import open_db
from tracescore.record import RagRecord
from tracescore.reports.compare import build_comparison
from tracescore.reports.report import build_report
from tracescore.sampling import Decision
from tracescore.score import Score
from tracescore.store import NewJob, open_store
from tracescore.store.segments import SegmentSpec

DAY = 86400.0
NOW = 1_780_000_000.0  # a fixed "now" (2026-05-28), an hour boundary plus nothing
METRICS = ("quality", "grounded")


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> StoreClock:
    return store_clock(monkeypatch, NOW - 10 * DAY)


def _register(store: Any) -> None:
    from tracescore.metrics.base import Metric

    class _M(Metric):  # a declaration only: direction, threshold, yes/no
        kind = "local"
        version = "1"
        requires = frozenset()

        def __init__(self, name: str, binary: bool) -> None:
            self.name = name
            self.binary = binary
            self.higher_is_better = True
            self.threshold = 0.5 if not binary else None
            self.description = name

        def score(self, record: RagRecord) -> Any:  # pragma: no cover - never scored
            raise NotImplementedError

    store.register_metrics([_M("quality", False), _M("grounded", True)])


def feed(db: str, clock: StoreClock, *, release: str, environment: str = "prod", n: int,
         start: float, spread: float, quality: Any, grounded: float, seed: int,
         errors: float = 0.0, metadata: dict[str, str] | None = None,
         keys: Sequence[str] = (), app_errors: float = 0.0) -> list[str]:
    """Write ``n`` records of ``release`` between ``start`` and ``start + spread`` through
    the store's write path, then score each (quality ~ ``quality(rng)``, grounded ~
    Bernoulli(``grounded``)); returns the trace ids."""
    rng = random.Random(seed)
    store = open_store(db)
    try:
        _register(store)
        spec = SegmentSpec(release=release, environment=environment, keys=tuple(keys))
        traces = []
        for i in range(n):
            t = start + spread * i / max(n, 1)
            clock.t = t
            trace = f"{seed:08x}{i:024x}"
            rec = RagRecord(trace_id=trace, span_id=f"{i:016x}", query=f"q{i}", answer="a",
                            end_time_ns=int(t * 1e9), start_time_ns=int((t - 0.5) * 1e9),
                            metadata=dict(metadata or {}), model="app-model",
                            error="Timeout" if rng.random() < app_errors else None)
            store.write_batch([(rec, Decision(0.1, METRICS))],
                              [NewJob(rec.record_id, m, "1") for m in METRICS], None,
                              segments=spec)
            jobs = store.lease_jobs("t", 10, 60.0, list(METRICS))
            done = []
            for j in jobs:
                if j.metric == "quality":
                    if rng.random() < errors:
                        s = Score.failed("quality", "boom", metric="quality")
                    else:
                        v = min(max(quality(rng), 0.0), 1.0)
                        s = Score("quality", v, label="pass" if v >= 0.5 else "fail",
                                  metric="quality")
                else:
                    s = Score("grounded", 1.0 if rng.random() < grounded else 0.0,
                              metric="grounded")
                done.append((j, [s]))
            store.complete_jobs("t", done, "none")
            traces.append(trace)
        return traces
    finally:
        store.close()


def beta(mean: float, k: float = 20.0) -> Any:
    return lambda rng: rng.betavariate(mean * k, (1 - mean) * k)


def _feed_two_releases(db: str, clock: StoreClock) -> None:
    feed(db, clock, release="v1", n=400, start=NOW - 10 * DAY, spread=5 * DAY,
         quality=beta(0.80), grounded=0.9, seed=1)
    feed(db, clock, release="v2", n=400, start=NOW - 5 * DAY, spread=5 * DAY - 60,
         quality=beta(0.72), grounded=0.8, seed=2, errors=0.05)


@pytest.fixture(scope="module")
def two_releases_template(request: pytest.FixtureRequest,
                          tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The two releases' database built once per module and backend (800 records through
    the write path cost up to 150 s a test on PostgreSQL on a loaded machine); each test
    gets a copy of it (``two_releases``). Backend → the template's SQLite path or database
    name, built at the first test that asks."""
    built: dict[str, str] = {}
    drops: list[Any] = []

    def build(backend: str) -> str:
        if backend in built:
            return built[backend]
        with pytest.MonkeyPatch.context() as mp:
            clock = store_clock(mp, NOW - 10 * DAY)
            if backend == "sqlite":
                path = str(tmp_path_factory.mktemp("two_releases") / "template.db")
                _feed_two_releases(path, clock)
                import sqlite3

                con = sqlite3.connect(path)
                con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                con.close()
                built[backend] = path
            else:
                from pg import create_database

                url, drop = create_database(request.getfixturevalue("pg_server"))
                drops.append(drop)
                _feed_two_releases(url, clock)
                built[backend] = urlsplit(url).path.lstrip("/")
        return built[backend]

    yield build  # type: ignore[misc]
    for drop in drops:
        drop()


@pytest.fixture
def two_releases(db: str, clock: StoreClock, two_releases_template: Any) -> str:
    """v1 (quality ~0.80, grounded 90 %) for days -10..-5, then v2 (quality ~0.72, grounded
    80 %) for days -5..-0; 400 records each (a copy of the module's template)."""
    if db.startswith("postgresql"):
        import psycopg
        from pg import with_db

        template = two_releases_template("postgres")
        name = urlsplit(db).path.lstrip("/")
        with psycopg.connect(with_db(db, "postgres"), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')  # type: ignore[arg-type]
            conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')  # type: ignore[arg-type]
    else:
        import shutil

        shutil.copyfile(two_releases_template("sqlite"), db)
    clock.t = NOW
    return db


def _compare(db: str, **kw: Any) -> Any:
    conn = open_db(db)
    try:
        return build_comparison(conn, now=NOW, **kw)
    finally:
        conn.close()


def test_compare_releases_finds_the_regression(two_releases: str) -> None:
    c = _compare(two_releases)
    assert (c.current_label, c.baseline_label) == ("release=v2", "release=v1")
    rows = {(r.name, r.kind): r for r in c.rows}
    q = rows[("quality", "mean")]
    assert q.current.n == pytest.approx(380, abs=20) and q.baseline.n == 400
    assert q.diff.estimate == pytest.approx(-0.08, abs=0.03)
    assert q.diff.lo < q.diff.estimate < q.diff.hi < 0
    assert q.verdict == "regressed"
    g = rows[("grounded", "rate")]
    assert g.verdict == "regressed" and g.diff.method.lower().startswith("newcombe")
    err = rows[("all scores", "error rate")]
    assert err.verdict == "regressed"  # v2 errors, v1 never did
    # Holm: the adjusted p-values are at least the raw ones
    assert all(r.p_adjusted >= r.diff.p_value - 1e-12 for r in c.rows)


def test_compare_same_release_against_itself_over_time_is_no_regression(
        db: str, clock: StoreClock) -> None:
    feed(db, clock, release="v1", n=600, start=NOW - 8 * DAY, spread=8 * DAY - 60,
         quality=beta(0.8), grounded=0.9, seed=3)
    clock.t = NOW
    c = _compare(db, by="time", current_window=DAY, baseline_window=7 * DAY)
    assert c.current_label == "last 1d"
    assert 50 <= c.current_records <= 100 and 500 <= c.baseline_records <= 550
    assert not c.regressed, [(r.name, r.verdict) for r in c.rows]


def test_not_enough_data_is_said(db: str, clock: StoreClock) -> None:
    feed(db, clock, release="a", n=40, start=NOW - 2 * DAY, spread=DAY,
         quality=beta(0.8), grounded=0.9, seed=4)
    feed(db, clock, release="b", n=10, start=NOW - DAY, spread=DAY - 60,
         quality=beta(0.3), grounded=0.1, seed=5)
    c = _compare(db, min_n=30)
    assert {r.verdict for r in c.rows if r.kind in ("mean", "rate")} == {"not enough data"}


def test_same_answers_before_and_after_prune(two_releases: str) -> None:
    from tracescore.store.retention import Retention, prune

    before = _compare(two_releases).to_json()
    conn = open_db(two_releases)
    rep_before = build_report(conn, by="release").to_json()
    conn.close()
    store = open_store(two_releases)
    try:
        pruned = prune(store, Retention(max_age_s=3 * DAY), now=NOW)
    finally:
        store.close()
    assert pruned.records > 300
    after = _compare(two_releases).to_json()
    for k in ("scores", "regressed", "current_records", "baseline_records"):
        assert after[k] == before[k], k
    conn = open_db(two_releases)
    rep_after = build_report(conn, by="release").to_json()
    conn.close()
    for g_before, g_after in zip(rep_before["groups"], rep_after["groups"]):
        for name, m in g_before["metrics"].items():
            for k in ("count", "mean", "lo", "hi", "errors", "rate", "p50"):
                assert g_after["metrics"][name][k] == pytest.approx(m[k]), (name, k)


def test_report_since_filters_on_creation_times(db: str, clock: StoreClock) -> None:
    """``--since`` at the real time: full hours from the rollups, the cut hour from raw rows."""
    real = _time.time()
    old = feed(db, clock, release="v1", n=20, start=real - 3 * 3600, spread=600,
               quality=beta(0.8), grounded=0.9, seed=11)
    feed(db, clock, release="v1", n=30, start=real - 1800, spread=1200,
         quality=beta(0.8), grounded=0.9, seed=12)
    clock.t = real

    def rep(*args: str) -> dict[str, Any]:
        r = CliRunner().invoke(main, ["report", "--db", db, "--json", *args])
        assert r.exit_code == 0, r.output
        return json.loads(r.output)  # type: ignore[no-any-return]

    recent = rep("--since", "1h")
    assert recent["records"] == 30 and recent["sampled"] == 30
    assert recent["scores"] == 2 * 30
    assert {m["count"] for m in recent["metrics"].values()} <= {30}
    worst = {w["trace_id"] for ws in recent["worst"].values() for w in ws}
    assert worst and not worst & set(old)
    window, everything = rep("--since", "4h"), rep("--since", "all")
    assert everything["since"] is None and window["since"] is not None
    assert window["records"] == everything["records"] == 50
    assert window["metrics"] == everything["metrics"]
    bad = CliRunner().invoke(main, ["report", "--db", db, "--since", "yesterday"])
    assert bad.exit_code == 2 and "not a duration" in bad.output


def test_report_by_release_with_intervals(two_releases: str) -> None:
    result = CliRunner().invoke(main, ["report", "--db", two_releases, "--by", "release",
                                       "--json"])
    assert result.exit_code == 0, result.output
    rep = json.loads(result.output)
    groups = {g["value"]: g for g in rep["groups"]}
    assert set(groups) == {"v1", "v2"}
    q1, q2 = groups["v1"]["metrics"]["quality"], groups["v2"]["metrics"]["quality"]
    assert q1["lo"] < q1["mean"] < q1["hi"] and q2["hi"] < q1["lo"]
    g1 = groups["v1"]["metrics"]["grounded"]
    assert g1["binary"] and g1["lo"] < g1["rate"] < g1["hi"]
    text = CliRunner().invoke(main, ["report", "--db", two_releases, "--by", "release"])
    assert "release = v2" in text.output and "95% CI" in text.output
    bad = CliRunner().invoke(main, ["report", "--db", two_releases, "--by", "tenant"])
    assert bad.exit_code == 2 and "unknown dimension 'tenant'" in bad.output


def test_check_compare_gate_exit_codes(two_releases: str) -> None:
    gate = CliRunner().invoke(main, ["check", "--db", two_releases, "--compare",
                                     "release=v2:v1"])
    assert gate.exit_code == 1, gate.output
    assert "REGRESSED" in gate.output
    fine = CliRunner().invoke(main, ["check", "--db", two_releases, "--compare",
                                     "release=v1:v2"])
    assert fine.exit_code == 0, fine.output
    bad = CliRunner().invoke(main, ["check", "--db", two_releases, "--compare",
                                    "release=v9:v1"])
    assert bad.exit_code == 2 and "v9" in bad.output
    js = CliRunner().invoke(main, ["compare", "--db", two_releases, "--json"])
    assert js.exit_code == 0
    assert "quality" in json.loads(js.output)["regressed"]


# -- monitors ------------------------------------------------------------------------------------


@pytest.fixture
def hook() -> Iterator[_Hook]:
    h = _Hook()
    yield h
    h.close()


def _monitors(url: str, **kw: Any) -> Any:
    spec = {"name": "quality-v2", "score": "quality", "window": "1d", "threshold": 0.78,
            "min_n": 30, "notify": ["team"], **kw}
    return monitors_from_objects({"monitor": [spec],
                                  "channels": {"team": {"kind": "webhook", "url": url}}})


def test_threshold_monitor_alerts_once_and_notifies(db: str, clock: StoreClock,
                                                    hook: _Hook) -> None:
    from tracescore.monitor.notify import deliver_due

    # a day of good traffic, then a bad day
    feed(db, clock, release="v1", n=300, start=NOW - 2 * DAY, spread=DAY - 120,
         quality=beta(0.85), grounded=0.9, seed=6)
    mons = _monitors(hook.url)
    ev = Evaluator(db, mons, clock=lambda: clock.t)
    try:
        clock.t = NOW - DAY - 60
        (e,) = ev.run_once()
        assert e.state == "OK" and e.saved and e.n >= 250
        feed(db, clock, release="v2", n=300, start=NOW - DAY, spread=DAY - 120,
             quality=beta(0.60), grounded=0.9, seed=7)
        clock.t = NOW - 60
        (e,) = ev.run_once()
        assert e.state == "ALERT" and e.changed and e.previous == "OK", e.summary
        assert e.hi < 0.78 and len(e.worst) == 3
        (e2,) = ev.run_once()  # checked again: no second notification
        assert e2.state == "ALERT" and not e2.changed
        store = ev._open()[0]
        assert deliver_due(store, mons.channels) == 1
        assert deliver_due(store, mons.channels) == 0
    finally:
        ev.close()
    (body,) = hook.bodies
    assert body["monitor"] == "quality-v2" and body["state"] == "ALERT"
    est = body["estimate"]
    assert body["previous"] == "OK" and est["lo"] < est["value"] < est["hi"] < 0.78
    assert len(body["worst_trace_ids"]) == 3 and "quality-v2" in body["command"]
    conn = open_db(db)
    rep = build_report(conn)
    conn.close()
    assert rep.monitors[0].state == "ALERT"


def test_check_command_exit_codes_and_bad_config(db: str, clock: StoreClock, tmp_path: Path,
                                                 hook: _Hook) -> None:
    real = _time.time()  # the CLI evaluates at the real time
    feed(db, clock, release="v1", n=200, start=real - 3600 * 5, spread=3600 * 4,
         quality=beta(0.5), grounded=0.9, seed=8)
    good = tmp_path / "mon.toml"
    good.write_text(f"""
[channels.team]
kind = "webhook"
url = "{hook.url}"

[[monitor]]
name = "quality"
score = "quality"
window = "1d"
threshold = 0.8
notify = ["team"]
""")
    r = CliRunner().invoke(main, ["check", "--db", db, "--monitors", str(good)])
    assert r.exit_code == 1, r.output
    assert "ALERT" in r.output and "quality" in r.output
    assert len(hook.bodies) == 1  # check delivers before it exits
    bad = tmp_path / "bad.toml"
    bad.write_text('[[monitor]]\nname = "q"\nscore = "qualty"\nthreshold = 0.8\n')
    r = CliRunner().invoke(main, ["check", "--db", db, "--monitors", str(bad)])
    assert r.exit_code == 2
    assert "bad.toml" in r.output and "'q'" in r.output and "qualty" in r.output
    assert "quality" in r.output  # did you mean
    r = CliRunner().invoke(main, ["check", "--db", str(tmp_path / "none.db"), "--monitors",
                                  str(good)])
    assert r.exit_code == 2


def test_two_evaluators_one_lease(db: str, clock: StoreClock, hook: _Hook) -> None:
    feed(db, clock, release="v1", n=120, start=NOW - 3600 * 3, spread=3600 * 2,
         quality=beta(0.5), grounded=0.9, seed=9)
    clock.t = NOW
    mons = _monitors(hook.url)
    a = Evaluator(db, mons, clock=lambda: clock.t)
    b = Evaluator(db, mons, clock=lambda: clock.t)
    try:
        (ea,) = a.run_once()
        (eb,) = b.run_once()
        assert ea.saved and not eb.saved
        assert ea.state == eb.state == "ALERT"
        a.release()
        (eb,) = b.run_once()
        assert eb.saved and not eb.changed  # took over, the state is already stored
        store = b._open()[0]
        from tracescore.monitor import state as S

        assert len(S.outbox_rows(store)) == 1  # one notification for the one change
    finally:
        a.close()
        b.close()


def _wait(cond: Any, timeout: float = 60.0) -> None:
    deadline = _time.monotonic() + timeout
    while not cond():
        assert _time.monotonic() < deadline, "timed out waiting"
        _time.sleep(0.05)


def test_init_monitors_run_beside_scoring_and_alert(db: str, hook: _Hook) -> None:
    """``init(monitors=...)``: the real pipeline scores, the background evaluator alerts, the
    notifier posts the alert to a real webhook once; release and segments come from init."""
    import tracescore
    from tracescore.monitor import state as S
    from tracescore.testing import ScriptedMetric

    rng = random.Random(13)
    metric = ScriptedMetric(lambda r: rng.betavariate(6, 14), name="helpfulness")
    ts = tracescore.init(
        db=db, metrics=[metric], release="2026.11", environment="staging",
        segments=["route"], hold_seconds=0,
        monitors={"monitor": [{"name": "helpful", "score": "helpfulness", "window": "1h",
                               "threshold": 0.6, "min_n": 30, "notify": ["team"],
                               "where": {"environment": "staging",
                                         "metadata.route": "search"}}],
                  "channels": {"team": {"kind": "webhook", "url": hook.url}}})
    try:
        for i in range(120):
            ts.log_record(query=f"q{i}", answer="a", metadata={"route": "search"})
        assert ts.flush(60)
        assert ts.monitors is not None
        _time.sleep(GRACE_S)  # scores younger than the evaluator's grace wait a round
        ts.monitors.wake()
        _wait(lambda: any(e.state == "ALERT" for e in ts.monitors.last))
        _wait(lambda: len(hook.bodies) == 1)
    finally:
        ts.shutdown(30)
    body = hook.bodies[0]
    assert body["state"] == "ALERT" and body["monitor"] == "helpful"
    assert body["where"] == {"environment": "staging", "metadata.route": "search"}
    assert body["estimate"]["hi"] < 0.6
    store = open_store(db)
    try:
        assert S.load_states(store)["helpful"].state == "ALERT"
    finally:
        store.close()


def test_init_rejects_a_bad_monitor_naming_it(tmp_path: Path) -> None:
    import tracescore
    from tracescore.testing import ScriptedMetric

    with pytest.raises(ValueError) as err:
        tracescore.init(db=str(tmp_path / "x.db"), metrics=[ScriptedMetric(name="helpfulness")],
                        monitors={"monitor": [{"name": "m1", "score": "helpfulnes",
                                               "threshold": 0.5}]})
    text = str(err.value)
    assert "'m1'" in text and "helpfulnes" in text and "helpfulness" in text
    assert not (tmp_path / "x.db").exists()  # refused before anything was created


def test_two_runners_on_one_database_send_each_alert_once(db: str, clock: StoreClock,
                                                          hook: _Hook) -> None:
    """Two evaluator+notifier pairs (as two workers with --monitors) on one database,
    evaluating over and over: one state change, one webhook POST."""
    from tracescore.monitor.runner import MonitorRunner

    real = _time.time()
    feed(db, clock, release="v1", n=150, start=real - 3 * 3600, spread=2 * 3600,
         quality=beta(0.5), grounded=0.9, seed=21)
    mons = _monitors(hook.url)
    runners = [MonitorRunner(db, mons, interval_s=0.2) for _ in range(2)]
    for r in runners:
        r.start()
    try:
        _wait(lambda: all(r.evaluations >= 5 for r in runners))
        _wait(lambda: len(hook.bodies) >= 1)
        # keep both evaluating a while longer: nothing more may be sent
        seen = [r.evaluations for r in runners]
        _wait(lambda: all(r.evaluations >= s + 5 for r, s in zip(runners, seen)))
    finally:
        for r in runners:
            r.stop()
    assert [b["state"] for b in hook.bodies] == ["ALERT"]
    saved = [e for r in runners for e in r.last if e.saved]
    assert saved and all(e.state == "ALERT" for e in saved)


def test_pipeline_figure_monitors(db: str, clock: StoreClock) -> None:
    """error_rate (anytime-valid, on records), backlog_age and dropped_records (counts)."""
    real = _time.time()
    feed(db, clock, release="v1", n=200, start=real - 3 * 3600, spread=2 * 3600,
         quality=beta(0.8), grounded=0.9, seed=31, app_errors=0.3)
    store = open_store(db)
    try:  # a job nobody scores: the backlog's age grows
        clock.t = real - 3600
        rec = RagRecord(trace_id="f" * 32, span_id="1" * 16, query="q", answer="a",
                        end_time_ns=int(clock.t * 1e9))
        store.write_batch([(rec, Decision(0.1, ("quality",)))],
                          [NewJob(rec.record_id, "quality", "1")], None)
    finally:
        store.close()
    clock.t = real
    mons = monitors_from_objects({"monitor": [
        {"name": "errors", "score": "error_rate", "window": "1d", "threshold": 0.1},
        {"name": "backlog", "score": "backlog_age", "threshold": "15m", "rule": "fixed"},
        {"name": "drops", "score": "dropped_records", "window": "1h", "threshold": 0,
         "rule": "fixed"}]})
    ev = Evaluator(db, mons)
    try:
        states = {e.monitor: e for e in ev.run_once()}
        assert states["errors"].state == "ALERT", states["errors"].summary
        assert 0.2 < states["errors"].value < 0.4 and states["errors"].lo > 0.1
        assert states["backlog"].state == "ALERT" and states["backlog"].value > 3000
        assert states["drops"].state == "OK" and states["drops"].value == 0
        store = ev._open()[0]
        store.bump_counters({"records_dropped": 3})
        states = {e.monitor: e for e in ev.run_once()}
        assert states["drops"].state == "ALERT" and states["drops"].value == 3
    finally:
        ev.close()


def test_hysteresis_worse_at_once_better_after_a_streak() -> None:
    from tracescore.monitor.config import Monitor
    from tracescore.monitor.evaluate import _hysteresis
    from tracescore.monitor.state import StateRow

    m = Monitor("m", "quality", threshold=0.8, hysteresis=3)

    def row(state: str, pending: str | None = None, streak: int = 0) -> StateRow:
        return StateRow("m", state, 0.0, 0.0, None, None, None, None, {}, None, streak,
                        pending, None)

    assert _hysteresis(m, None, "OK") == ("OK", None, 0)  # a first state is taken as it is
    assert _hysteresis(m, row("OK"), "ALERT") == ("ALERT", None, 0)  # worse: at once
    assert _hysteresis(m, row("WARNING"), "ALERT") == ("ALERT", None, 0)
    # better: held until 3 evaluations in a row agree
    assert _hysteresis(m, row("ALERT"), "OK") == ("ALERT", "OK", 1)
    assert _hysteresis(m, row("ALERT", "OK", 1), "OK") == ("ALERT", "OK", 2)
    assert _hysteresis(m, row("ALERT", "OK", 2), "OK") == ("OK", None, 0)
    # a different better state restarts the streak; the stored state agreeing resets it
    assert _hysteresis(m, row("ALERT", "OK", 2), "WARNING") == ("ALERT", "WARNING", 1)
    assert _hysteresis(m, row("ALERT", "OK", 2), "ALERT") == ("ALERT", None, 0)


def test_renotify_while_alert_persists(db: str, clock: StoreClock, hook: _Hook) -> None:
    from tracescore.monitor.notify import deliver_due

    real = _time.time()
    feed(db, clock, release="v1", n=150, start=real - 3 * 3600, spread=2 * 3600,
         quality=beta(0.5), grounded=0.9, seed=41)
    mons = _monitors(hook.url, renotify="1h")
    t = [real]
    ev = Evaluator(db, mons, clock=lambda: t[0])
    try:
        (e,) = ev.run_once()
        assert e.state == "ALERT"
        store = ev._open()[0]
        deliver_due(store, mons.channels, now=t[0])
        t[0] += 1800  # half an hour later: still alerting, no reminder yet
        ev.run_once()
        assert deliver_due(store, mons.channels, now=t[0]) == 0
        t[0] += 1900  # over an hour since the notification: one reminder
        (e,) = ev.run_once()
        assert e.state == "ALERT" and not e.changed
        assert deliver_due(store, mons.channels, now=t[0]) == 1
    finally:
        ev.close()
    assert [b["state"] for b in hook.bodies] == ["ALERT", "ALERT"]


def test_monitor_command_runs_until_sigterm_and_exits_0(db: str, clock: StoreClock,
                                                       tmp_path: Path) -> None:
    """``tracescore monitor`` as a real process: it evaluates, stores states, and a SIGTERM
    ends it with exit code 0."""
    import signal
    import subprocess

    from helpers import cli_script

    real = _time.time()
    feed(db, clock, release="v1", n=80, start=real - 3 * 3600, spread=2 * 3600,
         quality=beta(0.5), grounded=0.9, seed=51)
    toml = tmp_path / "m.toml"
    toml.write_text('[[monitor]]\nname = "q"\nscore = "quality"\nthreshold = 0.8\n')
    p = subprocess.Popen([*cli_script(), "monitor", "--db", db, "--monitors", str(toml),
                          "--interval", "1s"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    try:
        def stored() -> bool:
            store = open_store(db)
            try:
                from tracescore.monitor import state as S

                return "q" in S.load_states(store)
            except Exception:  # the tables appear with the first evaluation
                return False
            finally:
                store.close()
        _wait(stored, timeout=120)
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, err
    assert "ALERT" in out and "q" in out
