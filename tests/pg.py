"""A throwaway PostgreSQL cluster for the tests, from the machine's PostgreSQL binaries.

``TRACESCORE_TEST_POSTGRES_URL`` (a superuser URL to a running server) is used instead when
set. Otherwise :func:`start_cluster` runs ``initdb`` and ``pg_ctl`` (Debian's ``postgresql``
package; ``.ci/run`` installs it) in a temporary folder, on a free port; the server refuses to
run as root, so as root it runs as the ``postgres`` user (``runuser``). Missing binaries make
Postgres tests fail under CI (``CI`` set) and skip elsewhere.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path

ENV_URL = "TRACESCORE_TEST_POSTGRES_URL"


def find_bin(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    for path in sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True):
        return path
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Cluster:
    """A throwaway cluster that a test may stop and start again (same port, same data)."""

    def __init__(self) -> None:
        self.url, self._destroy, self._ctl = _start()

    def stop_server(self) -> None:
        self._ctl("stop", "-m", "fast")

    def start_server(self) -> None:
        self._ctl("start")

    def destroy(self) -> None:
        self._destroy()


def start_cluster() -> tuple[str, Callable[[], None]]:
    """Start a cluster; returns (superuser URL, stop). Raises FileNotFoundError without the
    binaries."""
    url, stop, _ = _start()
    return url, stop


def _start() -> tuple[str, Callable[[], None], Callable[..., None]]:
    initdb, pg_ctl = find_bin("initdb"), find_bin("pg_ctl")
    if initdb is None or pg_ctl is None:
        raise FileNotFoundError("PostgreSQL binaries (initdb, pg_ctl) not found: "
                                "apt-get install -y postgresql")
    base = Path(tempfile.mkdtemp(prefix="tracescore-pg-"))
    data = base / "data"
    as_root = os.geteuid() == 0
    prefix: list[str] = []
    if as_root:
        shutil.chown(base, "postgres", "postgres")
        prefix = ["runuser", "-u", "postgres", "--"]
    base.chmod(0o755)
    stop_cmd = [*prefix, pg_ctl, "-D", str(data), "-m", "immediate", "stop"]
    watchdog = _watchdog(base, stop_cmd)  # from here on, nothing outlives this process

    def stop() -> None:
        watchdog.kill()
        watchdog.wait()
        subprocess.run(stop_cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       check=False)
        shutil.rmtree(base, ignore_errors=True)

    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.PIPE, "check": True}
    opts = ""

    def ctl(action: str, *args: str) -> None:
        extra = ["-o", opts, "-l", str(base / "log")] if action == "start" else []
        subprocess.run([*prefix, pg_ctl, "-D", str(data), *extra, "-w", action, *args],
                       **quiet)  # type: ignore[call-overload]

    try:
        subprocess.run([*prefix, initdb, "-D", str(data), "--auth=trust", "-U", "postgres",
                        "-E", "UTF8", "--no-sync"], **quiet)  # type: ignore[call-overload]
        for attempt in range(3):
            # a free port now may be taken by another test process (pytest-xdist workers
            # start their clusters at once) before the server binds it: then take another
            port = _free_port()
            opts = (f"-p {port} -k {base} -c listen_addresses=127.0.0.1 -c fsync=off "
                    "-c synchronous_commit=off -c full_page_writes=off -c max_connections=200")
            try:
                ctl("start")
                break
            except subprocess.CalledProcessError:
                if attempt == 2:
                    raise
    except BaseException:
        stop()
        raise
    url = f"postgresql://postgres@127.0.0.1:{port}/postgres"
    LOGS[url] = base / "log"
    return url, stop, ctl


#: superuser URL → the server's log file (for the error when a server went away mid-run)
LOGS: dict[str, Path] = {}


def log_tail(admin_url: str, lines: int = 30) -> str:
    """The end of the log of the server behind ``admin_url`` (or why there is none)."""
    path = LOGS.get(admin_url)
    if path is None:
        return "(not a server these tests started)"
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as exc:
        return f"(no log: {exc}; the cluster folder exists: {path.parent.exists()})"


#: The watchdog's loop: wait for the test process ($0) to end, then stop the server and remove
#: its folder ($1); the rest of the arguments are the stop command.
_WATCHDOG = ('pid="$0"; base="$1"; shift; while kill -0 "$pid" 2>/dev/null; do sleep 0.5; done; '
             '"$@" >/dev/null 2>&1; rm -rf "$base"')


def _watchdog(base: Path, stop_cmd: list[str]) -> subprocess.Popen[bytes]:
    """A small shell process that stops the cluster once this process has ended by any means
    (SIGKILL, a Ctrl-C that ends a pytest-xdist worker before its session teardown): no
    orphan servers. It runs in a session of its own, so the Ctrl-C that ends the tests does not
    end it too; :func:`_start`'s ``stop`` ends it first when the tests stop the server
    themselves."""
    return subprocess.Popen(["sh", "-c", _WATCHDOG, str(os.getpid()), str(base), *stop_cmd],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)


def with_db(url: str, name: str) -> str:
    """``url`` with its database replaced by ``name``."""
    from urllib.parse import urlsplit, urlunsplit

    return urlunsplit(urlsplit(url)._replace(path=f"/{name}"))


def create_database(admin_url: str) -> tuple[str, Callable[[], None]]:
    """A fresh, empty database (from template0: fast); returns (url, drop)."""
    import psycopg

    name = f"ts_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE template0')  # type: ignore[arg-type]

    def drop() -> None:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')  # type: ignore[arg-type]

    return with_db(admin_url, name), drop
