"""Judge faults, budgets and concurrency, against a real OpenAI-compatible server on 127.0.0.1.

Each fault is injected at the server (:class:`~tracescore.testing.judge.Fault`): HTTP errors with
and without ``Retry-After``, slow replies, cut-off response bodies, malformed or
schema-violating JSON. Waits are measured from the server's arrival log, not assumed.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import rows

from tracescore.judge import prompts as P
from tracescore.judge import steps as S
from tracescore.judge.base import JudgeError, RetryLater
from tracescore.judge.openai_judge import OpenAIJudge
from tracescore.judge.resilience import CircuitBreaker, ResilientJudge, RetryPolicy
from tracescore.judge.session import JudgeSession, Usage
from tracescore.metrics.judged import RAG_SET
from tracescore.record import RagRecord
from tracescore.testing.judge import Fault, ScriptedJudgeServer, lexical_responder

MODEL = "scripted-judge"
Q = "What battery does the Cargo have?"
CONTEXTS = ["The Cargo ships with a 750 Wh battery.", "The Commuter has a 500 Wh battery.",
            "Warranty lasts two years."]
ANSWER = "The Cargo ships with a 750 Wh battery. It is heavy."
GT = "The Cargo has a 750 Wh battery."


def start(make_ts: Any, srv: ScriptedJudgeServer, metrics: list[str], **kw: Any) -> Any:
    kw.setdefault("judge_canary", False)
    ts, _ = make_ts(metrics=metrics, judge=OpenAIJudge(MODEL, base_url=srv.base_url), **kw)
    return ts


def fast_retries(cooldown_s: float = 0.3, threshold: int = 5) -> dict[str, Any]:
    """``init`` arguments for a shorter backoff and breaker cooldown than production's (0.5 s
    base, 30 s cooldown), so that a test sees many cycles."""
    return {"judge_backoff_s": (0.01, 0.05), "judge_breaker": (threshold, cooldown_s)}


def stored(db: Path) -> list[dict[str, Any]]:
    out = rows(db, "SELECT * FROM scores ORDER BY score_id")
    for r in out:
        r["details"] = json.loads(r["details"] or "{}")
    return out


def arrivals(srv: ScriptedJudgeServer) -> list[tuple[float, str, int]]:
    with srv._lock:
        return list(srv.log)


# -- HTTP errors and Retry-After ----------------------------------------------------------------
@pytest.mark.parametrize("retry_after", [1.0, None])
def test_429_waits_for_retry_after(make_ts, db_path, retry_after):
    with ScriptedJudgeServer(lexical_responder) as srv:
        srv.inject(Fault(429, retry_after=retry_after))
        ts = start(make_ts, srv, ["coherence"])
        ts.log_record(query=Q, answer=ANSWER)
        assert ts.flush(30)
        (t429, _, s1), (t_ok, _, s2) = arrivals(srv)
    assert (s1, s2) == (429, 200)
    wait = t_ok - t429
    if retry_after is None:
        assert wait < 0.6  # the first backoff: full jitter over [0, 0.5 s]
    else:
        assert retry_after <= wait < retry_after + 0.4  # the server's wait, not the backoff
    [score] = stored(db_path)
    assert score["status"] == "ok" and score["value"] == 4.0
    assert ts.stats()["judge"]["failures"] == 1


def test_5xx_are_retried_with_backoff(make_ts, db_path):
    with ScriptedJudgeServer(lexical_responder) as srv:
        srv.inject(Fault(500), Fault(503), Fault(502))
        ts = start(make_ts, srv, ["coherence"])
        ts.log_record(query=Q, answer=ANSWER)
        assert ts.flush(30)
        log = arrivals(srv)
        assert [s for _, _, s in log] == [500, 503, 502, 200]
    # full jitter under an exponential cap: wait k is uniform over [0, 0.5 s · 2^k]
    gaps = [b[0] - a[0] for a, b in zip(log, log[1:])]
    assert all(g < 0.5 * 2**k + 0.15 for k, g in enumerate(gaps)), gaps
    [score] = stored(db_path)
    assert score["status"] == "ok"
    assert ts.stats()["judge"]["failures"] == 3
    [call] = rows(db_path, "SELECT * FROM judge_calls")
    assert call["error"] is None and call["step"] == "coherence"


def test_retries_run_out_into_an_error_score_with_the_reason(make_ts, db_path):
    """A request that keeps failing while the judge otherwise works (the breaker stays
    closed) ends in an error score after ``judge_max_retries``, not a silent 0."""
    with ScriptedJudgeServer(lexical_responder) as srv:
        srv.inject(*[Fault(500)] * 3)
        ts = start(make_ts, srv, ["coherence"], judge_max_retries=2,
                   **fast_retries(threshold=10))
        ts.log_record(query=Q, answer=ANSWER)
        assert ts.flush(30)
        assert srv.total_calls == 3
    [score] = stored(db_path)
    assert score["status"] == "error" and score["value"] is None
    assert "judge failed after 3 tries" in score["error"] and "500" in score["error"]
    [call] = rows(db_path, "SELECT * FROM judge_calls")
    assert "JudgeError" in call["error"]


def test_slow_reply_times_out_and_is_retried(make_ts, db_path):
    with ScriptedJudgeServer(lexical_responder) as srv:
        srv.inject(Fault(200, delay_s=5.0))  # a normal reply, 5 s late
        ts = start(make_ts, srv, ["coherence"], judge_timeout_s=0.5)
        t0 = time.monotonic()
        ts.log_record(query=Q, answer=ANSWER)
        assert ts.flush(30)
        elapsed = time.monotonic() - t0
        assert srv.calls["coherence"] == 2
    assert elapsed < 2.5  # did not wait for the slow reply
    [score] = stored(db_path)
    assert score["status"] == "ok"
    assert ts.stats()["judge"]["failures"] == 1


def test_cut_off_response_body_is_retried(make_ts, db_path):
    """A 200 whose HTTP body is cut off mid-JSON (a proxy or reset) is a transport fault."""
    with ScriptedJudgeServer(lexical_responder) as srv:
        srv.inject(Fault(200, raw=b'{"id": "x", "object": "chat.completion", "choices": [{"in'),
                   Fault(200, raw=b""))
        ts = start(make_ts, srv, ["coherence"])
        ts.log_record(query=Q, answer=ANSWER)
        assert ts.flush(30)
        assert srv.calls["coherence"] == 3
    [score] = stored(db_path)
    assert score["status"] == "ok" and score["value"] == 4.0


# -- invalid JSON: one repair -------------------------------------------------------------------
@pytest.mark.parametrize("bad", [
    '{"score": 4, "reason": "reads in or',  # truncated (max_tokens)
    "Sure! I would rate the coherence a four out of five.",  # prose, no JSON
    '{"score": 9, "reason": "off the scale"}',  # valid JSON, violates the schema
    '{"rating": "good"}',  # wrong shape
])
def test_invalid_json_gets_one_repair(make_ts, db_path, bad):
    with ScriptedJudgeServer(lexical_responder) as srv:
        srv.inject(Fault(200, body=bad))
        ts = start(make_ts, srv, ["coherence"])
        ts.log_record(query=Q, answer=ANSWER)
        assert ts.flush(30)
        assert dict(srv.calls) == {"coherence": 1, "coherence:repair": 1}
        repair = srv.requests[1]["messages"]
    # the repair call shows the model its reply and what was wrong with it
    assert repair[-2] == {"role": "assistant", "content": bad}
    assert repair[-1]["role"] == "user" and "not valid" in repair[-1]["content"]
    [score] = stored(db_path)
    assert score["status"] == "ok" and score["value"] == 4.0
    [call] = rows(db_path, "SELECT * FROM judge_calls")
    assert call["error"] is None


def test_invalid_json_twice_is_an_error_score_with_the_reason(make_ts, db_path):
    def responder(step: str, data: Any, req: dict[str, Any]) -> Any:
        if step == "coherence":  # bad twice: first prose, then the repair breaks the schema
            repair = any(m["role"] == "assistant" for m in req["messages"])
            return '{"score": "high"}' if repair else "no JSON here"
        return lexical_responder(step, data, req)

    with ScriptedJudgeServer(responder) as srv:
        ts = start(make_ts, srv, ["coherence", "context_relevance"])
        ts.log_record(query=Q, answer=ANSWER, contexts=CONTEXTS)
        assert ts.flush(30)
        assert dict(srv.calls) == {"coherence": 1, "coherence:repair": 1, "contexts": 1}
    scores = {s["name"]: s for s in stored(db_path)}
    bad = scores["coherence"]
    assert bad["status"] == "error" and bad["value"] is None
    assert "judge returned invalid JSON twice" in bad["error"]
    assert "reply.score must be an integer, got a string 'high'" in bad["error"]
    assert "the reply is not a JSON object" in bad["error"]
    assert scores["context_relevance"]["status"] == "ok"  # one bad reply spoils one step
    errors = [c for c in rows(db_path, "SELECT * FROM judge_calls") if c["error"]]
    assert len(errors) == 1 and errors[0]["error"].startswith("InvalidJudgeOutput")
    assert ts.stats()["error_scores"] == 1


# -- the circuit breaker ----------------------------------------------------------------------
@pytest.mark.parametrize("concurrency", [1, 4])
def test_judge_down_jobs_wait_then_all_are_scored(make_ts, db_path, concurrency):
    """Judge down → the breaker opens → jobs are deferred (attempts not spent), never given
    an error score → judge back → every job scored. With concurrency 1 the first job's last
    retry is the failure that opens the breaker: it must wait too, not fail."""
    with ScriptedJudgeServer(lexical_responder) as srv:
        srv.inject(*[Fault(503)] * 10_000)
        ts = start(make_ts, srv, ["faithfulness", "context_relevance"], concurrency=concurrency,
                   **fast_retries())
        for i in range(6):
            ts.log_record(query=f"{Q} #{i}", answer=ANSWER, contexts=CONTEXTS)
        assert not ts.flush(1.5)  # the judge is down: nothing can finish
        down = ts.stats()
        assert stored(db_path) == []  # not one error score
        assert down["judge"]["breaker_opened"] >= 1
        assert down["deferred_jobs"] > 0
        assert down["open_jobs"] == 12
        # some job waits for the judge, with the reason (a snapshot can fall in the instant
        # the deferred jobs are leased again for the breaker's probe: look until one is seen)
        deadline = time.monotonic() + 30
        while not any("judge" in (r["reason"] or "") for r in rows(
                db_path, "SELECT status, reason FROM jobs WHERE status='pending'")):
            assert time.monotonic() < deadline, "no job waiting for the judge"
            time.sleep(0.02)
        # while it is down, deferred steps are not logged as calls
        assert rows(db_path, "SELECT * FROM judge_calls") == []
        failures_while_down = srv.total_calls

        with srv._lock:
            srv.faults.clear()  # the judge is back
        assert ts.flush(30)
    scores = stored(db_path)
    assert len(scores) == 12
    assert [s for s in scores if s["status"] != "ok"] == []
    assert ts.stats()["error_scores"] == 0
    assert ts.stats()["judge"]["breaker_state"] == CircuitBreaker.CLOSED
    # deferrals are free: every job was leased once for the attempt that scored it
    assert {r["attempts"] for r in rows(db_path, "SELECT attempts FROM jobs")} == {1}
    # the breaker kept the outage cheap: a probe per cooldown, not a retry storm
    assert failures_while_down < 5 * 2 + 1.5 / 0.3 * concurrency + 10


def test_a_cancelled_probe_does_not_leave_the_breaker_half_open():
    """If the one half-open probe is cancelled (shutdown, the worker's overall timeout), the
    breaker must let another probe through, not refuse every call forever."""

    async def run(srv: ScriptedJudgeServer) -> None:
        breaker = CircuitBreaker(failure_threshold=1, cooldown_s=0.05)
        judge = ResilientJudge(OpenAIJudge(MODEL, base_url=srv.base_url), breaker=breaker,
                               policy=RetryPolicy(max_retries=0, timeout_s=5))
        msgs = P.messages(P.TEXT_COHERENCE_TASK, {"text": "x"}, P.RATING_FORMAT)
        srv.inject(Fault(500))
        with pytest.raises((RetryLater, JudgeError)):  # the failure opens the breaker
            await judge.call(msgs)
        assert breaker.state != CircuitBreaker.CLOSED
        await asyncio.sleep(0.06)
        srv.inject(Fault(200, delay_s=1.0))
        with pytest.raises(asyncio.TimeoutError):  # the probe, cancelled from outside
            await asyncio.wait_for(judge.call(msgs), 0.2)
        reply = await judge.call(msgs)  # a new probe goes out and closes the breaker
        assert json.loads(reply.text)["score"] == 4
        assert breaker.state == CircuitBreaker.CLOSED
        await judge.aclose()

    with ScriptedJudgeServer(lexical_responder) as srv:
        asyncio.run(run(srv))


# -- budgets ----------------------------------------------------------------------------------
def assert_within_120_per_minute(log: list[tuple[float, str, int]]) -> None:
    """Every request inside the token bucket's envelope for 120/min (a burst of 20, then 2
    per second; 0.2 s of slack), and the 6 after the burst spread over at least 2 s."""
    t0 = log[0][0]
    for k, (t, _, _) in enumerate(log, 1):
        assert k <= 20 + 2 * (t - t0 + 0.2), f"request {k} at +{t - t0:.2f}s is over budget"
    assert log[-1][0] - log[19][0] >= 2.0


def test_calls_per_minute_budget(make_ts, db_path):
    """120 calls/min: a burst of 20 (10 s worth), then 2 per second; jobs over budget wait
    (deferred, not failed) and are all scored."""
    with ScriptedJudgeServer(lexical_responder) as srv:
        ts = start(make_ts, srv, ["coherence"], judge_calls_per_minute=120)
        for i in range(26):
            ts.log_record(query=Q, answer=f"{ANSWER} #{i}")
        assert ts.flush(30)
        log = arrivals(srv)
    assert len(log) == 26
    assert_within_120_per_minute(log)
    assert ts.stats()["deferred_jobs"] > 0
    scores = stored(db_path)
    assert len(scores) == 26 and all(s["status"] == "ok" for s in scores)


def test_calls_per_minute_budget_counts_retries(make_ts, db_path):
    """The budget is the provider's rate limit, so every request counts, retries included:
    10 requests answered 500 and retried, then 16 that succeed, stay in the same envelope
    (a burst of 20, then 2 per second). A score's ``judge_calls`` counts its retries."""
    with ScriptedJudgeServer(lexical_responder) as srv:
        srv.inject(*[Fault(500)] * 10)
        ts = start(make_ts, srv, ["coherence"], judge_calls_per_minute=120, concurrency=1,
                   judge_max_retries=10, **fast_retries(threshold=50))
        for i in range(16):
            ts.log_record(query=Q, answer=f"{ANSWER} #{i}")
        assert ts.flush(30)
        log = arrivals(srv)
    assert len(log) == 26
    assert_within_120_per_minute(log)
    scores = stored(db_path)
    assert len(scores) == 16 and all(s["status"] == "ok" for s in scores)
    assert sum(s["details"]["judge_calls"] for s in scores) == 26


