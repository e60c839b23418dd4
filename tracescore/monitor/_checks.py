"""Checking one monitor or channel declaration, key by key.

Each ``_check_*`` returns the cleaned values and a list of (key, problem) pairs, so that a
file's problems are reported together (:class:`.terms.MonitorConfigError`). Reads the
environment for ``url_env`` / ``env:NAME`` header values; nothing else does I/O.
"""

from __future__ import annotations

import difflib
import math
import os
import re
from collections.abc import Callable, Collection, Mapping
from typing import Any
from urllib.parse import unquote, urlsplit

from .._internal.secrets import register_secret
from .._internal.validate import is_number
from .terms import (
    _ENV_RE,
    _FIGURE_DIMS,
    _HEADER_RE,
    _NAME_RE,
    _RATE_FIGURES,
    BASELINES,
    CHANNEL_KINDS,
    DIRECTIONS,
    MIN_WINDOW_S,
    NO_DATA,
    NOTIFY_ON,
    PIPELINE_FIGURES,
    RULES,
    SEGMENT_DIMENSIONS,
    STATISTICS,
    duration,
)


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


def _notify_on(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)) or not value:
        raise _Bad(f"must be a list of states to notify on (alert, warning), got {value!r:.60}")
    out = tuple(_one_of(v, NOTIFY_ON) for v in value)
    if "alert" not in out:
        raise _Bad("must include 'alert' (an alert is always sent to the channels)")
    return tuple(sorted(set(out), key=NOTIFY_ON.index))


def _detect(value: Any) -> float | None:
    if value is None:
        return None
    d = _finite(value)
    if not 0 < d <= 1:
        raise _Bad(f"the drop to detect, on the score's [0, 1] scale, must be in (0, 1], got {d}")
    return d


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
    "notify_on": _notify_on,
    "detect": _detect,
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
    if not isinstance(value, str):
        raise _Bad(f"must be an http(s) URL, got {type(value).__name__}")
    problem = _url_problem(value)
    if problem:
        # never the URL itself: a mistyped Slack URL is still a credential
        raise _Bad(f"{_url_outline(value)} {problem}")
    _register_userinfo(value)
    return value


def _url_outline(value: str) -> str:
    """What of a URL an error may show: its scheme and host, never its path, query or
    user:password."""
    try:
        parts = urlsplit(value)
        host = parts.hostname
    except ValueError:
        return "the URL"
    shown = f"{parts.scheme}://{host}/…" if parts.scheme and host else None
    if shown is None or not shown.isprintable() or len(shown) > 80:
        return "the URL"
    return f"the URL {shown!r}"


_NOT_HTTP = "is not an http(s) URL"


def _url_problem(value: str) -> str | None:
    """Why ``value`` cannot be POSTed to, or None."""
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises for a port that is not a number
    except ValueError:
        return "has a host or port that is not valid"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return _NOT_HTTP
    if not value.isascii():
        return ("has non-ASCII characters (percent-encode the path, write the host in "
                "punycode)")
    if any(c.isspace() or ord(c) < 0x20 or c == "\x7f" for c in value):
        return "has blanks or control characters"
    return None


def _is_http_url(value: str) -> bool:
    return _url_problem(value) is None


def _register_userinfo(value: str) -> None:
    """A URL's ``user:password@`` is sent as Basic auth: its password is a secret."""
    parts = urlsplit(value)
    if parts.password:
        register_secret(parts.password)
        register_secret(unquote(parts.password))


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
    problem = _url_problem(value)
    if problem == _NOT_HTTP:
        raise _Bad(f"the environment variable {name} does not hold an http(s) URL")
    if problem:
        raise _Bad(f"the environment variable {name} holds a URL that {problem}")
    _register_userinfo(value)
    return value


#: A header named like this carries a credential, whatever its value looks like.
_CREDENTIAL_NAME = re.compile(r"(?i)auth|token|key|secret|pass|sign|cookie|session|credential")
#: A value shaped like a credential in any header: 16+ characters of one word, letters and
#: digits mixed.
_CREDENTIAL_VALUE = re.compile(r"(?=[^\s]*[0-9])(?=[^\s]*[A-Za-z])[^\s]{16,}")


def _secret_header(name: str, value: str) -> bool:
    """Whether a header's value is scrubbed wherever it shows up. Not every value: scrubbing
    a plain word ("search", "tracescore") would garble every log line that holds it."""
    if _CREDENTIAL_NAME.search(name):
        return True
    return any(_CREDENTIAL_VALUE.fullmatch(word) for word in value.split())


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
        try:
            real.encode("latin-1")  # what HTTP/1.1 can carry (http.client would fail later)
        except UnicodeEncodeError:
            problems.append(f"{k}: the value must be Latin-1 text (ASCII is safest)")
            continue
        # A header's value is a credential as often as not (a token, an API key), literal
        # or from the environment: scrubbed wherever a receiver echoes it.
        if _secret_header(k, real):
            register_secret(real)
            register_secret(real.partition(" ")[2].strip())  # "Token X", "Basic X": X too
        declared[k], resolved[k] = v, real
    if problems:
        raise _Bad("; ".join(problems))
    return declared, resolved


def _label(kind: str, name: Any, index: int | None) -> str:
    if isinstance(name, str) and name:
        return f"{kind} {name!r}"
    return f"{kind} #{index}" if index is not None else kind
