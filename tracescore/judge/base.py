"""The judge interface: one async call, parsed and validated output, usage accounting.

A backend turns chat messages into a :class:`JudgeReply`. It does not retry or validate:
:class:`~tracescore.judge.resilience.ResilientJudge` wraps every backend with timeouts,
retries (Retry-After honoured), JSON repair and a circuit breaker, so all backends behave alike.
Judges are only ever called from the scoring worker's event loop, never from the app.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from .._internal.validate import clean_name

Message = Mapping[str, str]  # {"role": "system"|"user"|"assistant", "content": "..."}


@dataclass(frozen=True, slots=True)
class TokenLogprob:
    token: str
    logprob: float
    #: Alternatives at this position (token → logprob), when the server returned them.
    top: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class JudgeReply:
    text: str
    model: str
    input_tokens: int = 0
    output_tokens: int = 0
    latency_ms: float = 0.0
    logprobs: Sequence[TokenLogprob] | None = None
    #: Parsed JSON when the call asked for JSON (set by the resilient wrapper).
    data: Any = None
    cached: bool = False
    #: Requests sent to get this reply (retries and a JSON repair included).
    calls: int = 1

    def __post_init__(self) -> None:
        # the server's word, stored with every score and printed by compare/check: no
        # control characters (a proxy could answer a model name with an escape sequence)
        clean = clean_name(self.model) if self.model else self.model
        if clean != self.model:
            object.__setattr__(self, "model", clean)


class JudgeError(Exception):
    """A judge call failed for good (after retries); becomes an error score with the reason."""


class InvalidJudgeOutput(JudgeError):
    """The judge answered, but not with what the schema asks (after one repair attempt)."""


class RetryLater(Exception):
    """Not the record's fault: try the job again after ``delay_s`` without counting an attempt.

    Raised while the circuit breaker is open or a judge-call budget is exhausted, so jobs wait
    for the judge instead of failing in a storm.
    """

    def __init__(self, reason: str, delay_s: float) -> None:
        super().__init__(reason)
        self.reason = reason
        self.delay_s = delay_s


class TransientJudgeError(JudgeError):
    """A failure worth retrying (429, 5xx, timeout, connection). ``retry_after`` in seconds."""

    def __init__(self, message: str, retry_after: float | None = None,
                 status: int | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.status = status


@runtime_checkable
class Judge(Protocol):
    """A chat model that answers judge prompts.

    ``complete`` must raise :class:`TransientJudgeError` for failures worth retrying and
    :class:`JudgeError` for the rest; it must not block the event loop.
    """

    model: str

    async def complete(
        self,
        messages: Sequence[Message],
        *,
        json_schema: Mapping[str, Any] | None = None,
        max_tokens: int = 1024,
        logprobs: int | None = None,
        timeout_s: float | None = None,
    ) -> JudgeReply: ...

    async def aclose(self) -> None: ...
