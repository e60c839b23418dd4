"""Deterministic sampling: data plus a callable.

The decision for a record is ``u = SHA-256(trace_id) → [0, 1)``; a metric with rate ``r`` scores
the record iff ``u < r``. Every process makes the same decision for the same trace, and the
records a metric scores at 5 % are a subset of those it scores at 20 % (nested rates). Rules can
force sampling (errors, a metadata flag, negative feedback); forced records are scored by every
metric.

:meth:`Sampler.decide` runs on the app's request path: it hashes 16 bytes and compares floats,
never blocks and never does I/O.
"""

from __future__ import annotations

import hashlib
import struct
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from ._internal.frozen import fast_constructor
from .record import RagRecord

#: A rule returns a reason string to force sampling, or None.
Rule = Callable[[RagRecord], "str | None"]

FORCE_SAMPLE_KEY = "tracescore.force_sample"

_sha256 = hashlib.sha256
_U64 = struct.Struct(">Q").unpack_from  # the first 8 bytes of a digest, big-endian
_2_POW_M64 = 2.0**-64


def trace_fraction(trace_id: str) -> float:
    """Map a trace id to [0, 1) with SHA-256 (first 8 bytes as an integer / 2**64)."""
    # (x * 2**-64 is x / 2**64 exactly: both round x to the nearest float, then the power of
    # two only moves the exponent)
    return _U64(_sha256(trace_id.encode("ascii", "replace")).digest())[0] * _2_POW_M64


def force_on_error(record: RagRecord) -> str | None:
    return "error" if record.error else None


def force_on_metadata_flag(record: RagRecord) -> str | None:
    """Force when the run's metadata has ``tracescore.force_sample`` set truthy."""
    return "metadata flag" if record.metadata.get(FORCE_SAMPLE_KEY) else None


DEFAULT_RULES: tuple[Rule, ...] = (force_on_error, force_on_metadata_flag)

#: The start of the reason a :func:`priority` rule gives (the read side parses the rate back
#: from it: :func:`tracescore.stats.weighted.priority_rate`).
PRIORITY_PREFIX = "priority "


def priority(rate: float, when: Callable[[RagRecord], bool], reason: str) -> Rule:
    """A rule that samples the records for which ``when`` holds at ``rate`` at least (on the
    same hash as the metrics' rates): it forces those with ``u < rate``, with the reason
    ``"priority <rate>: <reason>"``, which the read side turns back into each scored record's
    inclusion probability max(rate, metric rate) (docs/monitoring.md, "Populations").
    A forced record is scored by every metric, as for any rule."""
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0.0 < rate <= 1.0:
        raise ValueError(f"priority rate must be a number in (0, 1], got {rate!r}")
    if not isinstance(reason, str) or not reason:
        raise ValueError("priority reason must be a non-empty str")
    tag = f"{PRIORITY_PREFIX}{float(rate)!r}: {reason}"

    def rule(record: RagRecord) -> str | None:
        return tag if when(record) and trace_fraction(record.trace_id) < rate else None

    rule.__name__ = f"priority({rate!r}, {reason!r})"
    return rule


@dataclass(frozen=True, slots=True)
class Decision:
    u: float
    metrics: tuple[str, ...]
    forced: str | None = None

    @property
    def sampled(self) -> bool:
        return bool(self.metrics)


@dataclass
class Sampler:
    """Per-metric nested rates over one hash, plus force rules.

    ``rate`` applies to every metric without an entry in ``rates``.
    """

    rate: float = 1.0
    rates: Mapping[str, float] = field(default_factory=dict)
    rules: Sequence[Rule] = DEFAULT_RULES

    def __post_init__(self) -> None:
        for name, r in [("sample_rate", self.rate), *self.rates.items()]:
            if isinstance(r, bool) or not isinstance(r, (int, float)) or not 0.0 <= r <= 1.0:
                raise ValueError(f"sample rate for {name!r} must be a number in [0, 1], got {r!r}")

    def rate_for(self, metric: str) -> float:
        return float(self.rates.get(metric, self.rate))

    def forced_reason(self, record: RagRecord) -> str | None:
        for rule in self.rules:
            reason = rule(record)
            if reason:
                return reason
        return None

    def top_rate(self, metrics: Sequence[str]) -> float:
        """The highest rate of ``metrics``: a trace with ``u`` at or above it is sampled only
        if a rule forces it (what an adapter checks at a root run's end, before it builds the
        parts of a record only a scored record needs)."""
        return max((self.rate_for(m) for m in metrics), default=0.0)

    def decide(self, record: RagRecord, metrics: Sequence[str], u: float | None = None
               ) -> Decision:
        """The decision for ``record``; ``u``: its :func:`trace_fraction` when the caller
        has it already (it is a function of the trace id only).

        Request path: the built-in sampler with its default rules and one rate for every
        metric (the common set-up) decides without a call per rule or per metric — the
        same decision, read from the same attributes (they may change between calls)."""
        if u is None:
            u = trace_fraction(record.trace_id)
        common = type(self) is Sampler and self.rules is DEFAULT_RULES
        # (the default rules called directly: no loop over the rules)
        forced = (force_on_error(record) or force_on_metadata_flag(record) if common
                  else self.forced_reason(record))
        if forced:
            return Decision(u, tuple(metrics), forced)
        if common and not self.rates:
            return _new_decision(u, tuple(metrics) if u < float(self.rate) else ())
        return Decision(u, tuple(m for m in metrics if u < self.rate_for(m)))


#: ``Decision(u, metrics)``, built by setting its slots (the request path makes one per record)
_new_decision = fast_constructor(Decision, ("u", "metrics"))

PRESETS: dict[str, Callable[[], Sampler]] = {
    "all": lambda: Sampler(1.0),
    "none": lambda: Sampler(0.0),
    "errors_only": lambda: Sampler(0.0),
    "light": lambda: Sampler(0.05),
}


class TokenBucket:
    """At most ``per_minute`` acquisitions per minute, with bursts up to ``burst``.

    Thread-safe; :meth:`try_acquire` never blocks. Used to cap judge calls.
    """

    def __init__(self, per_minute: float, burst: float | None = None) -> None:
        if per_minute <= 0:
            raise ValueError("per_minute must be > 0")
        self.rate = per_minute / 60.0
        self.capacity = burst if burst is not None else max(1.0, per_minute / 6.0)
        self._tokens = self.capacity
        self._t = time.monotonic()
        self._lock = threading.Lock()

    def try_acquire(self, n: float = 1.0) -> bool:
        with self._lock:
            now = time.monotonic()
            self._tokens = min(self.capacity, self._tokens + (now - self._t) * self.rate)
            self._t = now
            if self._tokens >= n:
                self._tokens -= n
                return True
            return False

    def wait_time(self, n: float = 1.0) -> float:
        with self._lock:
            missing = n - self._tokens
            return max(0.0, missing / self.rate)
