"""A judge session: the resilient judge, the shared-step cache, budgets and accounting.

Steps are cached by ``(step, model, prompt version, content hash)`` in the database (table
``judge_cache``; on PostgreSQL shared by every worker of the fleet), so rescoring a record or adding a metric later does not repeat a call. Within
one process, concurrent requests for the same step share one in-flight call. Every call (and
cache hit) is accounted in ``judge_calls`` with tokens, latency and cost.

The session also knows who judges (:meth:`JudgeSession.identity`): the configured model, the
model the server *reported* in its replies (a provider may change the model behind one name),
and the version of the prompt templates each step sent (a short hash, :func:`prompt_id`). A
change of either is noted here and makes the canary run again (:mod:`.canary`).

Runs on the scoring worker's event loop only; its SQLite connection belongs to that thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import hashlib
import json
import os
import time
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from .._internal.db_faults import storage_fault
from .._internal.validate import clean_name
from ..sampling import TokenBucket
from ..store import StoreAPI, is_postgres, open_store
from .base import InvalidJudgeOutput, JudgeReply, Message, RetryLater
from .resilience import ResilientJudge, Validator
from .schemas import check, parse_reply


@dataclass(frozen=True)
class Price:
    """USD per million tokens."""

    input_per_mtok: float
    output_per_mtok: float

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        return (input_tokens * self.input_per_mtok + output_tokens * self.output_per_mtok) / 1e6


@dataclass
class StepResult:
    data: Any
    input_tokens: int = 0
    output_tokens: int = 0
    calls: int = 0
    cached: bool = False
    logprobs: Any = None
    latency_ms: float = 0.0
    cost_usd: float | None = None
    #: the model the judge server reported for this call (None: served from the cache)
    model: str | None = None
    #: the step's prompt template id, ``version@hash`` (:func:`prompt_id`)
    prompt: str = ""


@dataclass
class Usage:
    """What one metric's scoring cost (for the score's details)."""

    calls: int = 0
    cached_steps: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    latency_ms: float = 0.0
    cost_usd: float | None = None
    steps: list[str] = field(default_factory=list)
    #: the model the server reported in the last call behind this usage (None: all cached)
    reported: str | None = None
    #: step → the prompt template id it sent (``version@hash``)
    prompts: dict[str, str] = field(default_factory=dict)
    #: every model the server reported in the calls behind this usage
    models: set[str] = field(default_factory=set)

    def add(self, step: str, r: StepResult) -> None:
        self.steps.append(step)
        if r.prompt:
            self.prompts[step] = r.prompt
        if r.model and not r.cached:
            self.reported = r.model
            self.models.add(r.model)
        if r.cached:
            self.cached_steps += 1
        else:
            self.calls += r.calls
            self.input_tokens += r.input_tokens
            self.output_tokens += r.output_tokens
            self.latency_ms += r.latency_ms
            if r.cost_usd is not None:
                self.cost_usd = (self.cost_usd or 0.0) + r.cost_usd

    def details(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "judge_calls": self.calls, "judge_cached_steps": self.cached_steps,
            "judge_input_tokens": self.input_tokens, "judge_output_tokens": self.output_tokens,
            "judge_latency_ms": round(self.latency_ms, 1)}
        if self.cost_usd is not None:
            out["judge_cost_usd"] = self.cost_usd
        return out


def prompt_id(version: str, messages: Sequence[Message]) -> str:
    """``version@hash`` of a step's prompt *template*: its messages with the judged data cut
    off (everything after the ``DATA`` line, see :func:`.prompts.messages`). The same
    template gives the same id in every process; an edited prompt gives a new one even when
    its version name was not bumped."""
    h = hashlib.sha256(version.encode())
    for m in messages:
        text = str(m.get("content", ""))
        cut = text.find("\n\nDATA\n")
        h.update(f"\x00{m.get('role', '')}\x00{text if cut < 0 else text[:cut]}".encode(
            "utf-8", "replace"))
    return f"{version}@{h.hexdigest()[:8]}"


def prompt_version(prompts: Mapping[str, str]) -> str:
    """A short stable hash of the prompt templates behind a score (step → :func:`prompt_id`);
    ``""`` when no step was asked."""
    if not prompts:
        return ""
    blob = "\x00".join(f"{k}={v}" for k, v in sorted(prompts.items()))
    return hashlib.sha256(blob.encode("utf-8", "replace")).hexdigest()[:10]


class NotCached(Exception):
    """A step asked within :meth:`JudgeSession.cache_only` is not in the cache (the judge
    would have to be called)."""


_CACHE_ONLY: contextvars.ContextVar[bool] = contextvars.ContextVar("tracescore_judge_cache_only",
                                                                  default=False)
#: Set while the canary must ask the judge itself (not the cache): see :meth:`JudgeSession.fresh`.
_FRESH: contextvars.ContextVar[bool] = contextvars.ContextVar("tracescore_judge_fresh",
                                                               default=False)
#: How often the canary runs again (seconds) when ``$TRACESCORE_JUDGE_CANARY_EVERY`` is unset.
DEFAULT_CANARY_EVERY_S = 86400.0


def canary_every_from_env() -> float | None:
    """``$TRACESCORE_JUDGE_CANARY_EVERY`` (``"24h"``, ``"30m"``, seconds; ``"off"``/``0``: no
    scheduled runs) in seconds; default one day. A bad value raises ValueError."""
    raw = os.environ.get("TRACESCORE_JUDGE_CANARY_EVERY", "").strip()
    if not raw:
        return DEFAULT_CANARY_EVERY_S
    if raw.lower() in ("off", "0", "none", "never"):
        return None
    try:
        return float(raw) if float(raw) > 0 else None
    except ValueError:
        from .._internal.durations import duration

        try:
            return duration(raw)
        except ValueError as exc:
            raise ValueError(f"TRACESCORE_JUDGE_CANARY_EVERY: {exc}") from None


def content_key(step: str, model: str, version: str, payload: Any) -> str:
    blob = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    h = hashlib.sha256(f"{step}\x00{model}\x00{version}\x00{blob}".encode("utf-8", "replace"))
    return h.hexdigest()


class JudgeSession:
    def __init__(
        self,
        judge: ResilientJudge,
        db_path: str,
        *,
        price: Price | None = None,
        calls_per_minute: float | None = None,
        daily_budget_usd: float | None = None,
        on_call: Callable[[str, JudgeReply | None, BaseException | None], None] | None = None,
        max_concurrency: int | None = None,
    ) -> None:
        self.judge = judge
        #: at most this many steps calling the judge at once (None: bounded by the caller)
        self.max_concurrency = max_concurrency
        self._slots: asyncio.Semaphore | None = None
        self.db_path = db_path
        self.price = price
        self.bucket = TokenBucket(calls_per_minute) if calls_per_minute else None
        #: on a shared database (PostgreSQL) the bucket lives in the database: the calls
        #: per minute hold for the whole fleet of workers, not per process
        self.fleet_bucket = bool(calls_per_minute) and is_postgres(db_path)
        judge.admit = self._admit
        self.daily_budget_usd = daily_budget_usd
        self.on_call = on_call
        self._store: StoreAPI | None = None
        self._inflight: dict[str, asyncio.Future[StepResult]] = {}
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = \
            weakref.WeakValueDictionary()
        #: quality warning from the canary (set by the canary; put on every judge score)
        self.health: Mapping[str, Any] = {}
        #: the model the server reported in its last reply (None: no call yet)
        self.reported_model: str | None = None
        #: (from, to, unix time) of the last change of the reported model seen here
        self.model_change: tuple[str, str, float] | None = None
        #: step → the prompt template id it last sent
        self.prompts: dict[str, str] = {}
        #: the canary's steps → their template ids at its last run (a change reruns it)
        self.canary_prompts: dict[str, str] = {}
        #: metric → the model behind its last score (the scores' ``judge_model`` segment)
        self.metric_models: dict[str, str] = {}
        #: the canary's schedule and state (:mod:`.canary`): seconds between runs (None: only
        #: at start-up and on a change), armed once the start-up run happened
        self.canary_every_s: float | None = canary_every_from_env()
        self.canary_armed = False
        self.canary_next_at = 0.0
        self.canary_task: asyncio.Task[Any] | None = None
        self.canary_seen_change: tuple[str, str, float] | None = None

    @property
    def model(self) -> str:
        return clean_name(self.judge.model)  # (stored with scores and the cache; printed)

    # -- who judges ------------------------------------------------------------------------------
    def note_reply(self, reply: JudgeReply) -> None:
        """Remember the model the server reported (and a change of it)."""
        model = reply.model or ""
        if not model:
            return
        if self.reported_model is not None and model != self.reported_model:
            self.model_change = (self.reported_model, model, time.time())
        self.reported_model = model

    @property
    def prompt_changed(self) -> bool:
        """Whether a step of the canary sent another template since the canary last ran."""
        return any(self.prompts.get(k, v) != v for k, v in self.canary_prompts.items())

    def identity(self, usage: Usage) -> dict[str, Any]:
        """``{configured, reported, prompt_version}`` of the judge behind ``usage``'s steps.
        ``reported``: what the server said in the calls behind them; served from the cache,
        the model it reported last (None before any call)."""
        return {"configured": self.model, "reported": usage.reported or self.reported_model,
                "prompt_version": prompt_version(usage.prompts)}

    def model_of(self, metric: str) -> str:
        """The model behind ``metric``'s last score: reported when known, else configured."""
        return self.metric_models.get(metric) or self.model

    @contextlib.contextmanager
    def fresh(self) -> Iterator[None]:
        """Within this block (this task), steps ask the judge even when the cache has the
        answer: a canary that read cached verdicts could not see the judge change."""
        token = _FRESH.set(True)
        try:
            yield
        finally:
            _FRESH.reset(token)

    @contextlib.contextmanager
    def cache_only(self) -> Iterator[None]:
        """Within this block (this task), a step not in the cache raises :class:`NotCached`
        instead of asking the judge (or waiting for another task's call): the judge budget's
        proxy reads the judge's past verdict on the same content this way
        (:mod:`tracescore.budget.features`)."""
        token = _CACHE_ONLY.set(True)
        try:
            yield
        finally:
            _CACHE_ONLY.reset(token)

    @staticmethod
    def caching_only() -> bool:
        """Whether this task is within :meth:`cache_only`."""
        return _CACHE_ONLY.get()

    def store(self) -> StoreAPI:
        if self._store is None:
            self._store = open_store(self.db_path)
        return self._store

    def _recover_store(self) -> None:
        """After a full disk or an I/O error on the session's own connection: open it again
        (a connection that met one may keep a stale snapshot, which stops the WAL's
        checkpoints); still failing, the next write tries again."""
        recover = getattr(self._store, "recover", None)
        if recover is not None:
            try:
                recover()
            except Exception:
                pass

    def lock(self, key: str) -> asyncio.Lock:
        """One lock per key, alive while someone holds it (serialises steps that must see
        each other's cache entries)."""
        lock = self._locks.get(key)
        if lock is None:
            lock = asyncio.Lock()
            self._locks[key] = lock
        return lock

    def after_fork(self) -> None:
        """In a forked child: forget the parent's connection, loop-bound state and client."""
        self._store = None  # the parent's SQLite connection must not be used here
        self._slots = None
        self._inflight = {}
        self._locks = weakref.WeakValueDictionary()
        self.judge.after_fork()

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None

    # -- budgets ------------------------------------------------------------------------------
    def _admit(self) -> None:
        """Per request (retries and repairs count against the provider's rate limit too)."""
        if self.bucket is None:
            return
        if self.fleet_bucket:
            try:
                wait = self.store().take_rate_token(  # type: ignore[attr-defined]
                    f"judge:{self.model}", self.bucket.rate * 60.0, self.bucket.capacity)
            except Exception as exc:  # database unreachable: no call without the fleet's token
                raise RetryLater(f"fleet rate limit unavailable ({type(exc).__name__})",
                                 5.0) from exc
            if wait > 0:
                raise RetryLater("fleet judge calls-per-minute budget reached", wait)
            return
        if not self.bucket.try_acquire():
            raise RetryLater("judge calls-per-minute budget reached", self.bucket.wait_time())

    def _check_budget(self) -> None:
        if self.daily_budget_usd is not None and self.price is not None:
            spent = self.store().judge_cost_today()
            if spent >= self.daily_budget_usd:
                now = datetime.now(timezone.utc)
                midnight = now.replace(hour=0, minute=0, second=0, microsecond=0).timestamp() \
                    + 86400
                raise RetryLater(f"daily judge budget of ${self.daily_budget_usd:g} spent",
                                 max(1.0, midnight - now.timestamp()))

    # -- one cached step ------------------------------------------------------------------------
    async def step(
        self,
        step: str,
        version: str,
        payload: Mapping[str, Any],
        messages: Sequence[Message],
        validate: Validator,
        *,
        json_schema: Mapping[str, Any] | None = None,
        max_tokens: int = 1024,
        record_id: str | None = None,
        logprobs: int | None = None,
        parse: Callable[[JudgeReply], Any] | None = None,
    ) -> StepResult:
        """Run (or reuse) one judge step. ``validate`` checks parsed JSON; ``parse`` instead
        turns the raw reply (text, logprobs) into the result. Both raise ValueError."""
        key = content_key(step, self.model, version, payload)
        pid = prompt_id(version, messages)
        self.prompts[step] = pid
        fresh = _FRESH.get()
        running = None if fresh else self._inflight.get(key)
        if running is not None and _CACHE_ONLY.get():
            raise NotCached(step)
        if running is not None:
            r = await asyncio.shield(running)
            return StepResult(r.data, cached=True, logprobs=r.logprobs, prompt=pid)
        hit = None if fresh else self.store().judge_cache_get(key)
        if hit is not None:
            return StepResult(hit, cached=True, prompt=pid)
        if _CACHE_ONLY.get():
            raise NotCached(step)
        fut: asyncio.Future[StepResult] = asyncio.get_running_loop().create_future()
        if not fresh:  # a fresh call is the canary's own: nobody else waits for it
            self._inflight[key] = fut
        if self.max_concurrency and self._slots is None:
            self._slots = asyncio.Semaphore(self.max_concurrency)  # binds to the worker's loop
        slots = self._slots
        try:
            if slots is not None:
                # The budget is checked once a slot is free, so at most max_concurrency
                # calls can overshoot the daily budget, however many jobs are waiting.
                await slots.acquire()
            try:
                return await self._call_step(step, version, messages, validate, key, fut,
                                             json_schema=json_schema, max_tokens=max_tokens,
                                             record_id=record_id, logprobs=logprobs,
                                             parse=parse, quoted=_texts(payload))
            finally:
                if slots is not None:
                    slots.release()
        except BaseException as exc:
            if not fut.done():
                fut.set_exception(exc)
                fut.exception()  # retrieved: waiters re-raise it, nobody else must log it
            raise
        finally:
            if self._inflight.get(key) is fut:
                del self._inflight[key]

    async def _call_step(
        self, step: str, version: str, messages: Sequence[Message], validate: Validator,
        key: str, fut: asyncio.Future[StepResult], *, json_schema: Mapping[str, Any] | None,
        max_tokens: int, record_id: str | None, logprobs: int | None,
        parse: Callable[[JudgeReply], Any] | None, quoted: Sequence[str] = (),
    ) -> StepResult:
        """The call behind :meth:`step` (a concurrency slot held); resolves ``fut``.

        A JSON reply is read by :func:`.schemas.parse_reply`: the whole reply, or the one
        object inside prose unless its text is in ``quoted`` (the step's input texts); then
        checked against ``json_schema`` and ``validate``d; one repair call when it fails."""
        self._check_budget()
        t0 = time.perf_counter()
        error: BaseException | None = None
        reply: JudgeReply | None = None
        try:
            if parse is not None:
                reply, data = await self._call_parsed(messages, parse, max_tokens, logprobs)
            else:
                def parse_json(r: JudgeReply) -> Any:
                    value = parse_reply(r.text, quoted)
                    if json_schema is not None:
                        check(value, json_schema)
                    return validate(value)

                reply, data = await self._call_parsed(messages, parse_json, max_tokens, None,
                                                      is_json=True, json_schema=json_schema)
        except BaseException as exc:
            error = exc
            raise
        finally:
            latency_ms = (time.perf_counter() - t0) * 1000
            self._account(step, record_id, reply, error, latency_ms)
        assert reply is not None
        self.note_reply(reply)
        try:
            self.store().judge_cache_put(key, step, self.model, version, data,
                                         reply.input_tokens, reply.output_tokens)
        except Exception as exc:
            # The verdict stands without its cache row: a full disk (or a lock) must not turn
            # a judged record into an error score (issue 31); a bad write still raises.
            if storage_fault(exc) is None:
                raise
            self._recover_store()
        result = StepResult(data, reply.input_tokens, reply.output_tokens, calls=reply.calls,
                            logprobs=reply.logprobs, latency_ms=latency_ms,
                            cost_usd=self.price.cost(reply.input_tokens,
                                                     reply.output_tokens)
                            if self.price else None,
                            model=reply.model or None, prompt=prompt_id(version, messages))
        fut.set_result(result)
        return result

    async def _call_parsed(self, messages: Sequence[Message], parse: Callable[[JudgeReply], Any],
                           max_tokens: int, logprobs: int | None, *, is_json: bool = False,
                           json_schema: Mapping[str, Any] | None = None,
                           ) -> tuple[JudgeReply, Any]:
        """A call whose raw reply ``parse`` reads; one repair call when it cannot.
        ``is_json``: a JSON step (``json_schema`` goes to the judge for structured output;
        the repair asks for the JSON object alone)."""
        from dataclasses import replace

        kw: dict[str, Any] = {"max_tokens": max_tokens}
        if is_json:
            kw["json_schema"] = json_schema
        else:
            kw["logprobs"] = logprobs
        reply = await self.judge.call(messages, **kw)
        try:
            return reply, parse(reply)
        except ValueError as first:
            want = "the JSON object that the instructions ask for" if is_json else \
                "what the instructions ask for"
            repair = [*messages, {"role": "assistant", "content": reply.text[:4000]},
                      {"role": "user", "content": (
                          f"That reply was not valid: {first}. Answer again with only {want}, "
                          "and nothing else.")}]
            second = await self.judge.call(repair, **kw)
            total = replace(second, calls=reply.calls + second.calls,
                            input_tokens=reply.input_tokens + second.input_tokens,
                            output_tokens=reply.output_tokens + second.output_tokens,
                            latency_ms=reply.latency_ms + second.latency_ms)
            try:
                return total, parse(second)
            except ValueError as again:
                what = "returned invalid JSON" if is_json else "reply not usable"
                raise InvalidJudgeOutput(
                    f"judge {what} twice: {again} (first: {first})") from again

    def _account(self, step: str, record_id: str | None, reply: JudgeReply | None,
                 error: BaseException | None, latency_ms: float) -> None:
        if isinstance(error, RetryLater):
            # The step did not happen (breaker open): it is accounted when the job runs again.
            # Logging it would add a fake failed call per deferred job while the judge is down.
            return
        tin = reply.input_tokens if reply else 0
        tout = reply.output_tokens if reply else 0
        cost = self.price.cost(tin, tout) if self.price and reply else None
        try:
            self.store().judge_call_log(
                record_id=record_id, step=step, model=self.model, input_tokens=tin,
                output_tokens=tout, latency_ms=latency_ms, cost_usd=cost,
                error=None if error is None else f"{type(error).__name__}: {error}"[:500],
            )
        except Exception:
            pass
        if self.on_call is not None:
            try:
                self.on_call(step, reply, error)
            except Exception:
                pass


def _texts(payload: Any, limit: int = 10_000) -> list[str]:
    """The strings of a step's payload (the texts under evaluation), at most ``limit``."""
    out: list[str] = []
    stack = [payload]
    while stack and len(out) < limit:
        x = stack.pop()
        if isinstance(x, str):
            out.append(x)
        elif isinstance(x, Mapping):
            stack.extend(x.values())
        elif isinstance(x, (list, tuple)):
            stack.extend(x)
    return out
