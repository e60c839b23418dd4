"""Monitor declarations: what to watch, when it is bad, and whom to tell.

A :class:`MonitorSet` comes from a TOML file (:func:`load_monitors`, by default
``tracescore-monitors.toml``; ``examples/tracescore-monitors.toml`` documents every key) or from
``tracescore.init(monitors=...)`` (:func:`monitors_from_objects`). It is validated once, on load:
every problem of a file is reported together in one :class:`MonitorConfigError`, one line each,
naming the file, the monitor (or channel) and the key, e.g.::

    tracescore-monitors.toml: monitor 'faithfulness-prod': window: '5x' is not a duration
    (use a number and a unit: 30m, 1h, 1d, 1w)

What only the running pipeline knows (the configured scores, the declared segment keys, each
metric's direction) is checked afterwards by :meth:`MonitorSet.check_against`.

Everything here is plain, frozen data (JSON-able through ``to_json()``) and thread-safe to share.
Loading reads the file and the environment (``url_env`` and ``env:NAME`` header values are
resolved at load, so a missing secret is a configuration error, not a failed delivery later);
nothing else does I/O.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import math
import os
import re
import sys
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field, fields
from pathlib import Path
from typing import Any, Literal, Union
from urllib.parse import urlsplit

from .._internal.secrets import register_secret
from .._internal.validate import is_number

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

__all__ = [
    "BASELINES",
    "DEFAULT_FILE",
    "PIPELINE_FIGURES",
    "SEGMENT_DIMENSIONS",
    "STATISTICS",
    "Channel",
    "Monitor",
    "MonitorConfigError",
    "MonitorSet",
    "duration",
    "format_duration",
    "load_monitors",
    "monitors_from_objects",
]

#: The file ``tracescore check`` / ``monitor`` read when no ``--monitors`` is given.
DEFAULT_FILE = "tracescore-monitors.toml"
#: How a set built by ``init(monitors=[...])`` names itself in error messages.
INIT_SOURCE = "init(monitors=...)"

#: Figures of the pipeline itself that a monitor may watch instead of a score. All are
#: lower-is-better, so their ``direction`` defaults to ``"above"``.
PIPELINE_FIGURES: tuple[str, ...] = (
    "error_rate",          # share of records whose app run failed
    "skip_rate",           # share of scoring jobs skipped (an input was missing)
    "dropped_records",     # records the bounded queue dropped (count over the window)
    "backlog_age",         # age of the oldest pending scoring job (seconds; threshold "15m" ok)
    "judge_cost_per_day",  # judge spend, USD per day
)
#: ``statistic`` values: a score's mean; the share of 1s of a yes/no metric; the share of
#: "fail" labels; a percentile.
STATISTICS: tuple[str, ...] = ("mean", "rate", "fail_rate", "p10", "p50", "p90")
#: Segment dimensions a ``where`` filter may name, besides ``metadata.KEY`` for a key declared
#: in ``init(segments=[...])``.
SEGMENT_DIMENSIONS: tuple[str, ...] = (
    "release", "environment", "model", "judge_model", "metric_version")
#: ``baseline`` values besides a duration such as ``"7d"`` (the 7 days before the window).
BASELINES: tuple[str, ...] = ("previous_window", "previous_release")
DIRECTIONS: tuple[str, ...] = ("below", "above")
RULES: tuple[str, ...] = ("anytime", "fixed")
NO_DATA: tuple[str, ...] = ("no_data", "ok", "alert")
CHANNEL_KINDS: tuple[str, ...] = ("webhook", "slack")
#: Shortest window, baseline span and renotify interval: shorter ones mostly measure noise
#: (or spam a channel).
MIN_WINDOW_S = 300.0
#: Keys a top-level ``[defaults]`` table may set for the monitors that leave them out.
DEFAULT_KEYS: tuple[str, ...] = (
    "window", "min_n", "alpha", "notify", "no_data", "rule", "renotify", "hysteresis")

Statistic = Literal["mean", "rate", "fail_rate", "p10", "p50", "p90"]
Direction = Literal["below", "above"]
Rule = Literal["anytime", "fixed"]
NoData = Literal["no_data", "ok", "alert"]
ChannelKind = Literal["webhook", "slack"]

# Figures that are counted per record, so they split by the record's segments; the others are
# process- or fleet-wide numbers with no segment.
_FIGURE_DIMS: Mapping[str, tuple[str, ...]] = {
    "error_rate": ("release", "environment", "model", "metadata"),
    "skip_rate": ("release", "environment", "model", "metadata"),
    "dropped_records": (), "backlog_age": (), "judge_cost_per_day": (),
}
_RATE_FIGURES = ("error_rate", "skip_rate")
_NAME_RE = re.compile(r"[A-Za-z0-9_.-]+")
_ENV_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_HEADER_RE = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # an RFC 9110 token
_DURATION_RE = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw])")
_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_DURATION_HINT = "use a number and a unit: 30m, 1h, 1d, 1w"


class MonitorConfigError(ValueError):
    """Bad monitor configuration.

    ``errors`` holds one line per problem, each naming the source (file path or
    ``init(monitors=...)``), the monitor or channel, and the key; ``str(exc)`` is those lines
    joined by newlines. The CLI prints it and exits 2.
    """

    def __init__(self, errors: Sequence[str]) -> None:
        self.errors: tuple[str, ...] = tuple(errors)
        super().__init__("\n".join(self.errors))


def duration(text: str) -> float:
    """Seconds in a duration: a number and a unit, ``s``, ``m``, ``h``, ``d`` or ``w``
    (``"30m"``, ``"1h"``, ``"1.5d"``, ``"1w"``). Raises ``ValueError`` saying how to write one."""
    if isinstance(text, str):
        m = _DURATION_RE.fullmatch(text.strip())
        if m:
            seconds = float(m.group(1)) * _UNITS[m.group(2)]
            if seconds > 0:
                return seconds
            raise ValueError(f"{text!r} is not a duration: it must be longer than 0")
    raise ValueError(f"{text!r:.60} is not a duration ({_DURATION_HINT})")


def format_duration(seconds: float) -> str:
    """:func:`duration`'s inverse for messages: ``3600`` → ``"1h"``, ``604800`` → ``"1w"``,
    ``5400`` → ``"90m"``; seconds otherwise."""
    for unit, size in (("w", 604800), ("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


# -- checking values ---------------------------------------------------------------------------
class _Bad(Exception):
    """One problem with one key's value (the message says what is wrong and how to fix it)."""


