"""Issue 33, option (a) measured before it is built: a prune's bytes written when ``scores``
and ``jobs`` are indexed per record by a time-ordered integer instead of the random
``record_id`` text — on copies of bench/prune.py's template (a bench-only layout; the package's
schema is not changed).

Layouts of the same data, each VACUUMed first (the same page order for all):

* ``text``: the schema as it is (``scores(record_id, name)``,
  ``jobs(record_id, metric, metric_version)`` unique indexes);
* ``seq``: ``records.seq`` (a unique integer in insertion order, = the rowid here) and
  ``scores.rec`` / ``jobs.rec`` = their record's ``seq``, those two indexes keyed by ``rec``
  instead (the records' own ``record_id`` key stays: a lookup by record id goes
  ``records(record_id)`` → ``seq`` → ``scores(rec, name)``); ``seq-jobs`` / ``seq-scores``: one
  of the two tables only.

Three measures:

1. (default) the backlog deleted in ``--tx`` transactions of equal size, each what
   ``prune_batches._delete_chunk`` does (the eligible records in time order; their scores,
   jobs, then the records; the scores' (name, value) index dropped as a bulk run does): the
   WAL's bytes at the end (``wal_autocheckpoint`` off: every frame a transaction appended) —
   the deleting part of a run's writes, without vacuum and checkpoint;
2. (default, ``--writes``) the app's side: records copied under new random ids with their
   jobs and scores, 10 a transaction: WAL bytes and time per record, and the plans of a
   record's scores and jobs looked up by its ``record_id`` in the seq layouts;
3. ``--e2e``: ``retention.prune`` itself — bench/prune.py's prune child (its app writer thread
   with ``--app-probe``, its writer process with ``--probe``) — on ``text`` and ``seq``
   alternated, ``seq`` with the batch's statements keyed by ``rec`` (:data:`SEQ_PATCH`):
   bytes written ÷ bytes freed, batches, the writers' waits.

    python bench/prune.py --base ../base --n 60000 --skip dry,flush --template /tmp/t.db --runs 1
    python bench/prune_keys.py /tmp/t.db --tx 1,10,28 --runs 2
    python bench/prune_keys.py /tmp/t.db --e2e --runs 2 --app-probe 0.02
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

DAY = 86400.0

ELIGIBLE = (
    "SELECT r.rowid, r.record_id, r.created_at FROM records r WHERE r.created_at < ?"
    " AND r.created_at >= ?"
    " AND NOT EXISTS (SELECT 1 FROM jobs j WHERE j.{jkey} = {jrec}"
    " AND j.status IN ('pending', 'leased'))"
    " AND NOT EXISTS (SELECT 1 FROM scores s WHERE s.{skey} = {srec} AND s.delivery IS NULL)"
    " ORDER BY r.created_at LIMIT ?")


#: The tables keyed by the record's rowid in each layout.
TABLES = {"text": (), "seq": ("scores", "jobs"), "seq-jobs": ("jobs",),
          "seq-scores": ("scores",)}
INDEXES = {"scores": ("idx_scores_record_id_name", "idx_scores_rec_name ON scores(rec, name)"),
           "jobs": ("idx_jobs_record_id_metric_metric_version",
                    "idx_jobs_rec_metric ON jobs(rec, metric, metric_version)")}


def prepare(src: Path, dst: Path, layout: str) -> None:
    shutil.copyfile(src, dst)
    conn = sqlite3.connect(dst, isolation_level=None)
    if TABLES[layout]:  # (the records' own sequence: a rowid may change in a VACUUM)
        conn.execute("ALTER TABLE records ADD COLUMN seq INTEGER")
        conn.execute("UPDATE records SET seq = rowid")
        conn.execute("CREATE UNIQUE INDEX idx_records_seq ON records(seq)")
    for table in TABLES[layout]:
        conn.execute(f"ALTER TABLE {table} ADD COLUMN rec INTEGER")
        conn.execute(f"UPDATE {table} SET rec = (SELECT r.seq FROM records r"
                     f" WHERE r.record_id = {table}.record_id)")
        old, new = INDEXES[table]
        conn.execute(f"DROP INDEX {old}")
        conn.execute(f"CREATE UNIQUE INDEX {new}")
    conn.execute("VACUUM")
    conn.execute("PRAGMA journal_mode=WAL")
    conn.close()


def run(db: Path, layout: str, n_tx: int, cutoff: float) -> dict[str, float]:
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("DROP INDEX IF EXISTS idx_scores_name_value")  # (a bulk run's)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.execute("PRAGMA wal_autocheckpoint=0")
    conn.execute("PRAGMA cache_size=-200000")
    keys = {t: ("rec", "r.rowid", 0) if t in TABLES[layout] else ("record_id", "r.record_id", 1)
            for t in ("scores", "jobs")}
    total = int(conn.execute("SELECT count(*) FROM records WHERE created_at < ?",
                             (cutoff,)).fetchone()[0])
    per_tx = -(-total // n_tx)
    since, deleted, t0 = float("-inf"), 0, time.perf_counter()
    sql = ELIGIBLE.format(jkey=keys["jobs"][0], jrec=keys["jobs"][1], skey=keys["scores"][0],
                          srec=keys["scores"][1])
    while True:
        conn.execute("BEGIN IMMEDIATE")
        rows = conn.execute(sql, (cutoff, since, per_tx)).fetchall()
        if rows:
            marks = ",".join("?" * len(rows))
            for table in ("scores", "jobs"):
                key, _, col = keys[table]
                conn.execute(f"DELETE FROM {table} WHERE {key} IN ({marks})",
                             [r[col] for r in rows])
            conn.execute(f"DELETE FROM records WHERE rowid IN ({marks})", [r[0] for r in rows])
            since = float(rows[-1][2])
        conn.execute("COMMIT")
        deleted += len(rows)
        if len(rows) < per_tx:
            break
    wall = time.perf_counter() - t0
    wal = os.path.getsize(str(db) + "-wal")
    conn.close()
    return {"layout": layout, "tx": n_tx, "deleted": deleted, "wal_mb": wal / 1e6, "wall": wall}


def write_path(db: Path, layout: str, n: int, per_tx: int) -> dict[str, float]:
    """The app's side: ``n`` records written (copies of recent ones under new random ids, with
    their jobs and scores), ``per_tx`` a transaction as the writer batches them; the seq
    layouts give a record ``max(seq) + 1`` and its jobs and scores its ``seq``."""
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA wal_autocheckpoint=0")
    cols = {t: [r[1] for r in conn.execute(f"PRAGMA table_info({t})")
                if r[1] not in ("score_id", "job_id", "rec", "seq")]
            for t in ("records", "scores", "jobs")}
    src = [r[0] for r in conn.execute("SELECT record_id FROM records ORDER BY created_at DESC"
                                      " LIMIT ?", (n,))]
    seq = bool(TABLES[layout])
    rcols = ", ".join(cols["records"])
    rsel = ", ".join("?" if c == "record_id" else "created_at + 1" if c == "created_at" else c
                     for c in cols["records"])
    put_record = (f"INSERT INTO records({rcols}{', seq' if seq else ''}) SELECT {rsel}"
                  + (", (SELECT coalesce(max(seq), 0) + 1 FROM records)" if seq else "")
                  + " FROM records WHERE record_id = ?")
    puts = []
    for t in ("jobs", "scores"):
        keyed = t in TABLES[layout]
        c = ", ".join(cols[t])
        sel = ", ".join("?" if x == "record_id" else x for x in cols[t])
        src_key = "rec = (SELECT seq FROM records WHERE record_id = ?)" if keyed else \
            "record_id = ?"
        puts.append((f"INSERT INTO {t}({c}{', rec' if keyed else ''}) SELECT {sel}"
                     + (", (SELECT seq FROM records WHERE record_id = ?)" if keyed else "")
                     + f" FROM {t} WHERE {src_key}", keyed))
    wal0 = os.path.getsize(str(db) + "-wal") if os.path.exists(str(db) + "-wal") else 0
    t0 = time.perf_counter()
    for i in range(0, n, per_tx):
        conn.execute("BEGIN IMMEDIATE")
        for old in src[i:i + per_tx]:
            new = os.urandom(16).hex() + "-" + os.urandom(8).hex()
            conn.execute(put_record, (new, old))
            for sql, keyed in puts:
                conn.execute(sql, (new, new, old) if keyed else (new, old))
        conn.execute("COMMIT")
    wall = time.perf_counter() - t0
    wal = os.path.getsize(str(db) + "-wal") - wal0
    plans = {}
    if seq:  # (a record's jobs and scores by its record_id: through records' key, indexed)
        for t in TABLES[layout]:
            plans[t] = [r[3] for r in conn.execute(
                f"EXPLAIN QUERY PLAN SELECT * FROM {t} WHERE rec = (SELECT seq FROM records"
                " WHERE record_id = ?)", (src[0],))]
    conn.close()
    return {"layout": layout, "written": n, "us_per_record": 1e6 * wall / n,
            "wal_kb_per_record": wal / n / 1e3, "plans": plans}


#: ``--e2e``: ``retention.prune`` itself (bench/prune.py's child, with its app writer thread
#: or writer process), on the ``seq`` layout with the batch's statements keyed by ``rec``.
SEQ_PATCH = r"""
import os
from tracescore.store import prune_batches as _pb
if os.environ.get("PRUNE_KEYS_LAYOUT") == "seq":
    _SEL = ("SELECT r.record_id, r.created_at, r.seq FROM records r WHERE r.created_at < ?"
            " AND r.created_at >= ?"
            " AND NOT EXISTS (SELECT 1 FROM jobs j WHERE j.rec = r.seq"
            " AND j.status IN ('pending', 'leased'))"
            " AND NOT EXISTS (SELECT 1 FROM scores s WHERE s.rec = r.seq AND s.delivery IS NULL)"
            " AND NOT EXISTS (SELECT 1 FROM labels l WHERE l.trace_id = r.trace_id)"
            " ORDER BY r.created_at LIMIT ?")
    def _chunk(store, conn, cutoff, limit, since, result):
        rows = conn.execute(_SEL, (cutoff, since, limit)).fetchall()
        if not rows:
            return 0, since
        ids, seqs = [r[0] for r in rows], [r[2] for r in rows]
        m = ",".join("?" * len(rows))
        result.scores += conn.execute(f"DELETE FROM scores WHERE rec IN ({m})", seqs).rowcount
        result.jobs += conn.execute(f"DELETE FROM jobs WHERE rec IN ({m})", seqs).rowcount
        result.judge_decisions += conn.execute(
            f"DELETE FROM judge_decisions WHERE record_id IN ({m})", ids).rowcount
        n = int(conn.execute(f"DELETE FROM records WHERE seq IN ({m})", seqs).rowcount)
        return n, float(rows[-1][1])
    _pb._delete_chunk = _chunk
