"""Retention's policy and result: the settings a run prunes by (:class:`Retention`, parsed from
``"30d"``/``"10GB"``-style strings) and what a run did (:class:`PruneResult`). Values only; the
runs are :mod:`.retention`'s (which re-exports these names).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from typing import Any

from .._internal.validate import is_number

DAY = 86400.0
#: The daily judge budget counts today's judge calls: a shorter window would forget them.
MIN_AGE_S = DAY

_AGE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_AGE_UNIT = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": DAY, "w": 7 * DAY}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)\s*$", re.I)
_SIZE_UNIT = {"": 1, "b": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12,
              "ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40}


def parse_duration(text: str) -> float:
    """``"90s"``, ``"15m"``, ``"2h"``, ``"30d"``, ``"2w"`` → seconds."""
    m = _AGE_RE.match(text.lower()) if isinstance(text, str) else None
    if not m:
        raise ValueError(f"{text!r} is not a duration; use a number and a unit (s, m, h, d, "
                         "w), e.g. 30d")
    return float(m.group(1)) * _AGE_UNIT[m.group(2)]


def parse_age(text: str) -> float:
    """``"30d"``, ``"2w"``, ``"36h"`` → seconds (at least one day)."""
    seconds = parse_duration(text)
    if seconds < MIN_AGE_S:
        raise ValueError(f"retention age {text!r} is shorter than one day (the daily judge "
                         "budget counts today's judge calls)")
    return seconds


def parse_size(text: str | int) -> int:
    """``"10GB"``, ``"500MiB"``, ``"2e9"``-free plain numbers of bytes → bytes (> 0)."""
    if isinstance(text, int) and not isinstance(text, bool):
        value = text
    else:
        m = _SIZE_RE.match(text) if isinstance(text, str) else None
        if not m:
            raise ValueError(f"{text!r} is not a size; use e.g. 500MB, 10GB, 2GiB")
        unit = m.group(2).lower().rstrip("b")
        value = int(float(m.group(1)) * _SIZE_UNIT[unit])
    if value <= 0:
        raise ValueError(f"size must be > 0, got {text!r}")
    return value


@dataclass(frozen=True)
class Retention:
    """How long records stay, and how the pruner works through them.

    ``tracescore.init(retention=...)`` takes a :class:`Retention`, an age string (``"30d"``,
    ``"2w"``), or ``None`` (never prune). The default keeps 30 days.
    """

    #: Records older than this (``records.created_at``) are pruned; None: no age limit.
    max_age_s: float | None = 30 * DAY
    #: Prune the oldest records while the database uses more than this many bytes.
    max_bytes: int | None = None
    #: Records in a run's first chunk (a batch, one transaction, is chunks until it has held
    #: the write lock about ``max_hold_s``); later chunks are sized by how long they take,
    #: between this and MAX_GROWTH × this.
    batch_size: int = 500
    #: Seconds between background runs (the first run starts ``first_run_s`` after init).
    interval_s: float = 600.0
    first_run_s: float = 30.0
    #: Pause between batches, so the writer and the scoring worker get the lock.
    pause_s: float = 0.05
    #: How long one batch may hold the write lock while others write (while nobody does, up
    #: to :data:`.vacuum.IDLE_HOLD` × this): a batch is chunks until the next one would
    #: take it past this (issue 19: 500 records took ~90 ms at 1M records, a fifth of the
    #: run was pauses; issue 33: each transaction rewrites the random index pages). A
    #: writer waiting on SQLite's busy handler retries every 50 ms until it has waited ~230 ms,
    #: then every 100 ms, and may miss a 50 ms pause after a longer hold.
    max_hold_s: float = 0.2
    #: Pages given back per incremental-vacuum step (4 KiB pages: 8 MiB).
    vacuum_pages: int = 2048
    #: Seconds a run spends giving space back (None: until every free page is given back).
    #: The rest stays free in the file, reused by new rows, and the next run gives back more:
    #: moving a page costs ~0.2 ms here (issue 19: 322,000 free pages after a 1M-record
    #: backlog were ~70 s of vacuum in one run).
    vacuum_budget_s: float | None = 10.0

    def __post_init__(self) -> None:
        if self.max_age_s is not None and (not is_number(self.max_age_s)
                                           or self.max_age_s < MIN_AGE_S):
            raise ValueError(f"retention max_age_s must be >= {MIN_AGE_S:g} (one day) or None, "
                             f"got {self.max_age_s!r}")
        if self.max_bytes is not None:
            object.__setattr__(self, "max_bytes", parse_size(self.max_bytes))
        if self.max_age_s is None and self.max_bytes is None:
            raise ValueError("retention needs max_age_s or max_bytes (or pass retention=None)")
        for name in ("batch_size", "vacuum_pages"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"retention {name} must be an int >= 1, got {v!r}")
        for name in ("interval_s", "first_run_s", "pause_s", "max_hold_s", "vacuum_budget_s"):
            v = getattr(self, name)
            if name == "vacuum_budget_s" and v is None:
                continue
            if not is_number(v) or v < 0:
                raise ValueError(f"retention {name} must be a number >= 0, got {v!r}")

    @classmethod
    def resolve(cls, value: Any) -> Retention | None:
        """``init(retention=...)``: a Retention, an age string, a mapping of fields, or None."""
        if value is None or value is False:
            return None
        if isinstance(value, Retention):
            return value
        if isinstance(value, str):
            return cls(max_age_s=parse_age(value))
        if isinstance(value, dict):
            known = {f.name for f in fields(cls)}
            unknown = set(value) - known
            if unknown:
                raise ValueError(f"retention: unknown fields {sorted(unknown)}; "
                                 f"expected some of {sorted(known)}")
            return cls(**value)
        raise TypeError("retention must be a tracescore.Retention, an age such as '30d', "
                        f"or None, got {type(value).__name__}")

    def describe(self) -> str:
        parts = []
        if self.max_age_s is not None:
            parts.append(f"{self.max_age_s / DAY:g} days")
        if self.max_bytes is not None:
            parts.append(f"{self.max_bytes / 1e6:,.0f} MB")
        return " and ".join(parts)


@dataclass
class PruneResult:
    """What one :func:`prune` run did (counts of deleted rows)."""

    records: int = 0
    scores: int = 0
    jobs: int = 0
    judge_calls: int = 0
    judge_cache: int = 0
    #: the judge budget's per-record decisions (docs/judge_budget.md), pruned with the records
    judge_decisions: int = 0
    feedback: int = 0
    #: closed sessions none of whose records is left (docs/sessions.md)
    sessions: int = 0
    batches: int = 0
    #: records pruned because of ``max_bytes`` (beyond those past ``max_age_s``)
    by_size: int = 0
    #: records past the age limit kept because a job is open or a score is undelivered
    held: int = 0
    #: unsampled records whose text was dropped after the ``keep_full_text`` window
    compacted: int = 0
    #: free pages returned to the file system (SQLite incremental vacuum), in how many steps
    pages_given_back: int = 0
    vacuum_steps: int = 0
    #: free pages left in the file when the run ended (the vacuum budget ran out, or a stop)
    free_pages_left: int = 0
    #: the longest write transaction of the run (a batch, an index build, a vacuum step), s;
    #: a batch's includes the checkpoint SQLite may run after its commit (which no longer
    #: holds the write lock), so this is an upper bound of the lock's longest hold
    longest_hold_s: float = 0.0
    #: indexes dropped for a large backlog and built again after it (:func:`_bulk_mode`),
    #: and the seconds those builds held the write lock
    bulk_indexes: list[str] = field(default_factory=list)
    rebuild_s: float = 0.0
    #: seconds paused between write transactions, and pauses skipped because no other
    #: connection wrote (:class:`.vacuum.Pauses`)
    paused_s: float = 0.0
    pauses_skipped: int = 0
    used_bytes_before: int = 0
    used_bytes_after: int = 0
    file_bytes_before: int = 0
    file_bytes_after: int = 0
    seconds: float = 0.0
    stopped: bool = False
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}