def test_daily_cost_budget_defers_jobs(make_ts, db_path):
    with ScriptedJudgeServer(lexical_responder) as srv:
        # 1 USD per token: the first call spends the day's budget
        ts = start(make_ts, srv, ["coherence"], judge_price=(1e6, 1e6),
                   judge_daily_budget_usd=0.5, concurrency=1)
        for i in range(3):
            ts.log_record(query=Q, answer=f"{ANSWER} #{i}")
        assert not ts.flush(1.5)
        assert srv.total_calls == 1
        waiting = rows(db_path, "SELECT reason FROM jobs WHERE status='pending'")
        assert len(waiting) == 2
        assert all("daily judge budget" in r["reason"] for r in waiting)
        [score] = stored(db_path)
        assert score["details"]["judge_cost_usd"] > 0.5
        ts.shutdown(timeout=0.5)


# -- concurrency --------------------------------------------------------------------------------
def test_worker_concurrency_bounds_calls_in_flight(make_ts, db_path):
    with ScriptedJudgeServer(lexical_responder, delay_s=0.1) as srv:
        ts = start(make_ts, srv, ["coherence"], concurrency=2)
        for i in range(8):
            ts.log_record(query=Q, answer=f"{ANSWER} #{i}")
        assert ts.flush(30)
        assert srv.max_inflight == 2
    assert len(stored(db_path)) == 8


