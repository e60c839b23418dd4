"""What an alert says: the :class:`AlertEvent` of a monitor's state change and its payloads
— a generic JSON webhook body (versioned) and a Slack Block Kit message — and the outbox
items a change becomes, one per channel. Pure functions of the event; no I/O."""

from __future__ import annotations

import datetime as _dt
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .. import attributes as A
from ..stats import CarriesEstimate, Estimate
from ..store import monitor_state as _state
from .config import format_duration

WEBHOOK, SLACK = "webhook", "slack"
KINDS = (WEBHOOK, SLACK)
#: ``webhook_payload()["version"]``: bumped only when a key changes meaning or goes away.
PAYLOAD_VERSION = 1

# OTel log record of a state change (to move to tracescore.attributes with the other names)
EVENT_NAME = A.MONITOR_STATE_CHANGE
ATTR_NAME = A.MONITOR_NAME
ATTR_STATE = A.MONITOR_STATE
ATTR_PREVIOUS = A.MONITOR_PREVIOUS
ATTR_SCORE = A.MONITOR_SCORE
ATTR_VALUE = A.MONITOR_VALUE
ATTR_LO = A.MONITOR_LO
ATTR_HI = A.MONITOR_HI
ATTR_N = A.MONITOR_N

#: Slack's limit on a section's text is 3,000 characters; a field's 2,000.
_SLACK_TEXT_CHARS, _SLACK_FIELD_CHARS = 2900, 1900
_WORST_SHOWN = 5


# -- the event and its payloads --------------------------------------------------------------
@dataclass(frozen=True)
class AlertEvent(CarriesEstimate):
    """One state change of one monitor, as notifications describe it.

    ``condition``: the monitor's threshold or baseline in words ("mean below 0.80",
    "regressed against the previous 7 days"); ``verdict``: what the test concluded, in words;
    ``estimate``: the value seen, its interval and n, and the method that made the interval
    (read through as ``value``, ``lo``, ``hi``, ``n``, ``method``); ``command``: the CLI line
    that shows the breach (``tracescore check --monitor NAME``); ``db``: the database's label,
    already redacted (:func:`tracescore.store.redact_url`); ``at``: unix seconds.
    """

    monitor: str
    state: str
    previous: str | None
    score: str
    statistic: str
    window_s: float
    estimate: Estimate
    condition: str
    verdict: str
    command: str
    db: str
    at: float
    where: Mapping[str, str] = field(default_factory=dict, hash=False)
    worst_trace_ids: Sequence[str] = ()

    def __post_init__(self) -> None:
        _state._check_state("state", self.state)
        _state._check_state("previous", self.previous, optional=True)
        # frozen, so a caller's list/dict cannot change the event after the fact
        object.__setattr__(self, "where", {str(k): str(v) for k, v in self.where.items()})
        object.__setattr__(self, "worst_trace_ids", tuple(str(t) for t in self.worst_trace_ids))


def _finite(v: float | None) -> float | None:
    return None if v is None or not math.isfinite(v) else float(v)


def _iso(ts: float) -> str:
    return _dt.datetime.fromtimestamp(ts, _dt.timezone.utc).isoformat().replace("+00:00", "Z")


def _num(v: float | None) -> str:
    if v is None or not math.isfinite(v):
        return "n/a"
    return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.4g}"


def _estimate(e: AlertEvent) -> str:
    text = f"{_num(e.value)} [{_num(e.lo)}, {_num(e.hi)}] (n={e.n:,})"
    return f"{text}, {e.method}" if e.method else text


def summary(event: AlertEvent) -> str:
    """One line: ``[ALERT] monitor m: faithfulness mean 0.71 [0.66, 0.76] (n=240) over the
    last 1h — mean below 0.80; was OK`` (Slack's fallback text, the OTel log body)."""
    e = event
    where = " where " + ", ".join(f"{k}={v}" for k, v in e.where.items()) if e.where else ""
    was = f"; was {e.previous}" if e.previous else ""
    return (f"[{e.state}] monitor {e.monitor}: {e.score} {e.statistic} {_estimate(e)} over "
            f"the last {format_duration(e.window_s)}{where} — {e.condition}: {e.verdict}{was}")


