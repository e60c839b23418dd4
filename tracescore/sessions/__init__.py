"""Sessions as a unit: conversations closed after an idle window and scored as a whole.

A record's ``session_id`` makes it a turn of a session (:mod:`tracescore.store.sessions`
keeps the open and closed sessions in the database); :mod:`.closer` closes the idle ones and
:mod:`.metrics` computes their scores. See docs/sessions.md.
"""

from __future__ import annotations

from .closer import CloseResult, SessionCloser, close_due, parse_idle
from .metrics import session_scores

__all__ = ["CloseResult", "SessionCloser", "close_due", "parse_idle", "session_scores"]
