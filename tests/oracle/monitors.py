"""Evaluating monitors on an oracle database at a fixed "now" (the Evaluator ``check`` and
``monitor`` run, with a clock), for the monitor oracle tests."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def evaluate(db: str, specs: Sequence[dict[str, Any]], nows: Sequence[float]
             ) -> list[dict[str, Any]]:
    """Each monitor of ``specs`` evaluated at each time of ``nows`` in turn (its state kept
    between evaluations, as ``tracescore monitor`` keeps it); the evaluations' JSON, by
    evaluation time: ``[{name: evaluation}, ...]``."""
    from tracescore.monitor.config import monitors_from_objects
    from tracescore.monitor.evaluate import Evaluator

    mons = monitors_from_objects({"monitor": list(specs)})
    t = [nows[0]]
    ev = Evaluator(db, mons, clock=lambda: t[0])
    out = []
    try:
        for now in nows:
            t[0] = now
            out.append({e.monitor: e.to_json() for e in ev.run_once()})
    finally:
        ev.close()
    return out
