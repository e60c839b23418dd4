"""The words of a monitor declaration: the statistics, figures, directions, rules and
channel kinds a monitor may name, durations (``"30m"``, ``"1d"``), and the error a bad
declaration raises. Plain constants and pure functions; :mod:`.config` builds on them."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Literal

from .._internal.durations import duration as duration
from .._internal.durations import format_duration as format_duration

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
    "capture_degraded",    # capture fallbacks taken (docs/capture.md; count over the window)
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
    "window", "min_n", "alpha", "notify", "no_data", "rule", "renotify", "hysteresis",
    "notify_on", "detect")
#: States a monitor's changes into which (or out of which) reach its channels
#: (``notify_on``; default alerts only: a WARNING is the point estimate alone, and noise
#: moves it).
NOTIFY_ON: tuple[str, ...] = ("alert", "warning")

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
    "dropped_records": (), "backlog_age": (), "judge_cost_per_day": (), "capture_degraded": (),
}
_RATE_FIGURES = ("error_rate", "skip_rate")
_NAME_RE = re.compile(r"[A-Za-z0-9_.-]+")
_ENV_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_HEADER_RE = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # an RFC 9110 token


class MonitorConfigError(ValueError):
    """Bad monitor configuration.

    ``errors`` holds one line per problem, each naming the source (file path or
    ``init(monitors=...)``), the monitor or channel, and the key; ``str(exc)`` is those lines
    joined by newlines. The CLI prints it and exits 2.
    """

    def __init__(self, errors: Sequence[str]) -> None:
        self.errors: tuple[str, ...] = tuple(errors)
        super().__init__("\n".join(self.errors))


