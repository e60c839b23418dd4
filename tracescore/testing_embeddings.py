"""A real OpenAI-compatible embeddings server on 127.0.0.1, for tests (and for your setup).

``ScriptedEmbeddingServer`` answers ``POST /v1/embeddings`` as OpenAI does, so the real
``openai`` client talks to it over real HTTP. Vectors come from ``vectors(text)`` (default:
:func:`hashed_bag_of_words`, deterministic); ``encoding_format`` ``float`` and ``base64`` are
both served. It records every request, can answer in shuffled order (a client must use each
item's ``index``), and injects faults like the scripted judge server: HTTP errors with
``Retry-After``, slow or raw (cut-off) bodies.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import random
import re
import struct
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from .testing_judge import Fault

__all__ = ["Fault", "ScriptedEmbeddingServer", "hashed_bag_of_words"]


class _Server(ThreadingHTTPServer):
    request_queue_size = 256  # the default backlog of 5 overflows under a concurrent burst

    def handle_error(self, request: Any, client_address: Any) -> None:
        import sys

        if isinstance(sys.exc_info()[1], ConnectionError):
            return  # the client gave up (its timeout): expected in fault tests
        super().handle_error(request, client_address)


def hashed_bag_of_words(text: str, dims: int = 64) -> list[float]:
    """Lower-cased words hashed into ``dims`` buckets, L2-normalised (texts sharing words get a
    positive cosine); a text without words maps to the first axis."""
    v = [0.0] * dims
    for w in re.findall(r"\w+", text.lower()):
        v[int.from_bytes(hashlib.sha256(w.encode()).digest()[:4], "big") % dims] += 1.0
    norm = math.sqrt(sum(x * x for x in v))
    if norm == 0.0:
        v[0] = 1.0
        return v
    return [x / norm for x in v]


class ScriptedEmbeddingServer:
    def __init__(self, vectors: Callable[[str], Sequence[float]] | None = None, *,
                 shuffle: bool = False, delay_s: float = 0.0) -> None:
        self.vectors = vectors or hashed_bag_of_words
        self.shuffle = shuffle
        self.delay_s = delay_s
        #: every request body, in arrival order
        self.requests: list[dict[str, Any]] = []
        self.faults: deque[Fault] = deque()
        self._lock = threading.Lock()
        self._server = _Server(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,),
                                        daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    @property
    def inputs(self) -> list[str]:
        """Every text the server was asked to embed, in order (repeats included)."""
        return [t for r in self.requests for t in r.get("input", [])]

    def inject(self, *faults: Fault) -> None:
        with self._lock:
            self.faults.extend(faults)

    def __enter__(self) -> ScriptedEmbeddingServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None
                      ) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:  # noqa: N802
                n = int(self.headers.get("Content-Length", "0"))
                req = json.loads(self.rfile.read(n) or b"{}")
                with outer._lock:
                    outer.requests.append(req)
                    fault = outer.faults.popleft() if outer.faults else None
                time.sleep(outer.delay_s + (fault.delay_s if fault else 0.0))
                if not self.path.rstrip("/").endswith("/embeddings"):
                    self._send(404, b'{"error": {"message": "not found"}}')
                    return
                if fault is not None and fault.raw is not None:
                    self._send(fault.status, fault.raw)
                    return
                if fault is not None and fault.status != 200:
                    headers = {}
                    if fault.retry_after is not None:
                        headers["Retry-After"] = f"{fault.retry_after:g}"
                    err = {"error": {"message": f"injected {fault.status}", "type": "test"}}
                    self._send(fault.status, json.dumps(err).encode(), headers)
                    return
                texts = req.get("input", [])
                if isinstance(texts, str):
                    texts = [texts]
                items = []
                for i, t in enumerate(texts):
                    vec = [float(x) for x in outer.vectors(t)]
                    if req.get("encoding_format") == "base64":
                        emb: Any = base64.b64encode(struct.pack(f"<{len(vec)}f", *vec)).decode()
                    else:
                        emb = vec
                    items.append({"object": "embedding", "index": i, "embedding": emb})
                if outer.shuffle:
                    random.Random(len(outer.requests)).shuffle(items)
                tokens = sum(len(str(t).split()) for t in texts)
                body = {"object": "list", "data": items, "model": req.get("model", "test"),
                        "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}
                self._send(200, json.dumps(body).encode())

        return Handler
