"""Sessions (issue 34): what the session bookkeeping costs the writer, and how fast a closer
closes sessions.

1. The writer: ``Store.write_batch`` of batches of ``--batch`` records (no jobs), interleaved:
   records without a session key, and records whose key is one of ``--per-batch`` sessions per
   batch (each batch upserts that many ``sessions`` rows in its transaction). Reported: µs per
   record of each, min/median over ``--rounds`` rounds, and the ratio.
2. The closer: ``--sessions`` sessions of ``--turns`` turns each, closed by one
   :func:`tracescore.sessions.closer.close_due` loop (a clock moved past the idle window):
   sessions per second, and the same again after one late turn per session (re-close:
   replace the scores and their rollups).

SQLite (a temp file) by default; ``--db postgresql://...`` for PostgreSQL.

    python bench/sessions.py --quick
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time


def _rec(i: int, session: str | None, t: float) -> object:
    from tracescore.record import RagRecord

    return RagRecord(trace_id=f"{i + 1:032x}", span_id=f"{i + 1:016x}", query=f"question {i}?",
                     answer=f"answer {i}", session_id=session, end_time_ns=int(t * 1e9))


def writer(db: str, batch: int, per_batch: int, rounds: int) -> dict[str, list[float]]:
    from tracescore.sampling import Decision
    from tracescore.store import open_store

    store = open_store(db)
    d = Decision(0.5, ())
    out: dict[str, list[float]] = {"no session": [], "sessions": []}
    i = 0
    try:
        for _ in range(rounds):
            for kind in ("no session", "sessions"):
                recs = []
                for k in range(batch):
                    key = f"s-{i // batch}-{k % per_batch}" if kind == "sessions" else None
                    recs.append((_rec(i, key, time.time()), d))
                    i += 1
                t0 = time.perf_counter()
                store.write_batch(recs, [])
                out[kind].append((time.perf_counter() - t0) / batch * 1e6)
    finally:
        store.close()
    return out


def closer(db: str, sessions: int, turns: int) -> dict[str, float]:
    from tracescore.sampling import Decision
    from tracescore.sessions.closer import close_due
    from tracescore.store import open_store

    store = open_store(db)
    d = Decision(0.5, ())
    base = 10**9
    try:
        recs = [(_rec(base + s * turns + t, f"c-{s}", time.time()), d)
                for s in range(sessions) for t in range(turns)]
        for k in range(0, len(recs), 500):
            store.write_batch(recs[k:k + 500], [])
        out = {}
        for label in ("close", "re-close after a late turn"):
            t0 = time.perf_counter()
            n = 0
            while got := close_due(store, 60.0, now=time.time() + 61, limit=50).closed:
                n += len(got)
            out[label] = n / (time.perf_counter() - t0)
            late = [(_rec(base * 2 + s, f"c-{s}", time.time()), d) for s in range(sessions)]
            for k in range(0, len(late), 500):
                store.write_batch(late[k:k + 500], [])
        return out
    finally:
        store.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--db", default=None)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--per-batch", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--sessions", type=int, default=1000)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    if a.quick:
        a.rounds, a.sessions = 10, 200
    tmp = None
    db = a.db
    if db is None:
        tmp = tempfile.mkdtemp()
        db = os.path.join(tmp, "bench.db")
    w = writer(db, a.batch, a.per_batch, a.rounds)
    print(f"| writer, µs per record (batch {a.batch}, {a.per_batch} sessions per batch) "
          "| min | median |")
    print("| --- | --- | --- |")
    for k, v in w.items():
        print(f"| {k} | {min(v):.1f} | {statistics.median(v):.1f} |")
    ratio = statistics.median(w["sessions"]) / statistics.median(w["no session"])
    print(f"\nmedian ratio sessions / no session: {ratio:.2f}\n")
    db2 = db if a.db else os.path.join(tmp or "", "closer.db")
    c = closer(db2, a.sessions, a.turns)
    print(f"| closer ({a.sessions} sessions x {a.turns} turns) | sessions per second |")
    print("| --- | --- |")
    for k, v in c.items():
        print(f"| {k} | {v:.0f} |")


if __name__ == "__main__":
    main()