def test_judge_session_max_concurrency(tmp_path):
    """The session's own cap on steps calling the judge at once (for a worker that runs more
    judge jobs than calls); cache hits and waiters on an in-flight step take no slot."""

    async def run(srv: ScriptedJudgeServer) -> list[Any]:
        session = JudgeSession(ResilientJudge(OpenAIJudge(MODEL, base_url=srv.base_url)),
                               str(tmp_path / "s.db"), max_concurrency=3)
        usage = Usage()
        records = [RagRecord(trace_id=f"{i:032x}", span_id=f"{i:016x}", answer=f"answer {i % 9}")
                   for i in range(18)]  # 9 distinct texts, each asked for twice at once
        out = await asyncio.gather(*[S.rating(session, r, "coherence", usage) for r in records])
        session.close()
        await session.judge.aclose()
        return out

    with ScriptedJudgeServer(lexical_responder, delay_s=0.1) as srv:
        out = asyncio.run(run(srv))
        assert srv.total_calls == 9 and srv.max_inflight == 3
    assert [o["score"] for o in out] == [4] * 18


def _throughput(make_ts: Any, metrics: list[str], n: int, *, allowed_ratio: float,
                calls_per_record: int) -> tuple[float, ScriptedJudgeServer]:
    """Score n records at concurrency 16 against a 200 ms judge, configured as the target
    says (``init(..., concurrency=16, judge=OpenAIJudge(...))``, no span exporter); give up
    (flush timeout) as soon as the run is slower than ``allowed_ratio`` of the bound."""
    with ScriptedJudgeServer(lexical_responder, delay_s=0.2) as srv:
        lexical_responder("extract", {"texts": {"answer": "Warm. Up."}, "opinions_for": []}, {})
        ts = start(make_ts, srv, metrics, concurrency=16, span_processor=None)
        expected_bound = n * calls_per_record * 0.2 / 16
        t0 = time.monotonic()
        for i in range(n):
            ts.log_record(query=f"{Q} #{i}", answer=f"{ANSWER} #{i}", contexts=CONTEXTS,
                          ground_truths=[GT])
        done = ts.flush(expected_bound / allowed_ratio + 0.5)
        elapsed = time.monotonic() - t0
        calls = srv.total_calls
        ts.shutdown(timeout=0.5)
    if not done:
        return 0.0, srv
    assert calls == n * calls_per_record
    return calls * 0.2 / 16 / elapsed, srv