if os.environ.get("PRUNE_KEYS_NO_VACUUM"):  # (a diagnosis: the writer's waits without it)
    from tracescore.store import retention as _rt
    _rt.give_back_space = lambda *a, **k: (0, 0)
"""


def e2e(prepared: dict[str, Path], work: Path, now: str, runs: int, app_probe: float | None,
        probe: float) -> dict[str, list[dict[str, Any]]]:
    """bench/prune.py's prune child on the text and seq layouts, alternated."""
    import prune as bench

    out: dict[str, list[dict[str, Any]]] = {"text": [], "seq": []}
    for i in range(runs):
        for layout in ("text", "seq") if i % 2 == 0 else ("seq", "text"):
            db = work / "e2e.db"
            bench.copy_db(prepared[layout], db)
            args = [str(db), now] + ([str(app_probe)] if app_probe else [])
            os.environ["PRUNE_KEYS_LAYOUT"] = layout
            run = functools.partial(bench.child, SEQ_PATCH + bench.PRUNE, args, bench.REPO,
                                    600.0)
            if probe:
                r, r["probe"] = bench.with_probe(db, bench.REPO, probe, run)
            else:
                r = run()
            r["ratio"] = r["wrote_bytes"] / max(1, r["file_before"] - r["file_after"])
            out[layout].append(r)
            print(json.dumps({"layout": layout, **{k: r[k] for k in (
                "ratio", "wrote_bytes", "records", "batches", "longest_hold_s", "wall",
                "paused_s", "pauses_skipped", "rebuild_s", "vacuum_steps", "cpu")},
                "app_probe": r["app_probe"], "probe": r.get("probe")}), flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("template", type=Path, help="bench/prune.py's --template database")
    ap.add_argument("--tx", default="1,10,28", help="transactions to delete the backlog in")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--writes", type=int, default=3000,
                    help="records written (the app's side) per layout and run; 0: none")
    ap.add_argument("--e2e", action="store_true",
                    help="run retention.prune (bench/prune.py's child) on text and seq instead")
    ap.add_argument("--app-probe", type=float, default=None, metavar="S")
    ap.add_argument("--probe", type=float, default=0.0, metavar="S")
    a = ap.parse_args()
    facts = json.loads(Path(str(a.template) + ".json").read_text())
    cutoff = facts["now"] - 30 * DAY
    work = Path(tempfile.mkdtemp(prefix="prune-keys-"))
    try:
        prepared = {}
        for layout in ("text", "seq") if a.e2e else TABLES:
            prepared[layout] = work / f"{layout}.db"
            prepare(a.template, prepared[layout], layout)
            print(f"{layout}: {prepared[layout].stat().st_size / 1e6:.0f} MB", flush=True)
        if a.e2e:
            e2e(prepared, work, repr(facts["now"]), a.runs, a.app_probe, a.probe)
            return
        for _ in range(a.runs):
            for n_tx in (int(x) for x in a.tx.split(",")):
                for layout in TABLES:
                    db = work / "run.db"
                    for s in ("", "-wal", "-shm"):
                        Path(str(db) + s).unlink(missing_ok=True)
                    shutil.copyfile(prepared[layout], db)
                    print(json.dumps(run(db, layout, n_tx, cutoff)), flush=True)
            for layout in TABLES if a.writes else ():
                db = work / "run.db"
                for s in ("", "-wal", "-shm"):
                    Path(str(db) + s).unlink(missing_ok=True)
                shutil.copyfile(prepared[layout], db)
                print(json.dumps(write_path(db, layout, a.writes, 10)), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
