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

import hashlib
import json
import os
import sys
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field, fields
from pathlib import Path
from typing import Any, Literal, Union

from ._checks import (
    _SIMPLE,
    _Bad,
    _check_channel,
    _check_monitor,
    _label,
    _suggest,
    _warning_order,
)
from .terms import (
    BASELINES,
    DEFAULT_FILE,
    DEFAULT_KEYS,
    INIT_SOURCE,
    PIPELINE_FIGURES,
    SEGMENT_DIMENSIONS,
    STATISTICS,
    ChannelKind,
    Direction,
    MonitorConfigError,
    NoData,
    Rule,
    Statistic,
    duration,
    format_duration,
)

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
    notify_on: Sequence[str] = ("alert",)
    detect: float | None = None
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
        out["notify_on"] = list(self.notify_on)
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
    except RecursionError:  # (tomllib recurses per nesting level; thousands of them overflow)
        raise MonitorConfigError([f"{source}: not a monitors file (nested too deeply)"]
                                 ) from None
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
