"""Issue 34's done-when for sessions: a 4-turn chat written by two app processes (a restart
in the middle) is one session with its scores; a late fifth turn re-opens it and its scores
are replaced, counted once in the rollups; ``compare --by release`` reads a session score.
The idle window is passed by moving the closer's clock, not by sleeping."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from helpers import rows, run_cli

from tracescore.sessions.closer import close_due
from tracescore.store import open_store
from tracescore.store.sessions import session_record_id

APP = Path(__file__).parent / "session_apps" / "chat_turns.py"
IDLE = 300.0


def app(db: Path, release: str, turns: list[tuple[str, int]]) -> None:
    """One app process: its turns stored, then it exits."""
    subprocess.run([sys.executable, str(APP), str(db), release, json.dumps(turns)],
                   check=True, timeout=180)


def close_all(db: Path) -> Any:
    store = open_store(db)
    try:
        return close_due(store, IDLE, now=time.time() + IDLE + 1)
    finally:
        store.close()


def session_scores(db: Path, key: str) -> dict[str, dict[str, Any]]:
    trace, span = session_record_id(key)
    return {r["name"]: r for r in rows(db, "SELECT * FROM scores WHERE record_id = ?",
                                       f"{trace}-{span}")}


def expected(db: Path, key: str) -> dict[str, float]:
    """The session's figures recomputed from the stored turns and their faith scores."""
    turns = rows(db, "SELECT r.query, s.value FROM records r JOIN scores s ON s.record_id ="
                     " r.record_id AND s.name = 'faith' WHERE r.session_id = ? AND r.source <>"
                     " 'session' ORDER BY r.created_at", key)
    faith = [t["value"] for t in turns]
    norm = [t["query"].casefold().strip(" ?") for t in turns]
    repeats = sum(1 for i in range(1, len(norm)) if norm[i] in norm[:i])
    return {"session.turns": len(turns), "session.faith.worst": min(faith),
            "session.faith.passing": sum(v >= 0.5 for v in faith) / len(faith),
            "session.repeated_questions": repeats / (len(turns) - 1)}


