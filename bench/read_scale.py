"""Reads that do not grow with history: ``report``, ``compare`` and ``check`` at 1M and 10M
records, side by side with the base tree's ``report`` (issue 16).

What it builds, per backend (SQLite, PostgreSQL) and size N (records):

1. **v2** — a database created by the *base* tree's schema (``open_store`` of ``--base``, schema
   version 2, run in a subprocess), filled with bulk SQL (``executemany`` on SQLite, ``COPY``
   on PostgreSQL; secondary indexes dropped during the load and re-created from the schema's
   own DDL). N records over ``--days`` (default 30) up to now, ~550 bytes of text each (query,
   answer, two contexts as JSON, metadata), and per record three scores a few seconds after
   it, with their three ``done`` jobs: ``faithfulness`` (a judge mean in [0, 1], pass/fail at
   0.5), ``grounded`` (yes/no) and ``answer_relevance`` (2 % judge errors). Two releases (v1
   for the first 2/3 of the span; v2 a little worse on faithfulness and grounded), two
   environments (production 90 %, staging 10 %), two app models.
2. **v3 (migrated)** — a copy of v2 (file copy; ``CREATE DATABASE … TEMPLATE``) opened with this
   tree's ``open_store``: the one-time migration to schema 3 (every raw row folded into the
   hourly rollups) is timed as a whole process. Its rows have no release/environment (a v2
   database never had them).
3. **v3 (native)** — the same records (same seed) in a database created by this tree's
   schema, with release, environment and segments: segments through the store's
   ``SegmentResolver``, raw rows by bulk SQL, and the hourly rollups computed by the store's own
   ``rollup.Delta`` (the code ``write_batch``/``complete_jobs`` use) and upserted per chunk.
   That this equals what the real write path stores is checked: ``--write-path N`` also writes
   N records through ``Store.write_batch`` + ``lease_jobs`` + ``complete_jobs`` (with the
   store module's clock replaced, as tests/test_monitoring.py does) and compares its
   ``hourly_*`` tables with the same ``Delta`` over its raw rows; its rate is reported.

Checks before timing: the new ``report --json`` on both v3 databases gives the same record
count and, per score, the same count and mean as the base ``report --json`` on v2.

Timings are whole processes (interpreter start and imports included), each new command paired
with the base ``report`` (or with the same base variant for ``report`` options) and run
alternately A B B A …; the ratio is taken pair by pair; min/median/max and the load average
(start→end of the row) are printed beside each figure. Then in-process timings of the query
layer (``build_report``, the HTML page's data, ``build_comparison``, one monitor evaluation),
every SQL statement they run with its time and its plan (``EXPLAIN QUERY PLAN`` / ``EXPLAIN``),
statements that scan a raw table flagged; and the imports of a ``report`` process
(``-X importtime``) grouped by package.

Run from the repo root with the project's venv:

    git worktree add ../base 8a19e44        # the base tree ("today's" report)
    python bench/read_scale.py --quick --base ../base            # smoke test, < 60 s
    python bench/read_scale.py --base ../base --n 1000000 --backends sqlite,postgres
    python bench/read_scale.py --base ../base --n 10000000 --backends sqlite

PostgreSQL: ``--pg-url`` (a superuser URL), else a throwaway cluster is started with the
machine's ``initdb``/``pg_ctl`` as tests/pg.py does (data under ``--workdir``). Databases are
written under ``--workdir`` and deleted at the end unless ``--keep``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import REPO, load_average, machine_info, md_table, print_machine  # noqa: E402

DAY = 86400.0
HOUR = 3600
SCORES = ("faithfulness", "grounded", "answer_relevance")
JUDGE = "gpt-4o-mini"
CHUNK = 50_000
MONITORS_TOML = """\
[[monitor]]
name = "faithfulness-1d"
score = "faithfulness"
statistic = "mean"
window = "1d"
threshold = 0.7
"""


# -- the data -----------------------------------------------------------------------------------
_WORDS = ("the a refund policy order shipping invoice account password reset customer support "
          "delivery window warranty claim product return label payment card plan upgrade "
          "discount region tax receipt subscription cancel renewal billing cycle api key limit "
          "quota region latency error retry timeout token model version release staging").split()


def _sentence(rng: random.Random, chars: int) -> str:
    out: list[str] = []
    n = 0
    while n < chars:
        w = rng.choice(_WORDS)
        out.append(w)
        n += len(w) + 1
    s = " ".join(out)[:chars]
    return s[0].upper() + s[1:] + "."


@dataclass
class Pools:
    """Texts drawn from (so that generating 10M records costs little per record)."""

    queries: list[str]
    answers: list[str]
    contexts: list[str]  # each a JSON object (text, id, score, metadata, source)

    @classmethod
    def make(cls, seed: int) -> Pools:
        rng = random.Random(seed)
        q = [_sentence(rng, rng.randint(30, 60)) + "?" for _ in range(2000)]
        a = [_sentence(rng, rng.randint(60, 110)) for _ in range(2000)]
        c = [json.dumps({"text": _sentence(rng, rng.randint(50, 80)), "id": f"doc-{i}",
                         "score": round(rng.random(), 3), "metadata": {},
                         "source": "retriever"}, ensure_ascii=False) for i in range(5000)]
        return cls(q, a, c)


@dataclass(slots=True)
class Rec:
    t: float
    trace: str
    span: str
    query: str
    answer: str
    contexts: str
    release: str
    env: str
    model: str
    latency: float
    tin: int
    tout: int
    error: str | None
    u: float
    # (name, value, label, status, error, created_at, duration_ms, delivery)
    scores: list[tuple[str, float | None, str | None, str, str | None, float, float, str]]


def records(n: int, days: float, now: float, seed: int = 16) -> Iterator[Rec]:
    """``n`` records over ``[now - days, now)``, in time order, deterministic for a seed."""
    rng = random.Random(seed)
    pools = Pools.make(seed)
    span = days * DAY
    start = now - span
    switch = start + span * 2 / 3
    nq, na, nc = len(pools.queries), len(pools.answers), len(pools.contexts)
    beta = rng.betavariate
    for i in range(n):
        t = start + span * (i + rng.random()) / n - 10.0
        v1 = t < switch
        env = "production" if rng.random() < 0.9 else "staging"
        model = "gpt-4o" if rng.random() < 0.7 else "gpt-4o-mini"
        ctx = ("[" + pools.contexts[rng.randrange(nc)] + ", "
               + pools.contexts[rng.randrange(nc)] + "]")
        error = "TimeoutError: upstream model timed out" if rng.random() < 0.005 else None
        mu = 0.82 if v1 else 0.79
        faith = beta(mu * 8, (1 - mu) * 8)
        ts = t + 1 + 5 * rng.random()
        scores: list[Any] = [
            ("faithfulness", faith, "pass" if faith >= 0.5 else "fail", "ok", None, ts,
             800 + 400 * rng.random(), "span"),
            ("grounded", 1.0 if rng.random() < (0.92 if v1 else 0.90) else 0.0, None, "ok",
             None, ts + 0.1, 600 + 300 * rng.random(), "span"),
        ]
        if rng.random() < 0.02:
            scores.append(("answer_relevance", None, None, "error",
                           "judge call failed: ReadTimeout (after 3 attempts)", ts + 0.2,
                           30000.0, "carrier"))
        else:
            scores.append(("answer_relevance", beta(6, 2), None, "ok", None, ts + 0.2,
                           700 + 300 * rng.random(), "span"))
        yield Rec(t, f"{rng.getrandbits(128):032x}", f"{rng.getrandbits(64):016x}",
                  pools.queries[rng.randrange(nq)], pools.answers[rng.randrange(na)], ctx,
                  "v1" if v1 else "v2", env, model, 300 + rng.expovariate(1 / 900),
                  400 + rng.randrange(800), 50 + rng.randrange(250), error, rng.random(),
                  scores)


SAMPLED = json.dumps(list(SCORES))
METRICS_ROWS = [  # metric, version, kind, score_names, higher_is_better, threshold, descr, is_binary
    ("faithfulness", "1", "judge", '["faithfulness"]', 1, 0.5, "claims supported", 0),
    ("grounded", "1", "judge", '["grounded"]', 1, None, "answer grounded (yes/no)", 1),
    ("answer_relevance", "1", "judge", '["answer_relevance"]', 1, None, "relevance", 0),
]

REC_V2 = ("record_id", "trace_id", "span_id", "created_at", "source", "query", "answer",
          "contexts", "n_contexts", "ground_truths", "metadata", "tags", "session_id",
          "user_id", "latency_ms", "input_tokens", "output_tokens", "model", "error",
          "content_captured", "sample_u", "sampled", "sampled_metrics", "forced", "prompt",
          "retrieval_queries", "text_kept", "query_chars", "query_hash", "answer_chars",
          "answer_hash")
REC_V3 = (*REC_V2, "release", "environment", "seg_id")
SCO_V2 = ("score_id", "job_id", "record_id", "trace_id", "name", "metric", "metric_version",
          "value", "label", "explanation", "status", "error", "duration_ms", "details",
          "created_at", "delivery")
SCO_V3 = (*SCO_V2, "seg_id", "judge_model")
JOB = ("job_id", "record_id", "metric", "metric_version", "status", "attempts", "lease_owner",
       "lease_until", "reason", "created_at", "updated_at")


def rows_of(chunk: Sequence[Rec], first_id: int, v3: bool, seg_of: dict[tuple[str, str, str], int]
            ) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """records, jobs and scores rows of ``chunk``; ids from ``first_id`` (3 per record)."""
    recs, jobs, scores = [], [], []
    k = first_id
    for r in chunk:
        rid = f"{r.trace}-{r.span}"
        row: tuple[Any, ...] = (
            rid, r.trace, r.span, r.t, "langchain", r.query, r.answer, r.contexts, 2, "[]",
            '{"route": "faq"}', "[]", None, f"user-{int(r.trace[:4], 16) % 5000}", r.latency, r.tin,
            r.tout, r.model, r.error, 1, r.u, 1, SAMPLED, None, None, None, 1, None, None,
            None, None)
        seg = seg_of.get((r.release, r.env, r.model), 0)
        recs.append((*row, r.release, r.env, seg) if v3 else row)
        for name, value, label, status, error, ts, dur, delivery in r.scores:
            jobs.append((k, rid, name, "1", "done", 1, None, None, None, r.t, ts))
            srow: tuple[Any, ...] = (k, k, rid, r.trace, name, name, "1", value, label, None,
                                     status, error, dur, "{}", ts, delivery)
            scores.append((*srow, seg, JUDGE) if v3 else srow)
            k += 1
    return recs, jobs, scores


def add_to_delta(delta: Any, chunk: Sequence[Rec], seg_of: dict[tuple[str, str, str], int]
                 ) -> None:
    """The chunk's contribution to the hourly rollups, by the store's own :class:`Delta`."""
    for r in chunk:
        seg = seg_of[(r.release, r.env, r.model)]
        delta.add_record(r.t, seg, 1, 1, r.error, r.tin, r.tout, r.latency)
        for name, value, label, status, _e, ts, _d, _dl in r.scores:
            delta.add_score(ts, name, seg, "1", JUDGE, name, value, label, status)


def chunks(it: Iterator[Rec], size: int) -> Iterator[list[Rec]]:
    buf: list[Rec] = []
    for r in it:
        buf.append(r)
        if len(buf) == size:
            yield buf
            buf = []
    if buf:
        yield buf


# -- backends -----------------------------------------------------------------------------------
class Backend:
    """Where the databases live, and how to bulk load / copy / drop them."""

    name = ""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir

    def db(self, label: str) -> str:
        raise NotImplementedError

    def prepare_empty(self, db: str) -> None:
        """Nothing there yet (a previous run's leftovers removed)."""
        raise NotImplementedError

    def load(self, db: str, gen: Iterator[list[Rec]], v3: bool,
             seg_of: dict[tuple[str, str, str], int], delta_factory: Callable[[], Any] | None,
             store: Any = None) -> int:
        raise NotImplementedError

    def copy(self, src: str, dst: str) -> None:
        raise NotImplementedError

    def drop(self, db: str) -> None:
        raise NotImplementedError

    def size(self, db: str) -> int:
        raise NotImplementedError


class SqliteBackend(Backend):
    name = "sqlite"

    def db(self, label: str) -> str:
        return str(self.workdir / f"{label}.db")

    def prepare_empty(self, db: str) -> None:
        self.drop(db)

    def _files(self, db: str) -> list[Path]:
        return [Path(db + s) for s in ("", "-wal", "-shm", "-journal")]

    def drop(self, db: str) -> None:
        for p in self._files(db):
            p.unlink(missing_ok=True)

    def size(self, db: str) -> int:
        return sum(p.stat().st_size for p in self._files(db) if p.exists())

    def copy(self, src: str, dst: str) -> None:
        self.drop(dst)
        import sqlite3

        c = sqlite3.connect(src)
        c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        c.close()
        shutil.copyfile(src, dst)

    def load(self, db: str, gen: Iterator[list[Rec]], v3: bool,
             seg_of: dict[tuple[str, str, str], int], delta_factory: Callable[[], Any] | None,
             store: Any = None) -> int:
        import sqlite3

        conn = sqlite3.connect(db, isolation_level=None)
        conn.execute("PRAGMA journal_mode=OFF")  # bulk load: no journal (WAL restored below)
        conn.execute("PRAGMA synchronous=OFF")
        conn.execute("PRAGMA cache_size=-2000000")
        indexes = conn.execute(
            "SELECT name, sql FROM sqlite_master WHERE type='index' AND sql IS NOT NULL"
            " AND tbl_name IN ('records', 'jobs', 'scores')").fetchall()
        for name, _ in indexes:
            conn.execute(f"DROP INDEX {name}")
        rc, sc = (REC_V3, SCO_V3) if v3 else (REC_V2, SCO_V2)
        ins_r = f"INSERT INTO records ({','.join(rc)}) VALUES ({','.join('?' * len(rc))})"
        ins_s = f"INSERT INTO scores ({','.join(sc)}) VALUES ({','.join('?' * len(sc))})"
        ins_j = f"INSERT INTO jobs ({','.join(JOB)}) VALUES ({','.join('?' * len(JOB))})"
        conn.executemany("INSERT OR REPLACE INTO metrics (metric, version, kind, score_names,"
                         " higher_is_better, threshold, description, is_binary, updated_at)"
                         " VALUES (?,?,?,?,?,?,?,?,?)",
                         [(*m, time.time()) for m in METRICS_ROWS])
        conn.execute("INSERT OR REPLACE INTO counters (name, value) VALUES"
                     " ('records_dropped', 0)")
        n, next_id = 0, 1
        for chunk in gen:
            recs, jobs, scores = rows_of(chunk, next_id, v3, seg_of)
            conn.execute("BEGIN")
            conn.executemany(ins_r, recs)
            conn.executemany(ins_j, jobs)
            conn.executemany(ins_s, scores)
            if delta_factory is not None:
                d = delta_factory()
                add_to_delta(d, chunk, seg_of)
                d.write(conn)
            conn.execute("COMMIT")
            n += len(chunk)
            next_id += len(jobs)
        for _, sql in indexes:
            conn.execute(sql)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.close()
        return n


class PostgresBackend(Backend):
    name = "postgres"

    def __init__(self, workdir: Path, url: str) -> None:
        super().__init__(workdir)
        self.admin = url

    def db(self, label: str) -> str:
        from urllib.parse import urlsplit, urlunsplit

        return urlunsplit(urlsplit(self.admin)._replace(path=f"/{label}"))

    def _name(self, db: str) -> str:
        from urllib.parse import urlsplit

        return urlsplit(db).path.lstrip("/")

    def _admin(self, sql: str) -> None:
        import psycopg

        with psycopg.connect(self.admin, autocommit=True) as c:
            c.execute(sql)  # type: ignore[arg-type]

    def prepare_empty(self, db: str) -> None:
        self.drop(db)
        self._admin(f'CREATE DATABASE "{self._name(db)}" TEMPLATE template0')

    def drop(self, db: str) -> None:
        self._admin(f'DROP DATABASE IF EXISTS "{self._name(db)}" WITH (FORCE)')

    def copy(self, src: str, dst: str) -> None:
        self.drop(dst)
        self._admin(f'CREATE DATABASE "{self._name(dst)}" TEMPLATE "{self._name(src)}"')

    def size(self, db: str) -> int:
        import psycopg

        with psycopg.connect(self.admin, autocommit=True) as c:
            row = c.execute("SELECT pg_database_size(%s)", (self._name(db),)).fetchone()
        return int(row[0]) if row else 0

    def load(self, db: str, gen: Iterator[list[Rec]], v3: bool,
             seg_of: dict[tuple[str, str, str], int], delta_factory: Callable[[], Any] | None,
             store: Any = None) -> int:
        import psycopg

        from tracescore.store.rollup import QmarkConnection

        conn = psycopg.connect(db, autocommit=True)
        idx = conn.execute(
            "SELECT i.indexname, i.indexdef FROM pg_indexes i WHERE i.schemaname ="
            " current_schema() AND i.tablename IN ('records', 'jobs', 'scores') AND NOT"
            " EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conname = i.indexname)").fetchall()
        for name, _ in idx:
            conn.execute(f'DROP INDEX "{name}"')  # type: ignore[arg-type]
        rc, sc = (REC_V3, SCO_V3) if v3 else (REC_V2, SCO_V2)
        conn.execute("INSERT INTO metrics (metric, version, kind, score_names, higher_is_better,"
                     " threshold, description, is_binary, updated_at) VALUES "
                     + ",".join(["(%s,%s,%s,%s,%s,%s,%s,%s,%s)"] * len(METRICS_ROWS))
                     + " ON CONFLICT (metric) DO NOTHING",
                     [v for m in METRICS_ROWS for v in (*m, time.time())])
        conn.execute("INSERT INTO counters (name, value) VALUES ('records_dropped', 0)"
                     " ON CONFLICT (name) DO NOTHING")
        n, next_id = 0, 1
        for chunk in gen:
            recs, jobs, scores = rows_of(chunk, next_id, v3, seg_of)
            with conn.transaction():
                cur = conn.cursor()
                for table, cols, rows in (("records", rc, recs), ("jobs", JOB, jobs),
                                          ("scores", sc, scores)):
                    with cur.copy(f"COPY {table} ({','.join(cols)}) FROM STDIN") as cp:  # type: ignore[arg-type]
                        for row in rows:
                            cp.write_row(row)
                if delta_factory is not None:
                    d = delta_factory()
                    add_to_delta(d, chunk, seg_of)
                    d.write(QmarkConnection(conn))
            n += len(chunk)
            next_id += len(jobs)
        for _, sql in idx:
            conn.execute(sql)  # type: ignore[arg-type]
        for table, col in (("scores", "score_id"), ("jobs", "job_id")):
            conn.execute(f"SELECT setval(pg_get_serial_sequence('{table}', '{col}'),"  # type: ignore[arg-type]
                         f" (SELECT coalesce(max({col}), 1) FROM {table}))")
        # A database in service has been vacuumed and analysed by autovacuum: do it now, so
        # plans and index-only scans are those of a steady state.
        conn.execute("VACUUM ANALYZE")
        conn.close()
        return n


def start_pg_cluster(workdir: Path) -> tuple[str, Callable[[], None]]:
    """A throwaway cluster as tests/pg.py starts one (``initdb`` + ``pg_ctl`` on a free port,
    as the ``postgres`` user when root), with its data under ``workdir`` and memory settings
    for tables of millions of rows (shared_buffers 2 GB, work_mem 64 MB)."""
    import glob

    def find(name: str) -> str:
        found = shutil.which(name) or next(iter(sorted(
            glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)), None)
        if not found:
            raise FileNotFoundError(f"{name} not found: apt-get install -y postgresql")
        return found

    initdb, pg_ctl = find("initdb"), find("pg_ctl")
    base = Path(tempfile.mkdtemp(prefix="pg-", dir=workdir))
    data = base / "data"
    prefix: list[str] = []
    if os.geteuid() == 0:
        shutil.chown(base, "postgres", "postgres")
        prefix = ["runuser", "-u", "postgres", "--"]
    base.chmod(0o755)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    subprocess.run([*prefix, initdb, "-D", str(data), "--auth=trust", "-U", "postgres",
                    "-E", "UTF8", "--no-sync"], stdout=subprocess.DEVNULL,
                   stderr=subprocess.PIPE, check=True)
    opts = (f"-p {port} -k {base} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off -c max_connections=50 "
            "-c shared_buffers=2GB -c work_mem=64MB -c maintenance_work_mem=1GB "
            "-c max_wal_size=16GB -c checkpoint_timeout=30min")
    subprocess.run([*prefix, pg_ctl, "-D", str(data), "-o", opts, "-l", str(base / "log"),
                    "-w", "start"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                   check=True)

    def stop() -> None:
        subprocess.run([*prefix, pg_ctl, "-D", str(data), "-m", "fast", "stop"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        shutil.rmtree(base, ignore_errors=True)

    return f"postgresql://postgres@127.0.0.1:{port}/postgres", stop


# -- processes ----------------------------------------------------------------------------------
@dataclass
class Tree:
    """A tracescore source tree, run as ``python -m tracescore.cli`` with it on PYTHONPATH."""

    label: str
    path: Path

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TRACESCORE_")}
        env["PYTHONPATH"] = str(self.path)
        return env

    def cli(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "tracescore.cli", *args]


@dataclass
class Run:
    wall: float
    cpu: float
    rc: int


def run_process(cmd: Sequence[str], env: dict[str, str], cwd: Path,
                ok: Sequence[int] = (0,)) -> Run:
    """One whole process: wall time (monotonic, around spawn → reap) and the child's own
    user + system CPU (``wait4``). Its output is thrown away; a bad exit code raises."""
    with tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=err,
                             stdin=subprocess.DEVNULL)
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        if p.returncode not in ok:
            err.seek(0)
            raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}: "
                               f"{err.read().decode(errors='replace')[-2000:]}")
    return Run(wall, ru.ru_utime + ru.ru_stime, p.returncode)


def output_of(cmd: Sequence[str], env: dict[str, str], cwd: Path) -> str:
    r = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True)
    if r.returncode not in (0, 1):
        raise RuntimeError(f"{' '.join(cmd)} exited {r.returncode}: {r.stderr[-2000:]}")
    return r.stdout