def test_server_and_client_pools_do_not_cap_concurrency(make_ts):
    """One call per job: 16 jobs keep 16 calls in flight at the server (its thread per
    connection and listen backlog, the openai client's httpx pool of 1000 do not cap)."""
    _, srv = _throughput(make_ts, ["coherence"], 96, allowed_ratio=0.1, calls_per_record=1)
    assert srv.max_inflight == 16


def test_rag_set_keeps_the_judge_busy_at_full_concurrency(make_ts):
    """The 7 RAG jobs of a record share 2 calls (its ``extract`` and ``contexts`` steps are
    one call: the worker leases a record's jobs together, so they run at the same moment):
    the worker leases a wide window of judge jobs so that 16 *calls* are in flight, and the
    session caps them at 16. (The throughput itself, >= 85 % of the bound, is measured by
    bench/judge_throughput.py, not here.)"""
    _, srv = _throughput(make_ts, list(RAG_SET), 64, allowed_ratio=0.1, calls_per_record=2)
    assert srv.max_inflight == 16


def _poison(step: str, data: Any, request: dict[str, Any]) -> Any:
    """The judge fails (500) on any request about a record whose answer says POISON."""
    if "POISON" in json.dumps(data):
        return Fault(status=500)
    return lexical_responder(step, data, request)


