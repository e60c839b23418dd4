"""Issue 11 §4: the database locked by another process, a full disk, a corrupt file."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import rows, run_cli, wait_for

from tracescore.testing import ScriptedMetric

HOLDER = textwrap.dedent("""
    import sqlite3, sys
    con = sqlite3.connect(sys.argv[1], isolation_level=None)
    con.execute("BEGIN EXCLUSIVE")
    print("locked", flush=True)
    sys.stdin.readline()  # hold the lock until the test says so
    con.execute("COMMIT")
    print("released", flush=True)
""")




class Lock:
    """Another process holding an exclusive lock on the database."""

    def __init__(self, db: Path) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(db)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None and self.proc.stdout.readline() == "locked\n"

    def release(self) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        assert self.proc.stdout.readline() == "released\n"
        self.proc.wait(10)


@pytest.mark.allow_internal_errors
def test_exclusive_lock_loses_nothing_and_stats_answers_at_once(make_ts: Any,
                                                                db_path: Path) -> None:
    ts, _ = make_ts(metrics=[ScriptedMetric(lambda r: 1.0, name="m")])
    ts.log_record(query="before", answer="a")
    assert ts.flush(10)
    lock = Lock(db_path)
    try:
        for i in range(50):
            ts.log_record(query=f"q{i}", answer="a")  # returns at once: the hot path
        wait_for(lambda: ts.stats()["db_unavailable"])  # the writer hit the lock
        t0 = time.monotonic()
        for _ in range(20):
            s = ts.stats()
        assert time.monotonic() - t0 < 0.5  # from memory, never waiting on the lock
        assert "locked" in s["db_unavailable"] and s["lost"] == {}
        assert s["queue_depth"] == 50  # kept in memory, in order
    finally:
        lock.release()
    assert ts.flush(60)
    assert rows(db_path, "SELECT count(*) AS n FROM records")[0]["n"] == 51
    assert rows(db_path, "SELECT count(*) AS n FROM scores WHERE status='ok'")[0]["n"] == 51
    s = ts.stats()
    assert s["lost"] == {} and s["db_unavailable"] is None


@pytest.mark.allow_internal_errors
def test_shutdown_under_a_lock_honours_its_timeout_and_counts_the_loss(
        make_ts: Any, db_path: Path) -> None:
    ts, _ = make_ts(metrics=[ScriptedMetric(lambda r: 1.0, name="m")])
    ts.log_record(query="before", answer="a")
    assert ts.flush(10)
    lock = Lock(db_path)
    try:
        for i in range(20):
            ts.log_record(query=f"q{i}", answer="a")
        t0 = time.monotonic()
        assert ts.shutdown(timeout=3) is False
        took = time.monotonic() - t0
        assert took < 5.0, took
        # the writer counts what it could not store when it gives up (its lock wait ends)
        assert wait_for(lambda: ts.stats()["lost"]) == {"unwritten_at_shutdown": 20}
    finally:
        lock.release()


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 3 MB tmpfs (root in a container); skipped where mounting is refused."""
    mnt = tmp_path / f"disk-{uuid.uuid4().hex[:6]}"
    mnt.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mnt)],
                          capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


@pytest.mark.allow_internal_errors
def test_full_disk_counts_every_loss_and_recovers(make_ts: Any, small_disk: Path) -> None:
    db = small_disk / "ts.db"
    ts, _ = make_ts(db=db, metrics=[ScriptedMetric(lambda r: 1.0, name="m")], max_queue=40)
    ts.log_record(query="before", answer="a")
    assert ts.flush(10)
    filler = small_disk / "filler"
    with open(filler, "wb", buffering=0) as f:  # fill the disk to the last byte
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError:
            pass
    big = "x" * 20_000
    sent = 0
    for i in range(120):
        ts.log_record(query=f"q{i}", answer=big)
        sent += 1
    wait_for(lambda: ts.stats()["db_unavailable"])
    s = ts.stats()
    assert "full" in s["db_unavailable"]
    # counted, not silent: as "queue_full" when the buffer filled before the writer met the
    # full disk, as "disk_full" once it had (a WAL truncated after each commit on a tight disk
    # meets it at the first write)
    assert s["lost"].get("queue_full", 0) + s["lost"].get("disk_full", 0) > 0, s["lost"]
    os.remove(filler)  # the disk has room again
    assert ts.flush(60)
    s = ts.stats()
    stored = rows(db, "SELECT count(*) AS n FROM records")[0]["n"] - 1
    assert stored + sum(s["lost"].values()) == sent  # every record: stored or counted
    assert stored > 0
    assert rows(db, "SELECT count(*) AS n FROM jobs WHERE status != 'done'")[0]["n"] == 0