@dataclass
class Pair:
    label: str
    a: list[Run] = field(default_factory=list)
    b: list[Run] = field(default_factory=list)
    load: tuple[float, float] = (0.0, 0.0)

    def ratios(self) -> list[float]:
        return [x.wall / y.wall for x, y in zip(self.a, self.b)]


def pair(label: str, a: tuple[list[str], dict[str, str], Sequence[int]],
         b: tuple[list[str], dict[str, str], Sequence[int]] | None, cwd: Path, runs: int,
         warmup: int) -> Pair:
    """A and B alternately (A B B A A B …: a drift in the machine's speed hits both), after
    ``warmup`` unmeasured runs of each."""
    out = Pair(label, load=(load_average()[0], 0.0))
    for _ in range(warmup):
        run_process(a[0], a[1], cwd, a[2])
        if b is not None:
            run_process(b[0], b[1], cwd, b[2])
    for i in range(runs):
        order = (a, b) if i % 2 == 0 else (b, a)
        for which in order:
            if which is None:
                continue
            r = run_process(which[0], which[1], cwd, which[2])
            (out.a if which is a else out.b).append(r)
    out.load = (out.load[0], load_average()[0])
    return out


def mmm(xs: Sequence[float]) -> str:
    """median (min…max)."""
    if not xs:
        return "—"
    return f"{statistics.median(xs):.2f} ({min(xs):.2f}…{max(xs):.2f})"