def _suggest(word: str, choices: Collection[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _one_of(value: Any, choices: tuple[str, ...]) -> str:
    if isinstance(value, str) and value in choices:
        return value
    hint = _suggest(value, choices) if isinstance(value, str) else ""
    raise _Bad(f"{value!r:.60} is not one of {', '.join(choices)}{hint}")


def _name(value: Any) -> str:
    if value is None or value == "":
        raise _Bad("missing")
    if not isinstance(value, str):
        raise _Bad(f"must be a string, got {value!r:.60}")
    if not _NAME_RE.fullmatch(value) or len(value) > 200:
        raise _Bad(f"{value!r:.60} is not a name (letters, digits, '_', '.', '-'; at most 200)")
    return value


def _score(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _Bad(f"{'missing' if value is None else 'must be a non-empty string'}: a score "
                   f"name such as 'faithfulness', or one of {', '.join(PIPELINE_FIGURES)}")
    return value


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise _Bad(f"must be a string, got {value!r:.60}")
    return value


def _span(value: Any) -> str:
    """A duration of at least :data:`MIN_WINDOW_S`, kept as the text given."""
    try:
        seconds = duration(value)
    except ValueError as exc:
        raise _Bad(str(exc)) from None
    if seconds < MIN_WINDOW_S:
        raise _Bad(f"{value!r} is shorter than the minimum 5m")
    return str(value).strip()


def _optional_span(value: Any) -> str | None:
    return None if value is None else _span(value)


def _int_at_least(value: Any, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise _Bad(f"must be a whole number >= {low}, got {value!r:.60}")
    return value


def _finite(value: Any) -> float:
    if not is_number(value) or not math.isfinite(value):
        raise _Bad(f"must be a number, got {value!r:.60}")
    return float(value)


def _alpha(value: Any) -> float:
    a = _finite(value)
    if not 0 < a < 0.5:
        raise _Bad(f"must be between 0 and 0.5 (the accepted chance of a false alarm), got {a}")
    return a


def _baseline(value: Any) -> str | None:
    if value is None or value in BASELINES:
        return value  # type: ignore[no-any-return]
    try:
        return _span(value)
    except _Bad:
        hint = _suggest(value, BASELINES) if isinstance(value, str) else ""
        raise _Bad(f"{value!r:.60} is not a baseline (use previous_window, previous_release "
                   f"or a duration such as 7d: the 7 days before the window){hint}") from None


def _notify(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):  # notify = "oncall" is read as ["oncall"]
        value = [value]
    if not isinstance(value, (list, tuple)):
        raise _Bad(f"must be a list of channel names, got {value!r:.60}")
    names = tuple(_name(v) for v in value)
    if len(set(names)) != len(names):
        raise _Bad(f"names a channel twice: {list(names)!r}")
    return names


def _where(value: Any) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise _Bad(f"must be a table of dimension = value, got {value!r:.60}")
    flat: dict[str, Any] = {}
    for k, v in value.items():
        # where.metadata.route = "x" in TOML is a nested table: read it as metadata.route
        if k == "metadata" and isinstance(v, Mapping):
            flat.update({f"metadata.{mk}": mv for mk, mv in v.items()})
        else:
            flat[str(k)] = v
    problems = []
    for k, v in flat.items():
        if not (k in SEGMENT_DIMENSIONS or (k.startswith("metadata.") and len(k) > 9)):
            problems.append(f"unknown dimension {k!r}{_suggest(k, SEGMENT_DIMENSIONS)} "
                            f"(use {', '.join(SEGMENT_DIMENSIONS)} or metadata.KEY)")
        elif not isinstance(v, str):
            problems.append(f"{k}: the value must be a string (write \"{v}\"), got {v!r:.60}")
    if problems:
        raise _Bad("; ".join(problems))
    return dict(sorted(flat.items()))


def _optional_number_or_text(value: Any) -> float | str | None:
    # threshold/warning: a number, or (backlog_age only) a duration; checked against the score
    if value is None or isinstance(value, str):
        return value
    return _finite(value)


_Check = Callable[[Any], Any]
#: The checks of keys that do not depend on other keys (also used for ``[defaults]``).
_SIMPLE: Mapping[str, _Check] = {
    "name": _name,
    "score": _score,
    "statistic": lambda v: _one_of(v, STATISTICS),
    "window": _span,
    "where": _where,
    "threshold": _optional_number_or_text,
    "direction": lambda v: None if v is None else _one_of(v, DIRECTIONS),
    "warning": _optional_number_or_text,
    "baseline": _baseline,
    "min_effect": lambda v: None if v is None else _finite(v),
    "min_n": lambda v: _int_at_least(v, 1),
    "alpha": _alpha,
    "rule": lambda v: _one_of(v, RULES),
    "no_data": lambda v: _one_of(v, NO_DATA),
    "renotify": _optional_span,
    "hysteresis": lambda v: _int_at_least(v, 1),
    "notify": _notify,
    "description": _text,
}


def _level(value: float | str | None, score: str, statistic: str) -> float | None:
    """A threshold or warning level, checked against what the monitor measures."""
    if value is None:
        return None
    if isinstance(value, str):
        if score != "backlog_age":
            raise _Bad(f"must be a number, got {value!r:.60}")
        try:
            return duration(value)
        except ValueError as exc:
            raise _Bad(str(exc)) from None
    if statistic in ("rate", "fail_rate") or score in _RATE_FIGURES:
        if not 0 <= value <= 1:
            raise _Bad(f"{statistic if score not in _RATE_FIGURES else score} is a share, "
                       f"in [0, 1], got {value}")
    elif score in PIPELINE_FIGURES and value < 0:
        raise _Bad(f"{score} is never negative, got {value}")
    return float(value)


def _check_monitor(values: Mapping[str, Any]) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """Check every key of one monitor (all keys present, defaults filled in).

    Returns the normalised values of the keys that passed and ``(key, problem)`` for the
    others, so that a caller can report all of a file's problems at once.
    """
    out: dict[str, Any] = {}
    bad: list[tuple[str, str]] = []
    for key, check in _SIMPLE.items():
        try:
            out[key] = check(values.get(key))
        except _Bad as exc:
            bad.append((key, str(exc)))
    score: str = out.get("score", "")
    statistic: str | None = out.get("statistic")
    figure = score in PIPELINE_FIGURES
    if figure and statistic is not None:
        allowed = ("mean", "rate") if score in _RATE_FIGURES else ("mean",)
        if statistic not in allowed:
            bad.append(("statistic", f"{score!r} is a pipeline figure: use "
                                     f"{' or '.join(allowed)}, got {statistic!r}"))
    if figure and "where" in out:
        dims = _FIGURE_DIMS[score]
        for k in out["where"]:
            if k.split(".")[0] not in dims:
                bad.append(("where", f"{score!r} is not split by {k!r}"
                                     + (f" (it is by {', '.join(dims)})" if dims else
                                        " (it has no segments)")))
    if figure and "direction" in out and out["direction"] is None:
        out["direction"] = "above"  # every pipeline figure is lower-is-better
    if statistic == "fail_rate" and out.get("direction") is None and "direction" in out:
        out["direction"] = "above"  # more fails is worse whichever way the score points
    _check_condition(out, bad, score, statistic)
    return out, bad


def _check_condition(out: dict[str, Any], bad: list[tuple[str, str]], score: str,
                     statistic: str | None) -> None:
    if any(k not in out for k in ("threshold", "warning", "baseline", "min_effect")):
        return  # a malformed one is reported already; the rest would only echo it
    threshold, warning, baseline = out["threshold"], out["warning"], out["baseline"]
    if threshold is None and baseline is None:
        bad.append(("threshold", "a monitor needs a condition: threshold = <number>, or "
                                 "baseline = 'previous_window' | 'previous_release' | '7d'"))
    elif threshold is not None and baseline is not None:
        bad.append(("baseline", "give threshold or baseline, not both (one condition per "
                                "monitor; declare two monitors for both)"))
    if not score or statistic is None:
        return
    if baseline == "previous_release" and score in PIPELINE_FIGURES \
            and not _FIGURE_DIMS[score]:
        bad.append(("baseline", f"{score!r} is not split by release"))
    if baseline is not None and statistic in ("p10", "p50", "p90"):
        # a difference of percentiles has no interval from the rollups' sufficient statistics
        bad.append(("baseline", f"a baseline compares mean, rate or fail_rate, not {statistic} "
                                "(use a threshold)"))
    for key in ("threshold", "warning"):
        try:
            out[key] = _level(out[key], score, statistic)
        except _Bad as exc:
            bad.append((key, str(exc)))
            return
    threshold, warning = out["threshold"], out["warning"]
    if warning is not None:
        if threshold is None:
            bad.append(("warning", "a warning level needs a threshold (the alert level)"))
        elif out.get("direction") is not None:
            problem = _warning_order(threshold, warning, out["direction"])
            if problem:
                bad.append(("warning", problem))
    effect = out["min_effect"]
    if baseline is None and effect is not None:
        bad.append(("min_effect", "only with a baseline (a threshold monitor compares with "
                                  "its threshold)"))
    elif baseline is not None:
        if effect is None:
            out["min_effect"] = 0.02
        elif effect <= 0:
            bad.append(("min_effect", f"must be more than 0, got {effect}"))


def _warning_order(threshold: float, warning: float, direction: str) -> str | None:
    # The warning level is crossed first: above the alert level when low values are bad.
    if direction == "below" and not warning > threshold:
        return (f"with direction 'below' the warning level ({warning}) must be above the "
                f"threshold ({threshold}), so that it is crossed first")
    if direction == "above" and not warning < threshold:
        return (f"with direction 'above' the warning level ({warning}) must be below the "
                f"threshold ({threshold}), so that it is crossed first")
    return None


# -- the model ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Monitor:
    """One monitor: a score (or pipeline figure), a statistic over a window of a segment, and
    one condition — a ``threshold`` or a ``baseline`` to compare with.

    Construct it with keyword arguments as in the TOML file; ``__post_init__`` validates every
    key (raising :class:`MonitorConfigError` with all problems) and normalises: ``where``
    becomes a sorted dict (a copy; treat it as read-only), ``notify`` a tuple, a
    ``backlog_age`` threshold given as ``"15m"`` seconds, ``min_effect`` 0.02 for baseline
    monitors, ``direction`` ``"above"`` where it is known (pipeline figures, ``fail_rate``). ``direction`` None means "from the metric's
    declared direction": see :meth:`direction_for`. Durations (``window``, ``renotify``, a
    duration ``baseline``) stay as written; ``*_s`` properties give seconds.

    ``rule="anytime"`` (default) alerts only when an anytime-valid confidence sequence lies
    beyond the threshold (or the baseline by ``min_effect``), which keeps the chance of any
    false alarm over the monitor's life at most ``alpha``; ``rule="fixed"`` compares the plain
    window mean, as other tools do, and fires on noise sooner or later when checked repeatedly.
    """

    name: str
    score: str
    _: KW_ONLY
    statistic: Statistic = "mean"
    window: str = "1d"
    where: Mapping[str, str] = field(default_factory=dict, hash=False)
    threshold: float | None = None
    direction: Direction | None = None
    warning: float | None = None
    baseline: str | None = None
    min_effect: float | None = None
    min_n: int = 30
    alpha: float = 0.05
    rule: Rule = "anytime"
    no_data: NoData = "no_data"
    renotify: str | None = None
    hysteresis: int = 2
    notify: Sequence[str] = ()
    description: str = ""

    def __post_init__(self) -> None:
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        norm, bad = _check_monitor(values)
        if bad:
            label = _label("monitor", self.name, None)
            raise MonitorConfigError([f"{label}: {k}: {m}" for k, m in bad])
        for key, value in norm.items():
            object.__setattr__(self, key, value)

    @property
    def window_s(self) -> float:
        """The window in seconds."""
        return duration(self.window)

    @property
    def renotify_s(self) -> float | None:
        """Seconds between reminders while the state stays ALERT, or None (tell once)."""
        return None if self.renotify is None else duration(self.renotify)

    @property
    def condition(self) -> Literal["threshold", "baseline"]:
        return "threshold" if self.threshold is not None else "baseline"

    @property
    def baseline_s(self) -> float | None:
        """For a duration baseline (``"7d"``): its span in seconds, ending where the window
        starts; None for ``previous_window``/``previous_release`` or a threshold monitor."""
        if self.baseline is None or self.baseline in BASELINES:
            return None
        return duration(self.baseline)

    @property
    def is_pipeline_figure(self) -> bool:
        return self.score in PIPELINE_FIGURES

    def direction_for(self, higher_is_better: bool | None) -> Direction:
        """Which side is bad: ``direction`` if set, else from the metric's declared direction
        (``"below"`` for higher-is-better). Raises :class:`MonitorConfigError` for a metric
        without a better direction when none was set."""
        if self.direction is not None:
            return self.direction
        if higher_is_better is None:
            raise MonitorConfigError([_no_direction(self)])
        return "below" if higher_is_better else "above"

    def definition_hash(self) -> str:
        """A short hash of what defines the monitor's statistic and test (score, statistic,
        window, where, baseline, direction, alpha, rule): evaluator state saved under another
        hash belongs to an older definition and must be started afresh."""
        keys = ("score", "statistic", "window", "where", "baseline", "direction", "alpha",
                "rule")
        full = self.to_json()
        data = json.dumps({k: full[k] for k in keys}, sort_keys=True)
        return hashlib.sha256(data.encode()).hexdigest()[:16]

    def to_json(self) -> dict[str, Any]:
        """Every key as plain JSON data; :func:`monitors_from_objects` reads it back."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["where"] = dict(self.where)
        out["notify"] = list(self.notify)
        return out


@dataclass(frozen=True)
class Channel:
    """Where notifications go: a generic JSON ``webhook`` or a Slack incoming webhook.

    Give ``url``, or ``url_env``: the name of an environment variable holding the URL, read
    when the channel is built (so a missing variable is a configuration error that names the
    variable, never the value). ``headers`` values may be ``"env:NAME"`` too; the resolved
    values are in :attr:`resolved_headers`. Secrets read from the environment are registered
    with the log scrubber and left out of ``repr`` and :meth:`to_json`.
    """

    name: str
    kind: ChannelKind = "webhook"
    _: KW_ONLY
    url: str | None = field(default=None, repr=False)
    url_env: str | None = None
    timeout_s: float = 10.0
    headers: Mapping[str, str] = field(default_factory=dict, hash=False)
    resolved_headers: Mapping[str, str] = field(init=False, repr=False, compare=False,
                                                hash=False)

    def __post_init__(self) -> None:
        norm, bad = _check_channel({f.name: getattr(self, f.name) for f in fields(self)
                                    if f.init})
        if bad:
            label = _label("channel", self.name, None)
            raise MonitorConfigError([f"{label}: {k}: {m}" for k, m in bad])
        for key, value in norm.items():
            object.__setattr__(self, key, value)

    def to_json(self) -> dict[str, Any]:
        """The declaration as plain JSON data: a URL read from ``url_env`` is left out."""
        return {"name": self.name, "kind": self.kind,
                "url": None if self.url_env else self.url, "url_env": self.url_env,
                "timeout_s": self.timeout_s, "headers": dict(self.headers)}


def _check_channel(values: Mapping[str, Any]) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    out: dict[str, Any] = {}
    bad: list[tuple[str, str]] = []

    def check(key: str, fn: _Check) -> None:
        try:
            out[key] = fn(values.get(key))
        except _Bad as exc:
            bad.append((key, str(exc)))

    check("name", _name)
    check("kind", lambda v: _one_of(v, CHANNEL_KINDS))
    check("timeout_s", _timeout)
    check("headers", _headers)
    url, env = values.get("url"), values.get("url_env")
    if env is not None:
        # url_env wins over a url: a rebuilt channel (dataclasses.replace) re-reads it
        check("url_env", _url_from_env)
        if "url_env" in out:
            out["url"], out["url_env"] = out["url_env"], env
    elif url is None:
        bad.append(("url", "give url = 'https://...' or url_env = 'NAME_OF_VARIABLE' "
                           "(keeps the secret URL out of the file)"))
    else:
        check("url", _url)
    if "headers" in out:
        declared, resolved = out["headers"]
        out["headers"] = declared
        out["resolved_headers"] = resolved
    return out, bad


def _timeout(value: Any) -> float:
    t = _finite(value)
    if t <= 0:
        raise _Bad(f"must be more than 0 seconds, got {t}")
    return t


def _url(value: Any) -> str:
    if not isinstance(value, str) or not _is_http_url(value):
        raise _Bad(f"{value!r:.80} is not an http(s) URL")
    return value


def _is_http_url(value: str) -> bool:
    try:
        parts = urlsplit(value)
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.netloc) and not any(
        c.isspace() for c in value)


def _env_value(name: Any) -> str:
    if not isinstance(name, str) or not _ENV_RE.fullmatch(name):
        raise _Bad(f"{name!r:.60} is not the name of an environment variable")
    value = os.environ.get(name)
    if not value:
        raise _Bad(f"the environment variable {name} is not set")
    register_secret(value)  # scrubbed wherever it shows up in logs and stored errors
    return value


def _url_from_env(name: Any) -> str:
    value = _env_value(name)
    if not _is_http_url(value):
        raise _Bad(f"the environment variable {name} does not hold an http(s) URL")
    return value


def _headers(value: Any) -> tuple[dict[str, str], dict[str, str]]:
    """(declared, resolved): ``env:NAME`` values are read from the environment."""
    if not isinstance(value, Mapping):
        raise _Bad(f"must be a table of header = value, got {value!r:.60}")
    declared: dict[str, str] = {}
    resolved: dict[str, str] = {}
    problems = []
    for k, v in value.items():
        if not isinstance(k, str) or not _HEADER_RE.fullmatch(k):
            problems.append(f"{k!r:.60} is not a header name")
            continue
        if not isinstance(v, str):
            problems.append(f"{k}: the value must be a string, got {v!r:.60}")
            continue
        try:
            real = _env_value(v[4:]) if v.startswith("env:") else v
        except _Bad as exc:
            problems.append(f"{k}: {exc}")
            continue
        if "\r" in real or "\n" in real:  # would split the request into extra headers
            problems.append(f"{k}: the value must be one line")
            continue
        declared[k], resolved[k] = v, real
    if problems:
        raise _Bad("; ".join(problems))
    return declared, resolved


def _label(kind: str, name: Any, index: int | None) -> str:
    if isinstance(name, str) and name:
        return f"{kind} {name!r}"
    return f"{kind} #{index}" if index is not None else kind


def _no_direction(m: Monitor) -> str:
    return (f"monitor {m.name!r}: direction: {m.score!r} has no better direction; set "
            "direction = 'below' (low values are bad) or 'above'")


# -- the set -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class MonitorSet:
    """The monitors and channels of one declaration, and where it came from (``source``: the
    file path or ``init(monitors=...)``, used in every error message).

    Monitor names and channel names are unique and every ``notify`` name is a channel here;
    construction raises :class:`MonitorConfigError` otherwise. Iterating yields the monitors.
    """

    monitors: tuple[Monitor, ...] = ()
    channels: tuple[Channel, ...] = ()
    source: str = INIT_SOURCE

    def __post_init__(self) -> None:
        object.__setattr__(self, "monitors", tuple(self.monitors))
        object.__setattr__(self, "channels", tuple(self.channels))
        p = _Problems(self.source)
        for i, m in enumerate(self.monitors, 1):
            if not isinstance(m, Monitor):
                p.add(f"monitor #{i}", None, f"expected a Monitor, got {type(m).__name__}")
        for i, c in enumerate(self.channels, 1):
            if not isinstance(c, Channel):
                p.add(f"channel #{i}", None, f"expected a Channel, got {type(c).__name__}")
        p.raise_if_any()
        _cross_check(p, [(f"monitor {m.name!r}", m.name, tuple(m.notify))
                         for m in self.monitors], [c.name for c in self.channels])
        p.raise_if_any()

    def __iter__(self) -> Iterator[Monitor]:
        return iter(self.monitors)

    def __len__(self) -> int:
        return len(self.monitors)

    def monitor(self, name: str) -> Monitor:
        """The monitor called ``name``; KeyError if there is none."""
        for m in self.monitors:
            if m.name == name:
                return m
        raise KeyError(name)

    def channel(self, name: str) -> Channel:
        """The channel called ``name``; KeyError if there is none."""
        for c in self.channels:
            if c.name == name:
                return c
        raise KeyError(name)

    def channels_for(self, monitor: Monitor) -> tuple[Channel, ...]:
        """The channels ``monitor`` notifies, in its ``notify`` order."""
        return tuple(self.channel(n) for n in monitor.notify)

    def check_against(self, known_scores: Collection[str], known_dims: Collection[str]) -> None:
        """Check the monitors against what the pipeline knows.

        ``known_scores``: the score names the configured metrics emit; a mapping of score name
        to the metric's ``higher_is_better`` also checks that every monitor's direction can be
        resolved and that its warning level lies on the right side. ``known_dims``: the declared
        segment dimensions (``metadata.KEY`` or bare ``KEY`` for ``init(segments=[...])``;
        the built-in dimensions are always known). Raises :class:`MonitorConfigError` listing
        every unknown score and dimension, with the closest known name.
        """
        p = _Problems(self.source)
        declared = {d if d.startswith("metadata.") or d in SEGMENT_DIMENSIONS
                    else f"metadata.{d}" for d in known_dims}
        meta = sorted(d for d in declared if d.startswith("metadata."))
        for m in self.monitors:
            where = f"monitor {m.name!r}"
            if not m.is_pipeline_figure and m.score not in known_scores:
                hint = _suggest(m.score, [*known_scores, *PIPELINE_FIGURES])
                if not hint:
                    hint = f" (known: {_listing(known_scores)}; pipeline figures: " \
                           f"{', '.join(PIPELINE_FIGURES)})"
                p.add(where, "score", f"unknown score {m.score!r}{hint}")
            for dim in m.where:
                if dim.startswith("metadata.") and dim not in declared:
                    hint = _suggest(dim, meta) or (f" (declared: {', '.join(meta)})" if meta
                                                   else "")
                    p.add(where, "where", f"segment {dim!r} is not declared: add "
                                          f"{dim[9:]!r} to init(segments=[...]){hint}")
            if isinstance(known_scores, Mapping) and m.score in known_scores:
                self._check_direction(p, m, known_scores[m.score])
        p.raise_if_any()

    @staticmethod
    def _check_direction(p: _Problems, m: Monitor, higher_is_better: Any) -> None:
        if m.direction is None and higher_is_better is None:
            p.lines.append(f"{p.source}: {_no_direction(m)}")
            return
        direction = m.direction_for(None if higher_is_better is None
                                    else bool(higher_is_better))
        if m.threshold is not None and m.warning is not None:
            problem = _warning_order(m.threshold, m.warning, direction)
            if problem:
                p.add(f"monitor {m.name!r}", "warning", problem)

    def to_json(self) -> dict[str, Any]:
        """Plain JSON data in the layout of the TOML file (``monitor``, ``channels``) plus
        ``source``; :func:`monitors_from_objects` reads it back (secrets read from the
        environment are not in it: they are read again)."""
        return {"source": self.source,
                "monitor": [m.to_json() for m in self.monitors],
                "channels": {c.name: c.to_json() for c in self.channels}}


def _listing(names: Collection[str], most: int = 12) -> str:
    shown = sorted(names)[:most]
    more = f", ... ({len(names) - most} more)" if len(names) > most else ""
    return (", ".join(shown) + more) if shown else "none configured"


class _Problems:
    """Problem lines of one source, each ``source: where: key: message``."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.lines: list[str] = []

    def add(self, where: str | None, key: str | None, message: str) -> None:
        parts = [p for p in (self.source, where, key) if p]
        self.lines.append(": ".join([*parts, message]))

    def raise_if_any(self) -> None:
        if self.lines:
            raise MonitorConfigError(self.lines)


def _cross_check(p: _Problems, monitors: list[tuple[str, str | None, tuple[str, ...]]],
                 channels: Sequence[str]) -> None:
    """Unique names, and ``notify`` naming existing channels."""
    seen: dict[str, int] = {}
    for i, (where, name, _) in enumerate(monitors, 1):
        if name is None:
            continue
        if name in seen:
            p.add(where, "name", f"monitor #{seen[name]} has this name too; names must be "
                                 "unique")
        else:
            seen[name] = i
    seen_ch: set[str] = set()
    for c in channels:
        if c in seen_ch:
            p.add(f"channel {c!r}", "name", "declared twice; names must be unique")
        seen_ch.add(c)
    for where, _, notify in monitors:
        for n in notify:
            if n not in seen_ch:
                hint = _suggest(n, seen_ch) or (f" (channels: {', '.join(sorted(seen_ch))})"
                                                if seen_ch else " (no channels are declared)")
                p.add(where, "notify", f"no channel {n!r}{hint}")


# -- loading -----------------------------------------------------------------------------------
_MONITOR_KEYS = tuple(f.name for f in fields(Monitor))
_CHANNEL_KEYS = tuple(f.name for f in fields(Channel) if f.init)
_MONITOR_DEFAULTS = {f.name: f.default for f in fields(Monitor)
                     if f.name not in ("name", "score")}
_MONITOR_DEFAULTS["where"] = {}


#: What ``init(monitors=...)`` accepts (see :func:`monitors_from_objects`).
MonitorsArg = Union[MonitorSet, str, "os.PathLike[str]", Mapping[str, Any], Sequence[Any]]


def load_monitors(path: str | os.PathLike[str]) -> MonitorSet:
    """Read and validate a monitors TOML file (blocking file I/O; reads the environment for
    ``url_env`` / ``env:NAME``). Raises :class:`MonitorConfigError` with every problem, each
    line starting with ``path``, also for a missing or malformed file."""
    source = os.fspath(path)
    try:
        text = Path(source).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise MonitorConfigError([f"{source}: no such file"]) from None
    except UnicodeDecodeError:
        raise MonitorConfigError([f"{source}: not UTF-8 text"]) from None
    except OSError as exc:
        raise MonitorConfigError([f"{source}: cannot be read ({exc.strerror})"]) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise MonitorConfigError([f"{source}: not valid TOML: {exc}"]) from None
    return _from_layout(data, source, from_file=True)


def monitors_from_objects(obj: MonitorsArg, *, source: str = INIT_SOURCE) -> MonitorSet:
    """A :class:`MonitorSet` from what ``init(monitors=...)`` accepts:

    - a :class:`MonitorSet` (returned as it is);
    - a path (str or PathLike) of a TOML file (:func:`load_monitors`);
    - a list of monitors, each a dict of the TOML keys or a :class:`Monitor`, and optionally
      :class:`Channel` objects for their ``notify`` names;
    - a mapping in the file's layout: ``{"monitor": [...], "channels": {name: {...} or
      Channel}, "defaults": {...}}`` (what :meth:`MonitorSet.to_json` returns).

    ``[defaults]`` apply to dict monitors only (a Monitor object is complete). Raises
    :class:`MonitorConfigError` naming ``source``, the monitor and the key of every problem.
    Reads the environment for ``url_env``; reads a file only when given a path.
    """
    if isinstance(obj, MonitorSet):
        return obj
    if isinstance(obj, (str, os.PathLike)):
        return load_monitors(obj)
    if isinstance(obj, Mapping):
        return _from_layout(obj, source, from_file=False)
    if isinstance(obj, (list, tuple)):
        channels = [c for c in obj if isinstance(c, Channel)]
        monitors = [m for m in obj if not isinstance(m, Channel)]
        return _from_layout({"monitor": monitors, "channels": channels}, source,
                            from_file=False)
    raise MonitorConfigError([
        f"{source}: expected a list of monitors (dicts or Monitor objects), a mapping laid out "
        f"like the TOML file, a MonitorSet or a file path; got {type(obj).__name__}"])


def _from_layout(data: Mapping[str, Any], source: str, *, from_file: bool) -> MonitorSet:
    if not from_file and isinstance(data.get("source"), str):
        source = data["source"]
    p = _Problems(source)
    top = ("monitor", "channels", "defaults") + (() if from_file else ("source",))
    for key, value in data.items():
        if key not in top:
            what = "table" if isinstance(value, (Mapping, list)) else "key"
            p.add(None, key, f"unknown {what}{_suggest(key, top)} (use [[monitor]], "
                             "[channels.NAME] and [defaults])")
    defaults = _defaults(p, data.get("defaults", {}))
    channels, channel_names = _channels(p, data.get("channels", {}))
    raw = data.get("monitor", [])
    if isinstance(raw, Mapping):  # a single [monitor] table
        raw = [raw]
    if not isinstance(raw, (list, tuple)):
        p.add(None, "monitor", "must be a list of monitors ([[monitor]] tables)")
        raw = []
    monitors: list[Monitor] = []
    cross: list[tuple[str, str | None, tuple[str, ...]]] = []
    for i, item in enumerate(raw, 1):
        if isinstance(item, Monitor):
            monitors.append(item)
            cross.append((f"monitor {item.name!r}", item.name, tuple(item.notify)))
            continue
        if not isinstance(item, Mapping):
            p.add(f"monitor #{i}", None, f"must be a table of keys, got {type(item).__name__}")
            continue
        where = _label("monitor", item.get("name"), i)
        for key in item:
            if key not in _MONITOR_KEYS:
                p.add(where, str(key), f"unknown key{_suggest(str(key), _MONITOR_KEYS)}")
        given = {k: v for k, v in item.items() if k in _MONITOR_KEYS and v is not None}
        norm, bad = _check_monitor({**_MONITOR_DEFAULTS, **defaults, **given})
        for key, message in bad:
            p.add(where, key, message)
        # a notify inherited from [defaults] is checked once, as the default's
        notify = norm.get("notify", ()) if "notify" in given else ()
        cross.append((where, norm.get("name"), notify))
        if not bad:
            monitors.append(Monitor(**norm))
    if defaults.get("notify"):
        cross.insert(0, ("defaults", None, defaults["notify"]))
    _cross_check(p, cross, channel_names)
    p.raise_if_any()
    return MonitorSet(tuple(monitors), tuple(channels), source)


def _defaults(p: _Problems, raw: Any) -> dict[str, Any]:
    if not isinstance(raw, Mapping):
        p.add(None, "defaults", "must be a table ([defaults])")
        return {}
    out = {}
    for key, value in raw.items():
        if key not in DEFAULT_KEYS:
            extra = (" (it cannot have a default: set it on each monitor)"
                     if key in _MONITOR_KEYS else _suggest(str(key), DEFAULT_KEYS))
            p.add("defaults", str(key), f"unknown key{extra}")
            continue
        try:
            out[key] = _SIMPLE[key](value)
        except _Bad as exc:  # reported once here, not again for every monitor
            p.add("defaults", key, str(exc))
    return out


def _channels(p: _Problems, raw: Any) -> tuple[list[Channel], list[str]]:
    """The channels that are valid, and the names of all declared (valid or not), so that
    a monitor naming a broken channel is not also told that it does not exist."""
    items: list[tuple[str, Any]]
    if isinstance(raw, Mapping):
        items = list(raw.items())
    elif isinstance(raw, (list, tuple)):
        items = [(getattr(c, "name", ""), c) for c in raw]
    else:
        p.add(None, "channels", "must be a table of [channels.NAME] tables")
        return [], []
    out: list[Channel] = []
    names: list[str] = []
    for name, item in items:
        names.append(name)
        where = _label("channel", name, None)
        if isinstance(item, Channel):
            if item.name != name:
                p.add(where, "name", f"the Channel is called {item.name!r}")
            else:
                out.append(item)
            continue
        if not isinstance(item, Mapping):
            p.add(where, None, f"must be a table of keys, got {type(item).__name__}")
            continue
        for key in item:
            if key not in _CHANNEL_KEYS:
                p.add(where, str(key), f"unknown key{_suggest(str(key), _CHANNEL_KEYS)}")
        if item.get("name", name) != name:
            p.add(where, "name", f"{item['name']!r} differs from the table name")
        if item.get("url") is not None and item.get("url_env") is not None:
            p.add(where, "url", "give url or url_env, not both")
            continue
        given = {k: v for k, v in item.items() if k in _CHANNEL_KEYS and v is not None}
        values: dict[str, Any] = {"kind": "webhook", "timeout_s": 10.0, "headers": {},
                                  **given, "name": name}
        _, bad = _check_channel(values)
        for key, message in bad:
            p.add(where, key, message)
        if not bad:
            out.append(Channel(**values))
    return out, names
