"""What ``report --rgb`` reads: every record of a window with the values of the RGB score
names pivoted onto it (one row per record) and the noise profile's details. Blocking I/O,
streamed (a cursor); the abilities are computed by :mod:`tracescore.reports.rgb`.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any

__all__ = ["record_rows"]


def record_rows(conn: Any, names: Sequence[str], profile: str, *, since: float | None = None
                ) -> Iterator[dict[str, Any]]:
    """Each record created since ``since`` (None: all) as a dict: ``record_id``,
    ``n_contexts``, ``content_captured``, ``answer``, ``ground_truths``, ``v_NAME`` (the ok
    value of each of ``names``, None without one) and ``profile`` (the details of score
    ``profile``). ``names`` are the code's own score names (pivoted into the SQL text)."""
    cutoff = since if since is not None else -math.inf
    marks = ",".join("?" * len(names))
    pivot = ", ".join(
        f"max(CASE WHEN s.name = '{n}' THEN s.value END) AS v_{n}" for n in names)
    cur = conn.execute(
        "SELECT r.record_id, r.n_contexts, r.content_captured, r.answer, r.ground_truths, "
        f"{pivot}, max(CASE WHEN s.name = '{profile}' THEN s.details END) AS profile "
        "FROM records r LEFT JOIN scores s ON s.rec = r.seq AND s.status = 'ok' "
        f"AND s.value IS NOT NULL AND s.name IN ({marks}) "
        "WHERE r.created_at >= ? GROUP BY r.record_id",
        (*names, cutoff),
    )
    cols = [c[0] for c in cur.description]
    for row in cur:
        yield dict(zip(cols, row))