# -- in-process: the query layer, every statement timed and explained --------------------------
@dataclass
class Stmt:
    sql: str
    args: tuple[Any, ...]
    db: str = ""
    seconds: float = 0.0
    calls: int = 0
    rows: int = 0


class _Rows:
    """A fetched result (the statement was timed up to its last row)."""

    def __init__(self, rows: list[Any], description: Any, rowcount: int) -> None:
        self._rows = rows
        self._i = 0
        self.description = description
        self.rowcount = rowcount

    def fetchone(self) -> Any:
        if self._i >= len(self._rows):
            return None
        self._i += 1
        return self._rows[self._i - 1]

    def fetchall(self) -> list[Any]:
        rest = self._rows[self._i:]
        self._i = len(self._rows)
        return rest

    def fetchmany(self, size: int = 1) -> list[Any]:
        rest = self._rows[self._i:self._i + size]
        self._i += len(rest)
        return rest

    def __iter__(self) -> Iterator[Any]:
        return iter(self.fetchall())

    def close(self) -> None:
        pass


class Tracer:
    """Times every statement the readers run (execute through the last row), per SQL text.

    SQLite: ``sqlite3.connect`` returns a connection subclass while tracing; PostgreSQL:
    :class:`tracescore.store.compat.PgConnection.execute` is wrapped. Only readers are traced
    (the store's own writes go through other objects)."""

    def __init__(self) -> None:
        self.stmts: dict[str, Stmt] = {}
        self.on = False

    def note(self, sql: str, args: Sequence[Any], seconds: float, rows: int) -> None:
        if not self.on:
            return
        s = self.stmts.get(sql)
        if s is None:
            s = self.stmts[sql] = Stmt(sql, tuple(args))
        s.seconds += seconds
        s.calls += 1
        s.rows += rows
        if seconds > 0 and s.calls > 1 and seconds >= s.seconds - seconds:
            s.args = tuple(args)  # keep the slowest call's arguments for the plan

    def install(self) -> Callable[[], None]:
        """Trace the readers' connections (``tracescore.read.db`` and
        ``tracescore.store.compat``, where ``open_db`` and ``connect_reader`` connect); returns
        the function that undoes it. The store's own connections are left alone."""
        import sqlite3
        import types

        import tracescore.read.db as db_mod
        from tracescore.store import compat

        tracer = self

        class Conn(sqlite3.Connection):
            def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:  # type: ignore[override]
                t0 = time.perf_counter()
                cur = super().execute(sql, params)
                if cur.description is None:
                    return cur
                rows = cur.fetchall()
                tracer.note(sql, params, time.perf_counter() - t0, len(rows))
                return _Rows(rows, cur.description, cur.rowcount)

        class Sqlite(types.ModuleType):
            def __getattr__(self, name: str) -> Any:
                return getattr(sqlite3, name)

            @staticmethod
            def connect(*a: Any, **kw: Any) -> Any:
                kw.setdefault("factory", Conn)
                return sqlite3.connect(*a, **kw)

        proxy = Sqlite("sqlite3")
        saved = (db_mod.sqlite3, compat.sqlite3, compat.PgConnection.execute)
        db_mod.sqlite3 = proxy  # type: ignore[assignment]
        compat.sqlite3 = proxy  # type: ignore[assignment]
        real_exec = compat.PgConnection.execute

        def pg_execute(self: Any, sql: str, params: Sequence[Any] = ()) -> Any:
            t0 = time.perf_counter()
            cur = real_exec(self, sql, params)
            if not cur.description:
                return cur
            rows = cur.fetchall()
            tracer.note(sql, params, time.perf_counter() - t0, len(rows))
            return _Rows(rows, cur.description, cur.rowcount)

        compat.PgConnection.execute = pg_execute  # type: ignore[method-assign]

        def undo() -> None:
            db_mod.sqlite3, compat.sqlite3 = saved[0], saved[1]  # type: ignore[assignment]
            compat.PgConnection.execute = saved[2]  # type: ignore[method-assign]

        return undo