def test_four_turns_over_a_restart_then_a_late_fifth(tmp_path: Path) -> None:
    db = tmp_path / "chat.db"
    app(db, "r1", [("chat-1", 0), ("chat-1", 1)])
    # the first process is gone; its session is open in the database
    [state] = rows(db, "SELECT status, closes FROM sessions WHERE session_id = 'chat-1'")
    assert state == {"status": "open", "closes": 0}
    app(db, "r1", [("chat-1", 2), ("chat-1", 1), ("solo-1", 3)])  # a repeat of turn 2
    app(db, "r2", [("chat-2", 0), ("chat-2", 2), ("chat-3", 1)])

    done = close_all(db)
    assert sorted(done.closed) == ["chat-1", "chat-2", "chat-3", "solo-1"]
    got = session_scores(db, "chat-1")
    want = expected(db, "chat-1")
    assert want["session.turns"] == 4 and want["session.repeated_questions"] == 1 / 3
    for name, value in want.items():
        assert got[name]["value"] == value, name
    [rec] = rows(db, "SELECT * FROM records WHERE source = 'session' AND session_id = 'chat-1'")
    assert rec["release"] == "r1" and rec["forced"] == "session"
    assert rows(db, "SELECT status, closes FROM sessions WHERE session_id = 'chat-1'") == [
        {"status": "closed", "closes": 1}]
    assert close_all(db).closed == []  # nothing idle is left open

    # a late fifth turn, in release r2: the session re-opens, and closes again
    app(db, "r2", [("chat-1", 4)])
    assert rows(db, "SELECT status FROM sessions WHERE session_id = 'chat-1'") == [
        {"status": "open"}]
    assert close_all(db).closed == ["chat-1"]
    got = session_scores(db, "chat-1")
    want = expected(db, "chat-1")
    assert want["session.turns"] == 5
    for name, value in want.items():
        assert got[name]["value"] == value, name
    [rec] = rows(db, "SELECT * FROM records WHERE source = 'session' AND session_id = 'chat-1'")
    assert rec["release"] == "r2"  # the segment of its last turn
    # replaced, not duplicated: one row per name, and the rollups count each session once
    n_sessions = 4
    assert rows(db, "SELECT count(*) AS n FROM records WHERE source = 'session'") == [
        {"n": n_sessions}]
    [roll] = rows(db, "SELECT sum(n_ok) AS n, sum(value_sum) AS s FROM hourly_scores"
                      " WHERE name = 'session.turns'")
    assert roll["n"] == n_sessions
    assert roll["s"] == sum(r["value"] for r in rows(
        db, "SELECT value FROM scores WHERE name = 'session.turns'"))
    # the request counts are the turns' only: a session is not a request
    [recs] = rows(db, "SELECT sum(records) AS n FROM hourly_records")
    assert recs["n"] == rows(db, "SELECT count(*) AS n FROM records WHERE source <> 'session'"
                             )[0]["n"]

    # report: session scores beside the turns', and what population each speaks for
    res = run_cli("report", "--db", db)
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert "session.turns" in text and "speak for the sessions (a census)" in text
    assert "no record forced" in text  # the requests' scores: a uniform sample still

    # show --session: the conversation, with the marks its scores put on the turns
    res = run_cli("show", "--db", db, "--session", "chat-1")
    assert res.exit_code == 0, res.output
    out = res.output
    assert out.startswith("session chat-1  (closed; 5 turns; scored 2 time(s)")
    assert [line.split()[1] for line in out.splitlines() if line.startswith("turn ")] == [
        "1", "2", "3", "4", "5"]
    assert "! repeats the question of turn 2 (text)" in out
    assert "session.turns  5.000" in out
    trace, span = session_record_id("chat-1")
    assert run_cli("show", "--db", db, trace).output == out  # its record shows the same
    as_json = json.loads(run_cli("show", "--db", db, "--session", "chat-1", "--json").output)
    assert len(as_json["session"]["turns"]) == 5
    assert run_cli("show", "--db", db, "--session", "nope").exit_code == 1
    page = tmp_path / "chat-1.html"
    assert run_cli("show", "--db", db, "--session", "chat-1", "--html", page).exit_code == 0
    html = page.read_text()
    assert html.count('class="card" id="turn-') == 5
    assert 'data-mark="4">repeats the question of turn 2 (text)' in html
    assert 'data-score="session.turns"' in html

    # compare --by release reads session scores like any score
    res = run_cli("compare", "--db", db, "--by", "release", "--current", "r2", "--baseline",
                  "r1", "--min-n", "1", "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    by_name = out["scores"]
    turns = by_name["session.turns"]
    assert (turns["current"]["n"], turns["baseline"]["n"]) == (3, 1)
    assert by_name["session.repeated_questions"]["higher_is_better"] is False
    assert turns["current"]["value"] == (5 + 2 + 1) / 3  # chat-1 (now r2), chat-2, chat-3
    # a session score speaks for the closed sessions; the turns' scores for the requests,
    # whose sample rate the sessions' records (forced) do not disturb
    pop = out["population"]["current"]
    assert pop["session.turns"]["statement"].startswith("scored records: every closed session")
    assert pop["faith"]["rate"] == 1.0 and not pop["faith"]["unequal_selection"]
    assert out["current_records"] == 4 and out["baseline_records"] == 5  # requests only

    # a monitor on a session score: known, evaluated on the sessions' figures
    mon = tmp_path / "mon.toml"
    mon.write_text('[[monitor]]\nname = "repeats"\nscore = "session.repeated_questions"\n'
                   'window = "1d"\nthreshold = 0.5\n')
    res = run_cli("check", "--db", db, "--monitors", mon, "--json")
    assert res.exit_code == 0, res.output
    # a human label on a session score (the session's record id, the score's own scale)
    from tracescore.labels import add_label

    trace, span = session_record_id("chat-1")
    add_label(f"{trace}-{span}", "session.abandoned", 0.0, annotator="ann", db=db)
    assert rows(db, "SELECT name, value, metric_version FROM labels WHERE record_id = ?",
                f"{trace}-{span}") == [{"name": "session.abandoned", "value": 0.0,
                                        "metric_version": "1"}]
    checked = json.loads(res.output)
    assert checked["monitors"][0]["error"] is None
    assert checked["sight"]["repeats"]["n"] == 2  # chat-1 and chat-2 (one-turn ones skip)
