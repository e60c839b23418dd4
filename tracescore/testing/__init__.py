"""Test doubles shipped with the library, for tracescore's own tests and for its users' tests.

Nothing here mocks tracescore; each double is a real part:

- :mod:`.pipeline` — :func:`in_memory` builds a real pipeline (real ``TracerProvider``, real
  SQLite file, real worker) whose spans land in an ``InMemorySpanExporter``; span filters
  (:func:`rag_roots`, :func:`carriers`); :class:`ScriptedMetric`; :class:`OtlpReceiver`, a real
  OTLP endpoint (HTTP/protobuf or gRPC) on 127.0.0.1.
- :mod:`.judge` — :class:`ScriptedJudgeServer`, a real OpenAI-compatible chat-completions
  server on 127.0.0.1 with scripted verdicts and injectable faults.
- :mod:`.embeddings` — :class:`ScriptedEmbeddingServer`, a real OpenAI-compatible embeddings
  server with deterministic vectors.

``from tracescore.testing import ...`` reaches all of them.
"""

from __future__ import annotations

from .._internal.json_server import Fault
from .embeddings import ScriptedEmbeddingServer, hashed_bag_of_words
from .judge import ScriptedJudgeServer, lexical_responder, parse_prompt
from .pipeline import (
    OtlpReceiver,
    Received,
    ScriptedMetric,
    WireExemplar,
    WireLogRecord,
    WirePoint,
    WireSpan,
    carriers,
    in_memory,
    production_errors,
    rag_roots,
)

__all__ = ["Fault", "OtlpReceiver", "Received", "ScriptedEmbeddingServer", "ScriptedJudgeServer",
           "ScriptedMetric", "WireExemplar", "WireLogRecord", "WirePoint", "WireSpan", "carriers",
           "hashed_bag_of_words", "in_memory", "lexical_responder", "parse_prompt",
           "production_errors", "rag_roots"]