def test_corrupt_database_gets_a_clear_message(tmp_path: Path) -> None:
    db = tmp_path / "corrupt.db"
    db.write_bytes(b"SQLite format 3\0" + os.urandom(4096))
    for args in (["report", "--db", db], ["show", "0" * 32, "--db", db],
                 ["export", "--format", "jsonl", "--db", db]):
        out = run_cli(*args)
        assert out.exit_code != 0
        assert "Traceback" not in out.output
        assert "not a tracescore database or it is corrupt" in out.output, out.output
    not_db = tmp_path / "text.db"
    not_db.write_text("hello " * 1000)
    out = run_cli("report", "--db", not_db)
    assert out.exit_code != 0 and "corrupt" in out.output



def test_a_database_corrupt_past_its_first_page_gets_a_clear_message(
        make_ts: Any, db_path: Path) -> None:
    """Tables listed fine, pages broken: the report fails mid-query, with a message."""
    ts, _ = make_ts(metrics=[ScriptedMetric(lambda r: 1.0, name="m")])
    for i in range(300):
        ts.log_record(query=f"q{i} " + "words " * 50, answer="a " * 100)
    assert ts.shutdown(30)
    data = bytearray(db_path.read_bytes())
    assert len(data) > 40 * 4096
    for page in range(3, len(data) // 4096):  # keep the header and the schema page
        data[page * 4096 + 8: page * 4096 + 4000] = os.urandom(3992)
    db_path.write_bytes(bytes(data))
    for name in ("-wal", "-shm"):
        Path(str(db_path) + name).unlink(missing_ok=True)
    out = run_cli("report", "--db", db_path)
    assert out.exit_code != 0
    assert "Traceback" not in out.output and out.exception is None or \
        isinstance(out.exception, SystemExit)
    assert "not a tracescore database or it is corrupt" in out.output, out.output


@pytest.mark.allow_internal_errors
def test_a_job_whose_completion_met_the_lock_is_stored_when_it_lifts(
        make_ts: Any, db_path: Path) -> None:
    """The metric finishes while another process holds the database: storing the score
    fails. The score waits in memory (the job stays leased, no attempt is spent, the metric
    does not run again) and is stored as soon as the lock lifts, not after its 120 s lease."""
    import threading

    gate = threading.Event()
    ts, _ = make_ts(metrics=[ScriptedMetric(lambda r: 1.0, name="m", gate=gate)],
                    lease_seconds=120.0)
    ts.log_record(query="q", answer="a")
    wait_for(lambda: [r["status"] for r in rows(db_path, "SELECT status FROM jobs")]
             == ["leased"])
    lock = Lock(db_path)
    try:
        gate.set()
        wait_for(lambda: ts.stats()["db_unavailable"], timeout=30)  # completion refused
    finally:
        lock.release()
    t0 = time.monotonic()
    wait_for(lambda: rows(db_path, "SELECT count(*) AS n FROM scores")[0]["n"] == 1,
             timeout=30)
    assert time.monotonic() - t0 < 10  # not the 120 s lease
    [job] = rows(db_path, "SELECT status, attempts FROM jobs")
    assert job["status"] == "done" and job["attempts"] == 1