RAW = ("records", "scores", "jobs")


def explain(db: str, sql: str, args: Sequence[Any]) -> str:
    """The statement's plan, one line: SQLite ``EXPLAIN QUERY PLAN`` / PostgreSQL ``EXPLAIN``."""
    if db.startswith("postgresql://"):
        from tracescore.store.compat import PgConnection

        c = PgConnection(db)
        try:
            rows = c.conn.execute("EXPLAIN " + _translate(sql), tuple(args)).fetchall()
            return " / ".join(r[0].strip() for r in rows)[:400]
        finally:
            c.close()
    import sqlite3

    c = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = c.execute("EXPLAIN QUERY PLAN " + sql, tuple(args)).fetchall()
        return " / ".join(str(r[-1]) for r in rows)[:400]
    finally:
        c.close()


def _translate(sql: str) -> str:
    from tracescore.store.compat import translate

    return translate(sql)


def scans_raw(plan: str) -> bool:
    """A plan that reads a whole raw table (records/scores/jobs, aliases r/s/j): SQLite's
    ``SCAN`` (also ``SCAN … USING INDEX``: a whole index, not a range), PostgreSQL's
    ``Seq Scan``."""
    p = plan.lower()
    if re.search(r"\bscan (records|scores|jobs|r|s|j)\b", p):
        return True
    return bool(re.search(r"seq scan on (records|scores|jobs)\b", p))


def inprocess(db: str, native: bool, reps: int, now: float, tracer: Tracer,
              monitors_file: Path) -> tuple[list[list[Any]], list[Stmt]]:
    """Median wall time of each query-layer step (``reps`` runs), and the statements of the
    last run of each with their times."""
    from tracescore.monitor.config import load_monitors
    from tracescore.monitor.evaluate import Evaluator
    from tracescore.reports.compare import build_comparison
    from tracescore.reports.report import build_page, build_report
    from tracescore.reports.trend import build_trend

    steps: list[tuple[str, Callable[[Any], Any]]] = [
        ("build_report (all time)", lambda c: build_report(c, worst=3)),
        ("build_report (--since 1d)", lambda c: build_report(c, since=now - DAY, worst=3)),
        ("HTML data: build_report + build_page + build_trend",
         lambda c: (build_page(c, build_report(c, worst=3)), build_trend(c))),
        ("build_comparison (last 1d vs 7d before)",
         lambda c: build_comparison(c, by="time", current_window=DAY,
                                    baseline_window=7 * DAY)),
    ]
    if native:
        steps.append(("build_comparison (by release)",
                      lambda c: build_comparison(c, by="release")))
        steps.append(("build_comparison (release=v2 vs v1, as check --compare)",
                      lambda c: build_comparison(c, by="release", current="v2",
                                                 baseline="v1")))
    monitors = load_monitors(monitors_file)

    def evaluate(_c: Any) -> Any:
        ev = Evaluator(db, monitors)
        try:
            return ev.run_once(save=False)
        finally:
            ev.close()

    steps.append(("monitor evaluation, window 1d (as check --no-notify)", evaluate))
    out: list[list[Any]] = []
    slow: list[Stmt] = []
    undo = tracer.install()
    try:
        _steps(db, steps, reps, tracer, out, slow)
    finally:
        undo()
    return out, slow


