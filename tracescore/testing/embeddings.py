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
from collections.abc import Callable, Sequence
from typing import Any

from .._internal.json_server import Fault, Response, ScriptedServer, error_response, pause

__all__ = ["Fault", "ScriptedEmbeddingServer", "hashed_bag_of_words"]


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


class ScriptedEmbeddingServer(ScriptedServer):
    def __init__(self, vectors: Callable[[str], Sequence[float]] | None = None, *,
                 shuffle: bool = False, delay_s: float = 0.0) -> None:
        self.vectors = vectors or hashed_bag_of_words
        self.shuffle = shuffle
        super().__init__(delay_s=delay_s)

    @property
    def inputs(self) -> list[str]:
        """Every text the server was asked to embed, in order (repeats included)."""
        return [t for r in self.requests for t in r.get("input", [])]

    def __enter__(self) -> ScriptedEmbeddingServer:
        super().__enter__()
        return self

    def respond(self, path: str, req: dict[str, Any]) -> Response:
        with self._lock:
            self.requests.append(req)
            fault = self.next_fault()
            n_requests = len(self.requests)
        pause(self, fault)
        if not path.rstrip("/").endswith("/embeddings"):
            return 404, b'{"error": {"message": "not found"}}', {}
        failed = error_response(fault) if fault is not None else None
        if failed is not None:
            return failed
        texts = req.get("input", [])
        if isinstance(texts, str):
            texts = [texts]
        items = []
        for i, t in enumerate(texts):
            vec = [float(x) for x in self.vectors(t)]
            if req.get("encoding_format") == "base64":
                emb: Any = base64.b64encode(struct.pack(f"<{len(vec)}f", *vec)).decode()
            else:
                emb = vec
            items.append({"object": "embedding", "index": i, "embedding": emb})
        if self.shuffle:
            random.Random(n_requests).shuffle(items)
        tokens = sum(len(str(t).split()) for t in texts)
        body = {"object": "list", "data": items, "model": req.get("model", "test"),
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}
        return 200, json.dumps(body).encode(), {}