def webhook_payload(event: AlertEvent) -> dict[str, Any]:
    """The generic webhook's JSON body. Stable keys (``version`` 1):

    ``version``, ``type`` (``"tracescore.monitor.state_change"``), ``monitor``, ``state``,
    ``previous`` (null for a monitor's first state), ``at`` (unix seconds), ``time`` (ISO
    8601, UTC), ``score``, ``statistic``, ``window_s``, ``where`` (segment filter, an object),
    ``estimate`` {``value``, ``lo``, ``hi``, ``n``, ``method``} (numbers or null),
    ``condition``, ``verdict``, ``worst_trace_ids`` (a list), ``command``, ``db``, ``text``
    (the one-line :func:`summary`).
    """
    e = event
    return {
        "version": PAYLOAD_VERSION, "type": EVENT_NAME, "monitor": e.monitor,
        "state": e.state, "previous": e.previous, "at": e.at, "time": _iso(e.at),
        "score": e.score, "statistic": e.statistic, "window_s": e.window_s,
        "where": dict(e.where),
        "estimate": {"value": _finite(e.value), "lo": _finite(e.lo), "hi": _finite(e.hi),
                     "n": e.n, "method": e.method},
        "condition": e.condition, "verdict": e.verdict,
        "worst_trace_ids": list(e.worst_trace_ids), "command": e.command, "db": e.db,
        "text": summary(e),
    }


_EMOJI = {"ALERT": ":red_circle:", "WARNING": ":large_yellow_circle:",
          "OK": ":large_green_circle:", "NO_DATA": ":white_circle:"}


def _mrkdwn(text: str, limit: int = _SLACK_TEXT_CHARS) -> str:
    """Slack mrkdwn treats ``&``, ``<`` and ``>`` as markup: escape them (Slack's rule)."""
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _section(text: str) -> dict[str, Any]:
    return {"type": "section", "text": {"type": "mrkdwn", "text": text}}


def slack_payload(event: AlertEvent) -> dict[str, Any]:
    """A Slack incoming-webhook body: ``text`` (the notification's fallback: the one-line
    :func:`summary`) and ``blocks``: the state change, then fields with the score, the window
    (and segment filter), the estimate with its interval, the condition and the verdict, then
    the worst records' trace ids and the command that shows the breach."""
    e = event
    was = f" (was {e.previous})" if e.previous else ""
    window = f"last {format_duration(e.window_s)}"
    if e.where:
        window += " where " + ", ".join(f"{k}={v}" for k, v in e.where.items())
    fields = [("Score", f"{e.score} ({e.statistic})"), ("Window", window),
              ("Estimate", _estimate(e)), ("Condition", e.condition), ("Verdict", e.verdict)]
    blocks: list[dict[str, Any]] = [
        _section(f"{_EMOJI.get(e.state, '')} *{e.state}* · monitor "
                 f"*{_mrkdwn(e.monitor, 200)}*{was}".strip()),
        {"type": "section", "fields": [
            {"type": "mrkdwn", "text": f"*{k}*\n{_mrkdwn(v, _SLACK_FIELD_CHARS)}"}
            for k, v in fields]},
    ]
    if e.worst_trace_ids:
        ids = ", ".join(f"`{_mrkdwn(t, 64)}`" for t in e.worst_trace_ids[:_WORST_SHOWN])
        more = len(e.worst_trace_ids) - _WORST_SHOWN
        blocks.append(_section(f"*Worst records* (trace ids): {ids}"
                               + (f" and {more} more" if more > 0 else "")))
    blocks.append(_section(f"*See the breach:* `{_mrkdwn(e.command, 500)}`"))
    blocks.append({"type": "context", "elements": [
        {"type": "mrkdwn", "text": _mrkdwn(f"{e.db} · {_iso(e.at)}", 300)}]})
    return {"text": _mrkdwn(summary(e)), "blocks": blocks}


def payload_for(kind: str, event: AlertEvent) -> dict[str, Any]:
    """The body a channel of ``kind`` (``"webhook"`` or ``"slack"``) is sent."""
    if kind == SLACK:
        return slack_payload(event)
    if kind == WEBHOOK:
        return webhook_payload(event)
    raise ValueError(f"unknown channel kind {kind!r}; expected one of {', '.join(KINDS)}")


def outbox_items(event: AlertEvent, channels: Iterable[Any]) -> list[_state.OutboxItem]:
    """One outbox item per channel (objects with ``.name`` and ``.kind``) for
    :func:`.state.save_evaluation`: the channel's name and the payload in its format."""
    return [_state.OutboxItem(c.name, c.kind, payload_for(c.kind, event)) for c in channels]