def test_a_record_that_breaks_a_working_judge_gets_an_error_score(make_ts, db_path):
    """A poison record next to a good one: the good record is scored, and the poison one ends
    in exactly one error score naming the judge's failure. Which of the two error paths it
    takes depends on how the two records' calls interleave, and both are right: if the good
    call's success lands between the poison record's tries, the breaker never sees N failures
    in a row, so the record fails on its own after its retries ("judge failed after N
    tries"); if not, the breaker opens and the wait is bounded by ``judge_max_wait_s``."""
    with ScriptedJudgeServer(_poison) as srv:
        ts = start(make_ts, srv, ["coherence"], judge_max_wait_s=1.0,
                   **fast_retries(cooldown_s=0.05, threshold=5))
        good = ts.log_record(query="q", answer="A fine answer.")
        bad = ts.log_record(query="q", answer="POISON answer.")
        assert ts.flush(30)
    got_good = rows(db_path, "SELECT status, value FROM scores WHERE record_id=?",
                    good.record_id)
    got_bad = rows(db_path, "SELECT status, error FROM scores WHERE record_id=?",
                   bad.record_id)
    assert got_good == [{"status": "ok", "value": 4.0}]
    assert len(got_bad) == 1 and got_bad[0]["status"] == "error"
    assert "(500)" in got_bad[0]["error"] and "injected 500" in got_bad[0]["error"]
    assert ("judge failed after 5 tries" in got_bad[0]["error"]
            or "judge_max_wait_s" in got_bad[0]["error"])


