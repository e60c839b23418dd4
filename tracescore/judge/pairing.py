"""Two judge steps of one record in one call: ``extract`` and ``contexts``.

Neither step needs a statement list (``extract`` makes it; ``contexts`` judges the retrieved
contexts), so when a record's metrics need both — the statement metrics ask for ``extract``,
the context metrics for ``contexts`` — one call can answer both: the seven-metric RAG set
costs 2 calls per record instead of 3, the five Ragas metrics 3 instead of 4.

- A step whose part is not cached does not call at once: it opens (or joins) its record's
  *meeting* and lets the event loop turn a few times, so the other jobs of the record, leased
  together, can bring their part. Then the step that opened the meeting asks.
- Both parts there and neither cached: one call (:data:`.prompts.PAIR_TASK`: each step's own
  task and reply format, word for word; the schema gives the server each part's exact
  schema). Only one part, or the other one cached: the single step as before, its old prompt.
- Each part of the reply is checked as strictly as the single step's reply. A valid part is
  cached under the single step's own key(s), so a later run with only one of the metrics, or
  a metric added later, finds it; a part that fails is asked again alone, with the single
  step's prompt (and its one repair), and the valid part is kept. A paired call that fails
  as a whole (no usable reply after its repair, or refused) leaves both parts to their single
  steps; a judge that is down (``RetryLater``, transient errors) fails both parts' jobs alike.
- Accounting: the call is the opener's — its usage counts it under step ``extract+contexts``,
  and ``judge_calls`` has one row for it; the other part is a shared result (a cached step),
  as when two jobs share one in-flight step.

Runs on the scoring worker's event loop only (like :class:`.session.JudgeSession`).
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from . import prompts as P
from . import schemas as SC
from .base import InvalidJudgeOutput, JudgeError, TransientJudgeError
from .session import JudgeSession, StepResult, Usage

#: Loop turns a step waits for the other part of its record. The worker leases a record's
#: jobs together and starts their tasks in one turn; each reaches its first step within a turn
#: or two (the timeout wrapper adds one). Turns, not seconds: a loaded machine runs them more
#: slowly, in the same order.
GATHER_TURNS = 4
#: The steps that can share a call, in the order of the paired reply.
PARTS = ("extract", "contexts")


@dataclass(frozen=True)
class Part:
    """One step's share of a paired call: what the single step would send and check."""

    name: str  # the single step's name: "extract" or "contexts"
    version: str
    payload: Mapping[str, Any]
    task: str
    reply_format: str
    schema: Mapping[str, Any]
    validate: Callable[[Any], Any]
    max_tokens: int
    #: the single step's cache key: one part per content
    key: str
    #: caches the validated data under the single step's key(s)
    remember: Callable[[Any], None]


@dataclass(frozen=True)
class Outcome:
    """What became of a part. ``data``: validated and cached. None: the owner asks its single
    step itself (the part was alone, the other part was cached, or this part failed:
    ``error``). ``call``: the paired call, when the owner made it (its usage counts it);
    ``shared``: the paired call another job made."""

    data: Any = None
    error: str = ""
    call: StepResult | None = None
    shared: StepResult | None = None


class _Meeting:
    def __init__(self) -> None:
        self.parts: dict[str, Part] = {}
        self.outcomes: dict[str, asyncio.Future[Outcome]] = {}


class _Registry:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.meetings: dict[str, _Meeting] = {}
        #: part key → its outcome, while a meeting holds the part
        self.parts: dict[str, asyncio.Future[Outcome]] = {}


_REGISTRIES: weakref.WeakKeyDictionary[JudgeSession, _Registry] = weakref.WeakKeyDictionary()


def _registry(session: JudgeSession) -> _Registry:
    loop = asyncio.get_running_loop()
    reg = _REGISTRIES.get(session)
    if reg is None or reg.loop is not loop:  # a new session, or a new loop (fork, restart)
        reg = _Registry(loop)
        _REGISTRIES[session] = reg
    return reg


