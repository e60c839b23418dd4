"""A slow webhook beside a healthy one (issue 31): one pass of ``deliver_due`` — what
``tracescore check`` runs before it exits — with a receiver that answers one byte a second
for 40 s and channel ``timeout_s = 2``, and a healthy receiver. Prints the pass's wall time
and when the healthy channel got its POST. Run with a tree's code on ``PYTHONPATH``:

    PYTHONPATH=/work/main python bench/slow_channel.py      # the base tree
    python bench/slow_channel.py                            # this tree
"""

from __future__ import annotations

import json
import socket
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


def drip_server(every_s: float, for_s: float) -> int:
    sock = socket.create_server(("127.0.0.1", 0))

    def one(conn: socket.socket) -> None:
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            answer = b"HTTP/1.1 200 OK\r\nX-Pad: " + b"." * 1000
            end = time.monotonic() + for_s
            for b in answer:
                if time.monotonic() > end:
                    break
                try:
                    conn.sendall(bytes([b]))
                except OSError:
                    return
                time.sleep(every_s)

    def serve() -> None:
        while True:
            conn, _ = sock.accept()
            threading.Thread(target=one, args=(conn,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    return int(sock.getsockname()[1])


def main() -> None:
    from tracescore.monitor import notify as N
    from tracescore.monitor import state as S
    from tracescore.store import open_store

    got: list[float] = []

    class Ok(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            got.append(time.monotonic())
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *a: Any) -> None:
            pass

    ok = ThreadingHTTPServer(("127.0.0.1", 0), Ok)
    threading.Thread(target=ok.serve_forever, daemon=True).start()
    slow_port = drip_server(1.0, 40.0)
    from test_monitor_notify import Chan, change, event

    chans = [Chan("a-slow", "webhook", f"http://127.0.0.1:{slow_port}/h", timeout_s=2.0),
             Chan("b-ok", "webhook", f"http://127.0.0.1:{ok.server_address[1]}/h",
                  timeout_s=2.0)]
    with tempfile.TemporaryDirectory() as d:
        store = open_store(str(Path(d) / "ts.db"))
        S.ensure_tables(store)
        assert S.acquire_lease(store, S.DEFAULT_LEASE, "ev", 1e9, now=0)
        change(store, event(), chans, at=1000.0)
        t0 = time.monotonic()
        N.deliver_due(store, chans, now=1000.0)
        wall = time.monotonic() - t0
        errors = {r.channel: r.last_error for r in S.outbox_rows(store)}
        store.close()
    print(json.dumps({"pass_s": round(wall, 2),
                      "healthy_post_after_s": round(got[0] - t0, 2) if got else None,
                      "slow_error": errors.get("a-slow")}))


if __name__ == "__main__":
    main()
