"""`Settings`: every init() argument is checked in one place, with a message naming it, before
any thread starts or any file is written."""

from __future__ import annotations

import threading
from typing import Any

import pytest

import tracescore
from tracescore.settings import Settings

BAD = [
    ({"concurrency": 0}, "concurrency must be an int >= 1"),
    ({"concurrency": 2.5}, "concurrency must be an int >= 1"),
    ({"max_queue": 0}, "max_queue must be an int >= 1"),
    ({"max_queue": True}, "max_queue must be an int >= 1"),
    ({"lease_seconds": 0}, "lease_seconds must be a number > 0"),
    ({"metric_timeout_s": -1}, "metric_timeout_s must be a number > 0"),
    ({"hold_seconds": float("nan")}, "hold_seconds must be a number >= 0"),
    ({"max_attribute_chars": 0}, "max_attribute_chars must be an int >= 1"),
    ({"redact": "not callable"}, "redact must be a callable"),
    ({"sample_rates": [("rouge", 0.1)]}, "sample_rates must be a mapping"),
    ({"judge_timeout_s": 0}, "judge_timeout_s must be a number > 0"),
    ({"judge_max_retries": -1}, "judge_max_retries must be an int >= 0"),
    ({"judge_backoff_s": (5, 1)}, "judge_backoff_s must be"),
    ({"judge_breaker": (0, 30)}, "judge_breaker must be"),
    ({"judge_calls_per_minute": 0}, "judge_calls_per_minute must be a number > 0"),
    ({"judge_price": (1.0,)}, "judge_price must be"),
    ({"judge_daily_budget_usd": 5.0}, "needs judge_price"),
    ({"judge_price": (1.0, 2.0), "judge_daily_budget_usd": -1}, "judge_daily_budget_usd must"),
    ({"judge_max_wait_s": 0}, "judge_max_wait_s must be a number > 0"),
    ({"judge_canary": "often"}, "judge_canary must be True, False or how often"),
    ({"judge_canary": 0}, "judge_canary must be True, False or how often"),
    ({"db": 42}, "db must be a path"),
    ({"db": ":memory:"}, "cannot be shared"),
]


@pytest.mark.parametrize("kwargs, message", BAD, ids=[m for _, m in BAD])
def test_a_bad_argument_fails_at_init_with_its_name(tmp_path, kwargs: dict[str, Any],
                                                    message: str) -> None:
    db = tmp_path / "a.db"
    # (the threads alive before, by identity: an earlier test's thread may end meanwhile,
    # which a count would read as a change)
    threads = set(threading.enumerate())
    args: dict[str, Any] = {"db": db, "metrics": ["rouge"], **kwargs}
    with pytest.raises((ValueError, TypeError), match=message):
        tracescore.init(**args)
    assert not db.exists()  # validated before the database was created
    started = set(threading.enumerate()) - threads
    assert not started, started  # and before any thread started


def test_settings_are_normalised_and_frozen(tmp_path) -> None:
    from tracescore.judge.openai_judge import OpenAIJudge
    from tracescore.metrics.saga_extra import SelfCheckGPT

    # the judge is never called here (no records, no canary): an unreachable address is fine
    judge = OpenAIJudge("j", base_url="http://127.0.0.1:9/v1")
    ts = tracescore.init(db=tmp_path / "a.db", metrics=["rouge", SelfCheckGPT(generate=str)],
                         judge=judge, judge_canary=False, judge_backoff_s=[1, 2],
                         sample_rate=0.5, judge_calls_per_minute=30)
    try:
        s = ts.settings
        assert isinstance(s, Settings)
        assert s.db == str(tmp_path / "a.db")
        assert s.metric_names == ("rouge", "selfcheckgpt")
        assert s.judge_backoff_s == (1.0, 2.0)
        # a costly metric's own low default rate applies under the global rate
        assert s.sample_rates == {"selfcheckgpt": 0.05}
        with pytest.raises(AttributeError):
            s.concurrency = 8  # type: ignore[misc]
    finally:
        ts.shutdown()


def test_judge_canary_takes_how_often_it_runs_again(tmp_path) -> None:
    """``judge_canary="6h"``: the canary runs at start-up and every 6 hours (the session's
    schedule), without the environment variable; ``True`` keeps the default day."""
    from tracescore.judge.openai_judge import OpenAIJudge

    judge = OpenAIJudge("j", base_url="http://127.0.0.1:9/v1")  # never called: no records
    every = {}
    for i, value in enumerate(("6h", 90, True)):
        ts = tracescore.init(db=tmp_path / f"{i}.db", metrics=["rouge"], judge=judge,
                             judge_canary=value)
        try:
            assert ts.settings.judge_canary is True and ts.worker.judge_canary is True
            every[value] = ts.judge_session.canary_every_s
        finally:
            ts.shutdown(timeout=5)
    assert every["6h"] == 6 * 3600.0 and every[90] == 90.0
    assert every[True] == 86400.0  # the default day ($TRACESCORE_JUDGE_CANARY_EVERY unset)