def _steps(db: str, steps: Sequence[tuple[str, Callable[[Any], Any]]], reps: int, tracer: Tracer,
           out: list[list[Any]], slow: list[Stmt]) -> None:
    from tracescore.read.db import open_db

    for label, fn in steps:
        times: list[float] = []
        for i in range(reps):
            last = i == reps - 1
            tracer.stmts = {}
            tracer.on = last
            conn = open_db(db)
            try:
                l0 = load_average()[0]
                t0 = time.perf_counter()
                fn(conn)
                times.append(time.perf_counter() - t0)
            finally:
                tracer.on = False
                conn.close()
        stmts = sorted(tracer.stmts.values(), key=lambda s: -s.seconds)
        sql_s = sum(s.seconds for s in stmts)
        top = stmts[0] if stmts else None
        out.append([label, statistics.median(times) * 1000, min(times) * 1000,
                    max(times) * 1000, sum(s.calls for s in stmts), sql_s * 1000,
                    (top.seconds * 1000 if top else 0.0), f"{l0:.1f}"])
        for s in stmts:
            if s.seconds >= 0.02:
                s.sql = f"[{label}] {s.sql}"
                s.db = db
                slow.append(s)


def import_profile(tree: Tree, args: list[str], cwd: Path) -> list[tuple[str, float]]:
    """Seconds of imports of one CLI process, per top-level package (``-X importtime``)."""
    r = subprocess.run([sys.executable, "-X", "importtime", "-m", "tracescore.cli", *args],
                       env=tree.env(), cwd=cwd, capture_output=True, text=True)
    per: dict[str, float] = {}
    for line in r.stderr.splitlines():
        m = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|(\s*)(\S+)", line)
        if not m:
            continue
        pkg = m.group(4).split(".")[0]
        per[pkg] = per.get(pkg, 0.0) + int(m.group(1)) / 1e6
    return sorted(per.items(), key=lambda kv: -kv[1])


# -- building the databases ---------------------------------------------------------------------
def create_schema(tree: Tree, db: str, cwd: Path) -> None:
    """An empty database with ``tree``'s schema (its own ``open_store``, in a subprocess)."""
    code = ("import sys; from tracescore.store import open_store; "
            "s = open_store(sys.argv[1]); s.close()")
    subprocess.run([sys.executable, "-c", code, db], env=tree.env(), cwd=cwd, check=True)


def migrate(tree: Tree, db: str, cwd: Path) -> tuple[float, float]:
    """Open ``db`` with ``tree`` (its migration runs): (whole-process s, in-process s)."""
    code = ("import sys, time; t = time.perf_counter(); from tracescore.store import "
            "open_store; s = open_store(sys.argv[1]); s.close(); "
            "print(time.perf_counter() - t)")
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-c", code, db], env=tree.env(), cwd=cwd, check=True,
                       capture_output=True, text=True)
    return time.perf_counter() - t0, float(r.stdout.strip().splitlines()[-1])


def native_segments(store: Any, now: float, days: float) -> dict[tuple[str, str, str], int]:
    """The 8 segments (release × environment × model) through the store's resolver, v1's
    first seen at the start, v2's at the release switch."""
    from tracescore.store.segments import DEFAULT_LIMIT, SegmentResolver

    start = now - days * DAY
    out: dict[tuple[str, str, str], int] = {}
    res = SegmentResolver()
    for rel, seen in (("v1", start), ("v2", start + days * DAY * 2 / 3)):
        keys = [(rel, e, m) for e in ("production", "staging") for m in ("gpt-4o", "gpt-4o-mini")]
        dims = [{"release": r, "environment": e, "model": m} for r, e, m in keys]
        for k, (sid, _) in zip(keys, res.resolve_dims(store, dims, DEFAULT_LIMIT, seen)):
            out[k] = sid
    return out


def write_path(db: str, n: int, days: float, now: float, batch: int = 256) -> dict[str, Any]:
    """``n`` records through the store's own write path (``write_batch`` with a
    ``SegmentSpec``, ``lease_jobs``, ``complete_jobs``), with the store modules' clock
    replaced; returns the rate and whether the rollups equal a ``Delta`` over the raw rows."""
    import tracescore.store.postgres as pg_mod
    import tracescore.store.sqlite as sqlite_mod
    from tracescore.record import Context, RagRecord, TokenUsage
    from tracescore.sampling import Decision
    from tracescore.score import Score
    from tracescore.store import NewJob, open_store
    from tracescore.store.rollup import Delta
    from tracescore.store.segments import SegmentSpec

    class Clock:
        def __init__(self) -> None:
            self.t = 0.0

        def time(self) -> float:
            return self.t

        def __getattr__(self, name: str) -> Any:
            return getattr(time, name)

    clock = Clock()
    saved = (sqlite_mod.time, pg_mod.time)
    sqlite_mod.time = clock  # type: ignore[assignment]
    pg_mod.time = clock  # type: ignore[assignment]
    store = open_store(db)
    t0 = time.perf_counter()
    try:
        from tracescore.metrics.base import Metric

        class Decl(Metric):
            kind = "judge"
            version = "1"
            requires = frozenset()

            def __init__(self, name: str, binary: bool, threshold: float | None) -> None:
                self.name, self.binary, self.threshold = name, binary, threshold
                self.higher_is_better = True
                self.description = name

            def score(self, record: RagRecord) -> Any:  # pragma: no cover - never scored
                raise NotImplementedError

        store.register_metrics([Decl("faithfulness", False, 0.5), Decl("grounded", True, None),
                                Decl("answer_relevance", False, None)])
        for chunk in chunks(records(n, days, now), batch):
            groups: dict[tuple[str, str], list[Rec]] = {}
            for r in chunk:
                groups.setdefault((r.release, r.env), []).append(r)
            for (rel, env), recs in groups.items():
                clock.t = recs[-1].t
                items = []
                for r in recs:
                    ctxs = tuple(Context(text=c["text"], id=c["id"], score=c["score"],
                                         metadata=c["metadata"], source=c["source"])
                                 for c in json.loads(r.contexts))
                    rec = RagRecord(trace_id=r.trace, span_id=r.span, query=r.query,
                                    answer=r.answer, contexts=ctxs, model=r.model,
                                    metadata={"route": "faq"}, error=r.error,
                                    usage=TokenUsage(r.tin, r.tout),
                                    end_time_ns=int(r.t * 1e9),
                                    start_time_ns=int((r.t - r.latency / 1000) * 1e9))
                    items.append((rec, Decision(r.u, SCORES)))
                store.write_batch(items, [NewJob(rec.record_id, m, "1") for rec, _ in items
                                          for m in SCORES], None,
                                  segments=SegmentSpec(release=rel, environment=env))
                by_id = {f"{r.trace}-{r.span}": r for r in recs}
                clock.t = max(s[5] for r in recs for s in r.scores)
                jobs = store.lease_jobs("bench", len(recs) * 3, 600.0, list(SCORES))
                done = []
                for j in jobs:
                    s = next(x for x in by_id[j.record_id].scores if x[0] == j.metric)
                    if s[3] == "error":
                        sc = Score.failed(s[0], s[4] or "", metric=s[0])
                    else:
                        sc = Score(s[0], s[1], label=s[2], metric=s[0])
                    done.append((j, [sc]))
                store.complete_jobs("bench", done, "span",
                                    judge_models={j.job_id: JUDGE for j, _ in done})
        seconds = time.perf_counter() - t0
        # the rollups the write path kept == the store's Delta over the raw rows
        conn = store.conn
        q = (lambda sql: conn.execute(sql).fetchall()) if store.dialect == "sqlite" else (
            lambda sql: conn.execute(sql).fetchall())
        d = Delta()
        for row in q("SELECT created_at, seg_id, sampled, text_kept, error, input_tokens,"
                     " output_tokens, latency_ms FROM records"):
            d.add_record(*row)
        for row in q("SELECT created_at, name, seg_id, metric_version, judge_model, metric,"
                     " value, label, status FROM scores"):
            d.add_score(*row)
        got_r = {(int(r[0]), int(r[1])): [int(x) for x in r[2:10]] + [round(float(r[10]), 3)]
                 for r in q("SELECT hour, seg_id, records, sampled, compact, errors, with_usage,"
                            " input_tokens, output_tokens, latency_n, latency_ms_sum FROM"
                            " hourly_records")}
        want_r = {k: [int(x) for x in a[:8]] + [round(float(a[8]), 3)]
                  for k, a in d.records.items()}
        got_s = {(int(r[0]), r[1], int(r[2]), r[3], r[4]): (int(r[5]), round(float(r[6]), 6),
                                                            int(r[7]), int(r[8]))
                 for r in q("SELECT hour, name, seg_id, metric_version, judge_model, n_ok,"
                            " value_sum, n_fail, n_error FROM hourly_scores")}
        want_s = {k: (int(a[1]), round(float(a[2]), 6), int(a[5]), int(a[6]))
                  for k, a in d.scores.items()}
        got_b = {(int(r[0]), r[1], int(r[2]), int(r[3]), r[4]): int(r[5])
                 for r in q("SELECT hour, name, seg_id, bin, label, n FROM hourly_bins")}
        segs = q("SELECT count(*) FROM segments")[0][0]
        return {"n": n, "seconds": seconds, "rate": n / seconds,
                "rollups_equal": got_r == want_r and got_s == want_s and got_b == d.bins,
                "segments": int(segs)}
    finally:
        store.close()
        sqlite_mod.time, pg_mod.time = saved  # type: ignore[assignment]