async def ask(session: JudgeSession, record_id: str, part: Part) -> Outcome:
    """The outcome of ``part`` for the record: from a paired call with the record's other
    part, or ``Outcome()`` — then the caller runs its single step."""
    if session.caching_only():  # a cache-only read (the judge budget's proxy) never pairs
        return Outcome()
    if getattr(getattr(session.judge, "backend", None), "own_deadline", False):
        # An in-process model (llama.cpp) has no round trip to save, and a small one rambles
        # to the paired call's combined token budget: the bundled 135M model spent 197 s on
        # a paired call and its repair (both cut off) before the single steps took 5 s and
        # 11 s (issue 31). Its steps are asked one at a time.
        return Outcome()
    reg = _registry(session)
    running = reg.parts.get(part.key)
    if running is not None:  # the same content is in a meeting already (this or another record)
        out = await asyncio.shield(running)
        return Outcome(out.data, out.error, None, out.call or out.shared)
    meeting = reg.meetings.get(record_id)
    if meeting is not None:
        if part.name in meeting.parts:  # the same step with other content under this id
            return Outcome()
        fut = _join(reg, meeting, part)
        return await asyncio.shield(fut)  # the opener resolves it
    meeting = _Meeting()
    reg.meetings[record_id] = meeting
    mine = _join(reg, meeting, part)
    try:
        try:
            for _ in range(GATHER_TURNS):
                await asyncio.sleep(0)
        finally:  # closed: a part that comes later asks alone
            if reg.meetings.get(record_id) is meeting:
                del reg.meetings[record_id]
        await _run(session, record_id, meeting, part.name)
    except BaseException as exc:
        for f in meeting.outcomes.values():
            if f.done():
                continue
            if isinstance(exc, asyncio.CancelledError):
                f.set_result(Outcome())  # the opener's job was stopped: the others ask alone
            else:
                f.set_exception(exc)
                f.exception()  # retrieved: the waiters re-raise it
        raise
    finally:
        for p in meeting.parts.values():
            if reg.parts.get(p.key) is meeting.outcomes[p.name]:
                del reg.parts[p.key]
    return mine.result()


def _join(reg: _Registry, meeting: _Meeting, part: Part) -> asyncio.Future[Outcome]:
    fut: asyncio.Future[Outcome] = reg.loop.create_future()
    meeting.parts[part.name] = part
    meeting.outcomes[part.name] = fut
    reg.parts[part.key] = fut
    return fut


async def _run(session: JudgeSession, record_id: str, meeting: _Meeting, opener: str) -> None:
    """Resolve every part of the closed meeting: one paired call when both parts are there and
    neither is cached, else ``Outcome()`` for each (their single steps)."""
    parts = [meeting.parts[n] for n in PARTS if n in meeting.parts]
    store = session.store()
    if len(parts) < 2 or any(store.judge_cache_get(p.key) is not None for p in parts):
        for f in meeting.outcomes.values():
            f.set_result(Outcome())
        return
    payload = {p.name: dict(p.payload) for p in parts}

    def validate(data: Any) -> dict[str, dict[str, Any]]:
        # the whole reply is checked against SC.pair (both keys, no other) before this
        out: dict[str, dict[str, Any]] = {}
        for p in parts:
            try:
                SC.check(data.get(p.name), p.schema, p.name)
                out[p.name] = {"data": p.validate(data[p.name])}
            except ValueError as exc:
                out[p.name] = {"error": str(exc)[:500]}
        return out

    try:
        r = await session.step(
            P.PAIR_STEP, P.PAIR_VERSION, payload,
            P.messages(P.PAIR_TASK, payload, P.PAIR_FORMAT), validate,
            json_schema=SC.pair({p.name: p.schema for p in parts}),
            max_tokens=sum(p.max_tokens for p in parts), record_id=record_id)
    except JudgeError as exc:
        if isinstance(exc, TransientJudgeError):
            raise  # the judge is failing: asking twice more would not help
        # No usable reply after the repair (or the request was refused, e.g. too long): each
        # part asks alone. The calls made are the opener's; their tokens are unknown here
        # (``judge_calls`` logged them as a failed step).
        failed = StepResult(None, calls=2 if isinstance(exc, InvalidJudgeOutput) else 1)
        for name, f in meeting.outcomes.items():
            f.set_result(Outcome(error=f"paired call failed: {exc}"[:500],
                                 call=failed if name == opener else None))
        return
    for p in parts:
        got = r.data.get(p.name, {}) if isinstance(r.data, dict) else {}
        call, shared = (r, None) if p.name == opener else (None, r)
        if "data" in got:
            p.remember(got["data"])
            out = Outcome(got["data"], "", call, shared)
        else:
            out = Outcome(None, str(got.get("error", "no reply")), call, shared)
        meeting.outcomes[p.name].set_result(out)


def account(usage: Usage, step: str, out: Outcome) -> None:
    """Put a part's outcome into the usage of the metric that asked for ``step``: the paired
    call when it made it; a shared (cached) step when another job's call answered it."""
    if out.call is not None:
        usage.add(P.PAIR_STEP, out.call)
    elif out.data is not None and out.shared is not None:
        usage.add(step, replace(out.shared, cached=True))
