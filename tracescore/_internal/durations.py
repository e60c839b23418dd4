"""Durations in words: ``"30m"``, ``"1h"``, ``"1.5d"``, ``"1w"`` to seconds and back.

Used by the monitor declarations, the judge canary's schedule and the read commands' messages
(issue 35: it sat in the monitor's config, so the judge climbed into the monitor for it).
Pure functions.
"""

from __future__ import annotations

import re

_DURATION_RE = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw])")
_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_DURATION_HINT = "use a number and a unit: 30m, 1h, 1d, 1w"


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