def rollup_rows(db: str) -> dict[str, int]:
    """Rows of the rollup tables (what a full-history read aggregates)."""
    from tracescore.store.compat import connect_reader

    c = connect_reader(db)
    try:
        return {t: int(c.execute(f"SELECT count(*) FROM {t}").fetchone()[0])
                for t in ("hourly_records", "hourly_scores", "hourly_bins", "hourly_skips",
                          "segments")}
    finally:
        c.close()


def totals(report_json: str) -> dict[str, Any]:
    """Records, and per score (count, mean, errors) of a ``report --json`` (both trees)."""
    j = json.loads(report_json)
    out: dict[str, Any] = {"records": j.get("records")}
    for name, m in sorted((j.get("metrics") or {}).items()):
        out[name] = (m.get("count"), round(m.get("mean") or 0.0, 9), m.get("errors"),
                     m.get("fail_rate"))
    return out


# -- one (backend, N) ---------------------------------------------------------------------------
def _row(label: str, p: Pair) -> list[Any]:
    ratio = statistics.median(p.ratios()) if p.b else float("nan")
    return [label, mmm([r.wall for r in p.a]), mmm([r.wall for r in p.b]),
            f"{ratio:.2f}" if p.b else "—", f"{statistics.median([r.cpu for r in p.a]):.2f}",
            f"{p.load[0]:.1f}→{p.load[1]:.1f}"]


def _slow_rows(slow: list[Stmt], top: int) -> list[list[Any]]:
    """The slowest statements (one row per SQL text) with their plans."""
    seen: set[str] = set()
    out = []
    for s in sorted(slow, key=lambda s: -s.seconds):
        step, core = s.sql[1:].split("] ", 1)
        if core in seen:
            continue
        seen.add(core)
        plan = explain(s.db, core, s.args)
        out.append([step, f"{s.seconds * 1000:.0f}", s.calls, s.rows,
                    ("**raw scan** " if scans_raw(plan) else "") + plan,
                    re.sub(r"\s+", " ", core)[:300]])
        if len(out) >= top:
            break
    return out


def sequential_base(be: Backend, n: int, a: argparse.Namespace, new: Tree, base: Tree,
                    v2: str, cwd: Path, tracer: Tracer, monitors: Path,
                    t_base: dict[str, Any], res: dict[str, Any], build: list[list[Any]],
                    rows: list[list[Any]], inner_rows: list[list[Any]],
                    mig_slow: list[list[Any]], base_runs: dict[str, list[Run]],
                    checks: dict[str, bool]) -> None:
    """--sequential: time the base commands alone on v2, then migrate v2 in place (timed) and
    time this tree's ``report`` on it, then drop it: one database on disk at a time."""
    html_base = cwd / "base.html"
    for key, label, cmd in (
            ("report", "base `report`", base.cli("report", "--db", v2)),
            ("html", "base `report --html`", base.cli("report", "--html", str(html_base),
                                                      "--db", v2)),
            ("since", "base `report --since 1d`", base.cli("report", "--since", "1d", "--db",
                                                           v2))):
        p = pair(label, (cmd, base.env(), (0,)), None, cwd, a.runs, a.warmup)
        base_runs[key] = p.a
        print(f"  {label}: {mmm([r.wall for r in p.a])}", flush=True)
    res["base_runs"] = {k: [r.wall for r in v] for k, v in base_runs.items()}
    free = shutil.disk_usage(a.workdir).free
    if free < 1.5 * be.size(v2):
        print(f"  migration skipped: {free / 1e9:.0f} GB free", flush=True)
        res["migration_s"] = "skipped: disk"
    else:
        l0 = load_average()[0]
        whole, inner = migrate(new, v2, cwd)
        build.append(["v3 migrated from v2 in place (`open_store`: the one-time migration)",
                      f"{whole:.1f} (in process {inner:.1f})", round(n / inner),
                      round(be.size(v2) / n), f"{l0:.1f}"])
        res["migration_s"] = {"process": whole, "in_process": inner, "in_place": True}
        print(f"  migration (in place): {whole:.1f} s (in process {inner:.1f} s)", flush=True)
        t_mig = totals(output_of(new.cli("report", "--json", "--db", v2), new.env(), cwd))
        checks["migrated v3 == base"] = t_mig == t_base
        if t_mig != t_base:
            print(f"  DIFFERENT totals: base {t_base}\n  migrated {t_mig}")
        p = pair("`report` on the migrated v3 †", (new.cli("report", "--db", v2), new.env(),
                                                   (0,)), None, cwd, a.runs, a.warmup)
        row = _row(p.label, p)
        med = statistics.median([r.wall for r in base_runs["report"]])
        row[2] = mmm([r.wall for r in base_runs["report"]])
        row[3] = f"{statistics.median([x.wall / med for x in p.a]):.2f}"
        rows.append(row)
        print(f"  {p.label}: {row[1]}", flush=True)
        more, slow2 = inprocess(v2, False, a.reps, time.time(), tracer, monitors)
        inner_rows += [[f"{r[0]} — migrated v3", *r[1:]] for r in more]
        for st in slow2:
            st.sql = st.sql.replace("] ", " — migrated v3] ", 1)
        mig_slow += _slow_rows(slow2, a.top)
    if not a.keep:
        be.drop(v2)


