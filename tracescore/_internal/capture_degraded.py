"""Capture assumptions that failed, counted: a capture that meets a shape it does not
understand degrades to its documented fallback, and says so.

Capture leans on the frameworks' callback order and a few private fields (LangGraph's stream
``_queue``). When a release breaks one of those assumptions, the capture takes the documented
fallback (docs/capture.md, "When capture meets a shape it does not understand") and calls
:func:`note` with the cause: counted per cause (process-wide: ``ts.stats()["capture"]``), a
log line once per cause and process, and — unless the capture recovered in full
(:data:`RECOVERED`) — written to the database's counters as ``capture_degraded`` (the
pipeline figure a monitor can watch) with the next batch of records.

:func:`note` costs a dict update; it runs only on the rare path.
"""

from __future__ import annotations

import logging
import threading

__all__ = ["CAUSES", "RECOVERED", "counts", "give_back", "note", "take_unwritten"]

log = logging.getLogger("tracescore.capture")

#: The causes, and the fallback each one takes (the log line says both).
CAUSES: dict[str, str] = {
    "unknown_parent": "a LangChain run named a parent run the handler never saw (a handler "
                      "attached mid-run, or a parent evicted as abandoned): recorded as a "
                      "request of its own",
    "root_in_run": "a LangChain run reported no parent but runs inside a captured run (its "
                   "caller handed it the caller's own config, as with_fallbacks does in "
                   "langchain-core 1.8): attached to the run it runs in, found from "
                   "var_child_runnable_config",
    "stream_queue": "LangGraph's stream queue has no _queue deque: the answer of a cut-off "
                    "graph stream may include chunks the client never received",
    "stream_item": "an item of LangGraph's stream queue has an unknown shape: it is not "
                   "subtracted from a cut-off stream's answer",
}

_lock = threading.Lock()
_counts: dict[str, int] = {}
_degraded = 0  # fallbacks whose record may be wrong (all causes but RECOVERED)
_written = 0  # the part of _degraded already handed to a store's counters


#: Causes the capture recovers from in full (the record is right): counted and logged, but
#: not in the ``capture_degraded`` figure, so a monitor watches only records that may be wrong.
RECOVERED = frozenset({"root_in_run"})


def note(cause: str) -> None:
    """Count one fallback taken for ``cause`` (a key of :data:`CAUSES`); log the first."""
    global _counts, _degraded
    with _lock:
        n = _counts.get(cause, 0) + 1
        _counts = {**_counts, cause: n}  # a new dict: readers take it without the lock
        if cause not in RECOVERED:
            _degraded += 1
    if n == 1:
        if cause in RECOVERED:
            log.info("tracescore capture: %s (counted in stats()['capture'][%r])",
                     CAUSES.get(cause, cause), cause)
        else:
            log.warning("tracescore capture: %s (counted in stats()['capture'][%r] and the "
                        "capture_degraded counter)", CAUSES.get(cause, cause), cause)


def counts() -> dict[str, int]:
    """Fallbacks taken in this process, per cause."""
    return dict(_counts)


def take_unwritten() -> int:
    """Fallbacks noted since the last call (for the store's ``capture_degraded`` counter)."""
    global _written
    with _lock:
        new, _written = _degraded - _written, _degraded
    return new


def give_back(n: int) -> None:
    """A write that failed: its ``n`` fallbacks go with the next one."""
    global _written
    with _lock:
        _written -= n
