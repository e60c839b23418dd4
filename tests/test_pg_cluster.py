"""The throwaway PostgreSQL cluster of the tests (tests/pg.py) never outlives its test process:
a pytest-xdist worker ended by SIGKILL (or by a Ctrl-C before its session teardown) leaves no
server running and no folder behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import wait_for
from pg import ENV_URL, find_bin

_SCRIPT = """
import sys, time
sys.path.insert(0, sys.argv[1])
import psycopg
from pg import start_cluster
url, stop = start_cluster()
with psycopg.connect(url) as conn:
    data = conn.execute("SHOW data_directory").fetchone()[0]
pid = open(data + "/postmaster.pid").readline().strip()
print(url, data, pid, flush=True)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (ended, not yet reaped by its parent) has ended too
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_a_killed_test_process_leaves_no_postgres_server_behind() -> None:
    if os.environ.get(ENV_URL):
        pytest.skip(f"{ENV_URL} is set: the tests start no server of their own")
    if find_bin("initdb") is None or find_bin("pg_ctl") is None:
        if os.environ.get("CI"):
            pytest.fail("PostgreSQL binaries (initdb, pg_ctl) not found")
        pytest.skip("PostgreSQL binaries (initdb, pg_ctl) not found")
    import psycopg

    proc = subprocess.Popen([sys.executable, "-c", _SCRIPT, str(Path(__file__).parent)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line, proc.stderr.read() if proc.stderr else ""
        url, data, pid = line.split()
        base = Path(data).parent
        assert base.is_dir() and _alive(int(pid))
        with psycopg.connect(url, connect_timeout=10) as conn:  # the server serves
            assert conn.execute("SELECT 1").fetchone() == (1,)
        proc.send_signal(signal.SIGKILL)  # no teardown runs
        proc.wait(30)
        wait_for(lambda: not _alive(int(pid)), timeout=60, what="the server stopped")
        wait_for(lambda: not base.exists(), timeout=60, what="the cluster's folder removed")
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(url, connect_timeout=5).close()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
