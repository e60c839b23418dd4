"""Timeouts, retries with backoff and jitter, JSON validation with one repair attempt, and a
circuit breaker, around any judge backend.

Retry policy: :class:`TransientJudgeError` (429, 5xx, timeouts, connection errors) is retried
up to ``max_retries`` times with exponential backoff and full jitter; a server's
``Retry-After`` wins when it is longer. Invalid or schema-violating JSON gets one repair call
(the model is shown its output and the error); a second failure is final. After
``failure_threshold`` consecutive transient failures the breaker opens: calls fail fast with
:class:`RetryLater` for ``cooldown_s`` (the scoring worker puts the job back to wait), then one
probe call is let through (half-open); success closes the breaker. A call whose retries run
out while the breaker is open raises :class:`RetryLater` too: those failures are the judge's,
not the record's.

An outage is said out loud, once: when the breaker opens, one WARNING on the ``tracescore``
logger names the judge (its base URL, never the key), the cause ("connection refused", "no
answer within 60 s") and what happens to the jobs; one INFO when it answers again. While it is
down, every deferred job's reason (stored in ``jobs.reason``, read by ``tracescore report`` in
any process) is the same line: "waiting for the judge at URL (unreachable since T: cause)".
:func:`judge_url` and :func:`check_reachable` serve the CLI (``judge-check``, ``demo``).
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from .base import (
    InvalidJudgeOutput,
    Judge,
    JudgeError,
    JudgeReply,
    Message,
    RetryLater,
    TransientJudgeError,
)
from .outage import Outage, judge_where
from .schemas import check, parse_json

Validator = Callable[[Any], Any]  # returns the cleaned value or raises ValueError(reason)

log = logging.getLogger("tracescore")


@dataclass(frozen=True)
class RetryPolicy:
    max_retries: int = 4
    base_delay_s: float = 0.5
    max_delay_s: float = 30.0
    timeout_s: float = 60.0

    def delay(self, attempt: int, retry_after: float | None) -> float:
        backoff = random.uniform(0, min(self.max_delay_s, self.base_delay_s * 2**attempt))
        if retry_after is not None:
            return min(max(retry_after, backoff), self.max_delay_s * 4)
        return backoff


class CircuitBreaker:
    """closed → (N consecutive failures) → open → (cooldown) → half-open → closed/open.

    Thread-safe; the state is exported as a metric (0 closed, 1 half-open, 2 open).
    """

    CLOSED, HALF_OPEN, OPEN = 0, 1, 2

    def __init__(self, failure_threshold: int = 5, cooldown_s: float = 30.0) -> None:
        self.failure_threshold = failure_threshold
        self.cooldown_s = cooldown_s
        self._failures = 0
        self._opened_at: float | None = None
        self._probing = False
        self._lock = threading.Lock()
        self.opened = 0  # how many times it opened
        #: The newest failure's reason, named when calls are held back.
        self.last_failure: str | None = None

    @property
    def state(self) -> int:
        with self._lock:
            return self._state_locked(time.monotonic())

    def _state_locked(self, now: float) -> int:
        if self._opened_at is None:
            return self.CLOSED
        if now - self._opened_at >= self.cooldown_s:
            return self.HALF_OPEN
        return self.OPEN

    def before_call(self) -> bool:
        """Raise :class:`RetryLater` when calls must not go out now (:class:`ProbeInFlight`
        while the half-open probe is out). Returns True for the call that is the probe."""
        with self._lock:
            now = time.monotonic()
            state = self._state_locked(now)
            if state == self.CLOSED:
                return False
            if state == self.HALF_OPEN and not self._probing:
                self._probing = True  # let exactly one probe through
                return True
            assert self._opened_at is not None
            last = self.last_failure
            reason = ("judge circuit breaker is open (judge failing"
                      + (f"; last failure: {last}" if last else "") + "); waiting")
            if state == self.HALF_OPEN:
                # the probe's outcome decides; its caller wakes the waiters (ResilientJudge)
                raise ProbeInFlight(reason + " for the probe call", self.cooldown_s)
            wait = max(0.05, self.cooldown_s - (now - self._opened_at))
        raise RetryLater(reason, wait)

    def abandon(self) -> None:
        """A call ended without a verdict on the judge (cancelled, or a bug on our side): if it
        was the half-open probe, let another one through instead of staying half-open forever."""
        with self._lock:
            self._probing = False

    def success(self) -> None:
        with self._lock:
            self._failures = 0
            self._opened_at = None
            self._probing = False

    def failure(self, reason: str | None = None) -> None:
        with self._lock:
            if reason:
                self.last_failure = reason[:300]
            self._failures += 1
            if self._probing or self._failures >= self.failure_threshold:
                if self._opened_at is None or self._probing:
                    self.opened += 1
                self._opened_at = time.monotonic()
                self._probing = False


class ProbeInFlight(RetryLater):
    """The breaker is half-open and its one probe call is out: wait for its outcome."""


class ResilientJudge:
    """Wraps a backend: the only way tracescore talks to a judge."""

    def __init__(
        self,
        backend: Judge,
        *,
        policy: RetryPolicy | None = None,
        breaker: CircuitBreaker | None = None,
        on_call: Callable[[JudgeReply | None, BaseException | None], None] | None = None,
    ) -> None:
        self.backend = backend
        self.model = backend.model
        self.policy = policy or RetryPolicy()
        self.breaker = breaker or CircuitBreaker()
        self.on_call = on_call
        #: Called before every request, retries included; raises :class:`RetryLater` when
        #: the request must not go out now (the session's calls-per-minute budget).
        self.admit: Callable[[], None] | None = None
        self.calls = 0
        self.failures = 0
        #: set when the half-open probe ends; jobs waiting for it sleep on it (one per loop)
        self._probe_done: tuple[Any, asyncio.Event] | None = None
        #: how many calls waited for a probe's outcome (instead of being deferred again)
        self.probe_waits = 0
        #: the judge's current outage: its WARNING/INFO lines and the deferred jobs' reason
        self.outage = Outage(judge_where(backend), self.breaker.cooldown_s)

    @property
    def max_wait_s(self) -> float | None:
        """How long a job may wait for the judge (the worker's ``judge_max_wait_s``), named
        in the outage WARNING; None: named by its option only."""
        return self.outage.max_wait_s

    @max_wait_s.setter
    def max_wait_s(self, value: float | None) -> None:
        self.outage.max_wait_s = value

    def _waiting(self, fallback: str) -> str:
        return self.outage.reason(fallback)

    def _transient(self, exc: BaseException, reason: str) -> None:
        """A transient failure: the breaker counts it; the outage says it once it opens."""
        opened = self.breaker.opened
        self.breaker.failure(reason)
        self.outage.failed(exc, reason, self.policy.timeout_s)
        if self.breaker.opened != opened:
            self.outage.breaker_opened()

    def _answered(self) -> None:
        self.breaker.success()
        self.outage.answered()

    def after_fork(self) -> None:
        """In a forked child: loop-bound state and the backend's connections are the parent's."""
        self._probe_done = None
        self.breaker.abandon()
        reset = getattr(self.backend, "after_fork", None)
        if reset is not None:
            reset()

    def _probe_event(self) -> asyncio.Event:
        loop = asyncio.get_running_loop()
        if self._probe_done is None or self._probe_done[0] is not loop:
            self._probe_done = (loop, asyncio.Event())
        return self._probe_done[1]

    def _probe_over(self) -> None:
        done, self._probe_done = self._probe_done, None
        if done is not None:
            done[1].set()

    async def _breaker_admits(self) -> bool:
        """Wait while the half-open probe is out (sleeping, not polling): every other job
        would otherwise be deferred again and again until it ends. Returns True for the
        probe itself; raises :class:`RetryLater` when the breaker is (again) open."""
        waited = False
        while True:
            try:
                return self.breaker.before_call()
            except ProbeInFlight as exc:
                if waited:
                    raise RetryLater(exc.reason, exc.delay_s) from None
                waited = True
                self.probe_waits += 1
                try:
                    # a probe lasts at most one call's timeout
                    await asyncio.wait_for(self._probe_event().wait(),
                                           self.policy.timeout_s + 1.0)
                except asyncio.TimeoutError:
                    raise RetryLater(exc.reason, exc.delay_s) from None

    async def _once(self, messages: Sequence[Message], **kw: Any) -> JudgeReply:
        if self.admit is not None:
            self.admit()  # before the breaker: a refused request must not take the probe slot
        try:
            probe = await self._breaker_admits()
        except RetryLater as exc:  # the breaker holds the call back: say for whom it waits
            raise RetryLater(self._waiting(exc.reason), exc.delay_s) from None
        try:
            return await self._attempt(messages, **kw)
        finally:
            if probe:
                self._probe_over()

    async def _attempt(self, messages: Sequence[Message], **kw: Any) -> JudgeReply:
        self.calls += 1
        try:
            call = self.backend.complete(messages, timeout_s=self.policy.timeout_s, **kw)
            # An in-process model (llama.cpp) keeps its own deadline, paced by its generation
            # speed: cut off here it would go on generating in its thread, holding the model,
            # and every call queued behind it would time out too (issue 31).
            reply = await (call if getattr(self.backend, "own_deadline", False)
                           else asyncio.wait_for(call, self.policy.timeout_s))
        except asyncio.TimeoutError as exc:
            self.failures += 1
            reason = f"judge call timed out after {self.policy.timeout_s:g}s"
            self._transient(exc, reason)
            self._notify(None, exc)
            raise TransientJudgeError(reason) from exc
        except TransientJudgeError as exc:
            self.failures += 1
            self._transient(exc, str(exc))
            self._notify(None, exc)
            raise
        except JudgeError as exc:
            self.failures += 1
            self._answered()  # the judge answered; the request was bad
            self._notify(None, exc)
            raise
        except BaseException:
            self.breaker.abandon()
            raise
        self._answered()
        self._notify(reply, None)
        return reply

    def _notify(self, reply: JudgeReply | None, exc: BaseException | None) -> None:
        if self.on_call is not None:
            try:
                self.on_call(reply, exc)
            except Exception:  # accounting must never fail a judge call
                pass

    async def call(self, messages: Sequence[Message], **kw: Any) -> JudgeReply:
        """One logical call with retries on transient failures."""
        attempt = 0
        while True:
            try:
                reply = await self._once(messages, **kw)
                return replace(reply, calls=attempt + 1) if attempt else reply
            except TransientJudgeError as exc:
                if attempt >= self.policy.max_retries:
                    if self.breaker.state != CircuitBreaker.CLOSED:
                        # These failures opened the breaker: the judge is down, not this
                        # request; the job waits for it instead of getting an error score.
                        raise RetryLater(self._waiting(
                            f"judge unavailable after {attempt + 1} tries: {exc}"),
                            self.breaker.cooldown_s) from exc
                    raise JudgeError(f"judge failed after {attempt + 1} tries: {exc}") from exc
                await asyncio.sleep(self.policy.delay(attempt, exc.retry_after))
                attempt += 1

    async def call_json(
        self,
        messages: Sequence[Message],
        validate: Validator,
        *,
        json_schema: Mapping[str, Any] | None = None,
        max_tokens: int = 1024,
    ) -> JudgeReply:
        """Ask for JSON, check it against ``json_schema`` exactly and ``validate`` it; one
        repair attempt; :class:`InvalidJudgeOutput` (with the reason) after."""
        def strict(text: str) -> Any:
            data = parse_json(text)
            if json_schema is not None:
                check(data, json_schema)
            return validate(data)

        reply = await self.call(messages, json_schema=json_schema, max_tokens=max_tokens)
        try:
            return replace(reply, data=strict(reply.text))
        except ValueError as first:
            repair = [
                *messages,
                {"role": "assistant", "content": reply.text[:4000]},
                {"role": "user", "content": (
                    f"That reply was not valid: {first}. Answer again with only the JSON object "
                    "that the instructions ask for, and nothing else.")},
            ]
            second = await self.call(repair, json_schema=json_schema, max_tokens=max_tokens)
            total = replace(
                second,
                calls=reply.calls + second.calls,
                input_tokens=reply.input_tokens + second.input_tokens,
                output_tokens=reply.output_tokens + second.output_tokens,
                latency_ms=reply.latency_ms + second.latency_ms,
            )
            try:
                return replace(total, data=strict(second.text))
            except ValueError as again:
                raise InvalidJudgeOutput(
                    f"judge returned invalid JSON twice: {again} (first: {first})") from again

    async def aclose(self) -> None:
        await self.backend.aclose()