def one_size(be: Backend, n: int, a: argparse.Namespace, new: Tree, base: Tree | None,
             cwd: Path, tracer: Tracer, results: dict[str, Any]) -> None:
    """Build the databases of one (backend, N), check them, time them; in an order that
    keeps at most two of the three databases on disk at once (10M rows are ~20 GB each)."""
    from tracescore.store import open_store
    from tracescore.store.rollup import Delta

    key = f"{be.name}/{n}"
    res: dict[str, Any] = results.setdefault(key, {})
    now = time.time()
    tag = f"rs_{n}"
    v2, mig, v3 = be.db(f"{tag}_v2"), be.db(f"{tag}_v3mig"), be.db(f"{tag}_v3")
    build: list[list[Any]] = []
    rows: list[list[Any]] = []
    inner_rows: list[list[Any]] = []
    mig_slow: list[list[Any]] = []
    monitors = cwd / "monitors.toml"
    monitors.write_text(MONITORS_TOML)
    yard = (base.cli("report", "--db", v2), base.env(), (0,)) if base is not None else None
    t_base: dict[str, Any] | None = None
    checks: dict[str, bool] = {}
    base_runs: dict[str, list[Run]] = {}  # --sequential: the base commands, timed alone
    print(f"\n## {be.name}, N = {n:,} records over {a.days:g} days\n", flush=True)

    if base is not None:
        # 1. v2, as today's code wrote it
        be.prepare_empty(v2)
        create_schema(base, v2, cwd)
        l0 = load_average()[0]
        t0 = time.perf_counter()
        be.load(v2, chunks(records(n, a.days, now), CHUNK), False, {}, None)
        s = time.perf_counter() - t0
        build.append(["v2 (base schema), bulk SQL", f"{s:.1f}", round(n / s),
                      round(be.size(v2) / n), f"{l0:.1f}"])
        print(f"  v2 written: {s:.0f} s, {be.size(v2) / 1e9:.2f} GB", flush=True)
        t_base = totals(output_of(base.cli("report", "--json", "--db", v2), base.env(), cwd))
        if a.sequential:
            sequential_base(be, n, a, new, base, v2, cwd, tracer, monitors, t_base, res,
                            build, rows, inner_rows, mig_slow, base_runs, checks)

        # 2. a copy of it, migrated by this tree (then dropped: disk); a copy and the
        # migration's journal (it rewrites every row in one transaction) need ~2x its size
        free = shutil.disk_usage(a.workdir).free
        if a.migrate_last or a.sequential:
            pass  # v2 itself is migrated: once every timing is done (step 4) / already
        elif free < 3.2 * be.size(v2):
            print(f"  migration skipped: {free / 1e9:.0f} GB free, the copy and its migration"
                  f" need ~{3.2 * be.size(v2) / 1e9:.0f} GB (try --migrate-last)", flush=True)
            res["migration_s"] = "skipped: disk"
        else:
            be.copy(v2, mig)
            l0 = load_average()[0]
            whole, inner = migrate(new, mig, cwd)
            build.append(["v3 migrated from v2 (`open_store`: the one-time migration)",
                          f"{whole:.1f} (in process {inner:.1f})", round(n / inner),
                          round(be.size(mig) / n), f"{l0:.1f}"])
            res["migration_s"] = {"process": whole, "in_process": inner}
            print(f"  migration: {whole:.1f} s (in process {inner:.1f} s)", flush=True)
            t_mig = totals(output_of(new.cli("report", "--json", "--db", mig), new.env(), cwd))
            checks["migrated v3 == base"] = t_mig == t_base
            if t_mig != t_base:
                print(f"  DIFFERENT totals: base {t_base}\n  migrated {t_mig}")
            p = pair("`report` on the migrated v3", (new.cli("report", "--db", mig),
                                                     new.env(), (0,)), yard, cwd, a.runs,
                     a.warmup)
            rows.append(_row(p.label, p))
            print(f"  {p.label}: {rows[-1][1]} vs {rows[-1][2]}", flush=True)
            more, slow2 = inprocess(mig, False, a.reps, time.time(), tracer, monitors)
            inner_rows += [[f"{r[0]} — migrated v3", *r[1:]] for r in more]
            for st in slow2:
                st.sql = st.sql.replace("] ", " — migrated v3] ", 1)
            mig_slow = _slow_rows(slow2, a.top)  # (plans while the database is there)
            if not a.keep:
                be.drop(mig)

    # 3. native v3: segments, rollups kept on write
    be.prepare_empty(v3)
    create_schema(new, v3, cwd)
    store = open_store(v3)
    try:
        seg_of = native_segments(store, now, a.days)
    finally:
        store.close()
    l0 = load_average()[0]
    t0 = time.perf_counter()
    be.load(v3, chunks(records(n, a.days, now), CHUNK), True, seg_of, Delta)
    s = time.perf_counter() - t0
    build.append(["v3 native (segments; rollups by the store's `Delta`), bulk SQL", f"{s:.1f}",
                  round(n / s), round(be.size(v3) / n), f"{l0:.1f}"])
    print("\nDatabases (s to build, records/s, bytes per record on disk, load):\n")
    print(md_table(["database", "s", "records/s", "bytes/record", "load"], build))
    res["build"] = build
    res["rollup_rows"] = rollup_rows(v3)
    print("\nRollup rows (native v3): " + ", ".join(f"{k} {v:,}"
                                                   for k, v in res["rollup_rows"].items()))
    if t_base is not None:
        t_new = totals(output_of(new.cli("report", "--json", "--db", v3), new.env(), cwd))
        checks["native v3 == base"] = t_new == t_base
        if t_new != t_base:
            print(f"  DIFFERENT totals: base {t_base}\n  native {t_new}")
        print("\nSame totals as the base report (records; per score count, mean, errors, fail "
              "rate): " + ", ".join(f"{k}: {'yes' if v else 'NO'}" for k, v in checks.items()))
        res["same_totals"] = checks

    # -- whole processes ------------------------------------------------------------------------
    html_new, html_base = cwd / "new.html", cwd / "base.html"
    B = tuple[list[str], dict[str, str], Sequence[int]]
    bhtml: B | None = ((base.cli("report", "--html", str(html_base), "--db", v2), base.env(),
                        (0,)) if base else None)
    bsince: B | None = ((base.cli("report", "--since", "1d", "--db", v2), base.env(), (0,))
                        if base else None)
    cmds: list[tuple[str, B, B | None, str]] = [
        ("`report`", (new.cli("report", "--db", v3), new.env(), (0,)), yard, "report"),
        ("`report --html`", (new.cli("report", "--html", str(html_new), "--db", v3),
                             new.env(), (0,)), bhtml, "html"),
        ("`report --since 1d`", (new.cli("report", "--since", "1d", "--db", v3), new.env(),
                                 (0,)), bsince, "since"),
        ("`compare --current 1d --baseline 7d`",
         (new.cli("compare", "--current", "1d", "--baseline", "7d", "--db", v3), new.env(),
          (0,)), yard, "report"),
        ("`compare --by release`", (new.cli("compare", "--by", "release", "--db", v3),
                                    new.env(), (0,)), yard, "report"),
        ("`check --compare release=v2:v1`",
         (new.cli("check", "--compare", "release=v2:v1", "--db", v3), new.env(), (0, 1)),
         yard, "report"),
        ("`check --monitors FILE --no-notify` (reads the whole 1d window each time)",
         (new.cli("check", "--monitors", str(monitors), "--no-notify", "--db", v3), new.env(),
          (0, 1)), yard, "report"),
        ("`check --monitors FILE` (state stored: after the first, only new rows)",
         (new.cli("check", "--monitors", str(monitors), "--db", v3), new.env(), (0, 1)), yard,
         "report"),
    ]
    for label, ca, cb, bkey in cmds:
        if (a.sequential and base_runs) or (a.pair_reports_only and cb is yard
                                            and "report" in base_runs):
            # not paired: compared with the base command's own runs (--sequential: timed
            # before this database was built; --pair-reports-only: in the `report` row)
            p = pair(label, ca, None, cwd, a.runs, a.warmup)
            ref = base_runs.get(bkey, [])
            row = _row(label + (" †" if a.sequential else " \\*"), p)
            if ref:
                med = statistics.median([r.wall for r in ref])
                row[2] = mmm([r.wall for r in ref])
                row[3] = f"{statistics.median([x.wall / med for x in p.a]):.2f}"
            rows.append(row)
        else:
            p = pair(label, ca, cb, cwd, a.runs, a.warmup)
            if cb is yard and "report" not in base_runs and cb is not None:
                base_runs["report"] = list(p.b)
            rows.append(_row(label, p))
        print(f"  {label}: {rows[-1][1]} vs {rows[-1][2]}", flush=True)
    floor = pair("`python -c pass` (interpreter start)",
                 ([sys.executable, "-c", "pass"], new.env(), (0,)), None, cwd, a.runs, 0)
    rows.append(_row(floor.label, floor))
    print(f"\nWhole processes, seconds, median (min…max) of {a.runs} runs each, paired with "
          "the base tree's `report` (for the `report` options: the same options), run "
          "alternately; new/base is the median of the per-pair ratios:\n")
    print(md_table(["command (new tree)", "new s", "base s", "new/base", "new CPU s", "load"],
                   rows))
    if a.pair_reports_only and not a.sequential:
        print("\n\\* not paired (--pair-reports-only): the base `report`'s runs of the `report` "
              "row, and the ratio to their median.")
    if a.sequential:
        print("\n† not paired (--sequential): the base tree's command was timed alone on the v2 "
              "database before the v3 one was built (the two do not fit on disk together); "
              "the ratio is to the median of those runs.")
    res["processes"] = rows

    # -- in process -----------------------------------------------------------------------------
    more, slow = inprocess(v3, True, a.reps, time.time(), tracer, monitors)
    inner_rows = more + inner_rows
    print(f"\nIn process (this tree), ms, median of {a.reps} (min…max); SQL: the statements "
          "of the last run and their summed time (execute through the last row):\n")
    print(md_table(["step", "median ms", "min", "max", "statements", "SQL ms",
                    "slowest statement ms", "load"], inner_rows))
    res["in_process"] = inner_rows
    srows = sorted(_slow_rows(slow, a.top) + mig_slow, key=lambda r: -float(r[1]))[:a.top]
    if srows:
        print("\nStatements of ≥ 20 ms (slowest first; the plan of the slowest call):\n")
        print(md_table(["step", "ms", "calls", "rows", "plan", "SQL"], srows))
    res["slow_statements"] = srows

    # -- imports (on empty databases: the same modules, without minutes of reading) -----------
    empty_new = cwd / "empty_v3.db"
    if not empty_new.exists():
        create_schema(new, str(empty_new), cwd)
    imp = import_profile(new, ["report", "--db", str(empty_new)], cwd)
    print(f"\nImports of one new `report` process: {sum(s for _, s in imp):.2f} s in all "
          "(-X importtime, which inflates them); by package: "
          + ", ".join(f"{k} {v:.2f}" for k, v in imp[:8]))
    res["imports"] = imp
    if base is not None:
        empty_base = cwd / "empty_v2.db"
        if not empty_base.exists():
            create_schema(base, str(empty_base), cwd)
        impb = import_profile(base, ["report", "--db", str(empty_base)], cwd)
        print(f"Imports of one base `report` process: {sum(s for _, s in impb):.2f} s; "
              + ", ".join(f"{k} {v:.2f}" for k, v in impb[:6]))
        res["imports_base"] = impb

    # 4. --migrate-last: v2 migrated in place, once the native database is gone
    if base is not None and a.migrate_last and not a.sequential:
        if not a.keep:
            be.drop(v3)
        free = shutil.disk_usage(a.workdir).free
        if free < 1.5 * be.size(v2):
            print(f"\nmigration skipped: {free / 1e9:.0f} GB free", flush=True)
            res["migration_s"] = "skipped: disk"
        else:
            l0 = load_average()[0]
            whole, inner = migrate(new, v2, cwd)
            t_mig = totals(output_of(new.cli("report", "--json", "--db", v2), new.env(), cwd))
            print(f"\nOne-time migration of the v2 database to v3 (in place), whole process: "
                  f"{whole:.1f} s (in process {inner:.1f} s; {n / inner:,.0f} records/s; load "
                  f"{l0:.1f}); {be.size(v2) / n:,.0f} bytes/record after; same totals as the "
                  f"base report: {'yes' if t_mig == t_base else 'NO'}", flush=True)
            res["migration_s"] = {"process": whole, "in_process": inner, "in_place": True,
                                  "same_totals": t_mig == t_base}
            more, _ = inprocess(v2, False, a.reps, time.time(), tracer, monitors)
            print(md_table(["step (migrated v3)", "median ms", "min", "max", "statements",
                            "SQL ms", "slowest statement ms", "load"], more))
            res["in_process_migrated"] = more
    if not a.keep:
        for d in (v2, mig, v3):
            be.drop(d)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true",
                    help="smoke test: N=20,000, SQLite only, 1 run each, < 60 s")
    ap.add_argument("--n", default="1000000", help="sizes, comma-separated (records)")
    ap.add_argument("--backends", default="sqlite", help="sqlite,postgres")
    ap.add_argument("--days", type=float, default=30.0)
    ap.add_argument("--base", type=Path, default=None,
                    help="the base tree (git worktree of the base commit) for today's report; "
                         "without it only the new tree is timed")
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "read_scale")
    ap.add_argument("--pg-url", default=os.environ.get("TRACESCORE_TEST_POSTGRES_URL"))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--reps", type=int, default=5, help="in-process repetitions")
    ap.add_argument("--top", type=int, default=12, help="slow statements listed")
    ap.add_argument("--write-path", type=int, default=200_000,
                    help="records written through the store's write path (SQLite; 0: skip)")
    ap.add_argument("--keep", action="store_true", help="keep the databases")
    ap.add_argument("--pair-reports-only", action="store_true",
                    help="pair only the `report` rows with the base tree; the other commands "
                         "run alone and are compared with the base `report`'s runs (for sizes "
                         "where the base report takes minutes)")
    ap.add_argument("--sequential", action="store_true",
                    help="one database on disk at a time: the base commands are timed alone on "
                         "v2, which is then migrated in place (timed) and dropped before the "
                         "native v3 is built; the new commands are compared with those runs, "
                         "not paired (for 10M rows on a small disk)")
    ap.add_argument("--migrate-last", action="store_true",
                    help="time the migration on the v2 database itself, after every other "
                         "timing (no copy: for sizes where three databases do not fit on disk)")
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args()
    if a.quick:
        a.n, a.backends, a.runs, a.warmup, a.reps = "20000", "sqlite", 1, 0, 2
        a.write_path = min(a.write_path, 2000)
    a.workdir.mkdir(parents=True, exist_ok=True)
    cwd = a.workdir / "cwd"  # no tracescore-monitors.toml, no tracescore.db here
    cwd.mkdir(exist_ok=True)
    new = Tree("new", REPO)
    base = Tree("base", a.base.resolve()) if a.base else None
    info = machine_info()
    print_machine(info)
    results: dict[str, Any] = {"machine": info, "args": {k: str(v) for k, v in vars(a).items()}}
    tracer = Tracer()
    stop_pg: Callable[[], None] | None = None
    try:
        for bname in a.backends.split(","):
            if bname == "postgres":
                url = a.pg_url
                if not url:
                    url, stop_pg = start_pg_cluster(a.workdir)
                be: Backend = PostgresBackend(a.workdir, url)
            else:
                be = SqliteBackend(a.workdir)
            for n in (int(x) for x in a.n.split(",")):
                one_size(be, n, a, new, base, cwd, tracer, results)
        if a.write_path:
            wp_db = str(a.workdir / "write_path.db")
            SqliteBackend(a.workdir).drop(wp_db)
            wp = write_path(wp_db, a.write_path, a.days, time.time())
            SqliteBackend(a.workdir).drop(wp_db)
            print(f"\nWrite path (write_batch + lease_jobs + complete_jobs, SQLite): "
                  f"{wp['n']:,} records in {wp['seconds']:.1f} s = {wp['rate']:,.0f} records/s; "
                  f"hourly rollups equal the store's Delta over the raw rows: "
                  f"{'yes' if wp['rollups_equal'] else 'NO'} ({wp['segments']} segments)")
            results["write_path"] = wp
    finally:
        if stop_pg is not None:
            stop_pg()
    print(f"\nload average at end: {load_average()}")
    if a.json:
        a.json.write_text(json.dumps(results, indent=1, default=str))


if __name__ == "__main__":
    main()