def test_a_record_the_judge_always_fails_on_waits_at_most_judge_max_wait_s(make_ts, db_path):
    """The poison record alone: its failures come in a row, so they open the breaker and look
    like an outage; its job waits instead of failing, and the wait is bounded by
    ``judge_max_wait_s``, after which it gets an error score with the reason instead of
    waiting forever. A record logged afterwards, once the judge answers, is scored."""
    with ScriptedJudgeServer(_poison) as srv:
        ts = start(make_ts, srv, ["coherence"], judge_max_wait_s=1.0,
                   **fast_retries(cooldown_s=0.05, threshold=5))
        t0 = time.monotonic()
        bad = ts.log_record(query="q", answer="POISON answer.")
        assert ts.flush(30)
        waited = time.monotonic() - t0
        good = ts.log_record(query="q", answer="A fine answer.")
        assert ts.flush(30)
        opened = ts.judge_session.judge.breaker.opened
    got_bad = rows(db_path, "SELECT status, error FROM scores WHERE record_id=?",
                   bad.record_id)
    assert len(got_bad) == 1 and got_bad[0]["status"] == "error"
    assert "judge unavailable for this record" in got_bad[0]["error"]
    assert "judge_max_wait_s" in got_bad[0]["error"]
    assert "last failure: judge server error (500)" in got_bad[0]["error"]  # the cause, named
    assert opened >= 1
    assert waited >= 1.0
    assert rows(db_path, "SELECT status, value FROM scores WHERE record_id=?",
                good.record_id) == [{"status": "ok", "value": 4.0}]
