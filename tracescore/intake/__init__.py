"""OTLP intake: score the traces of apps instrumented with OpenInference, OpenLLMetry or the
OTel GenAI conventions, in any language (``tracescore serve``, docs/otlp.md).

Modules: :mod:`.otlp` (decoding, answers), :mod:`.spool` (acknowledged means stored),
:mod:`.spans` and :mod:`.records` (convention readers: spans → RAG records),
:mod:`.assembler` (complete traces → records and jobs), :mod:`.server` (HTTP and gRPC front
ends), :mod:`.service` (all of it wired), :mod:`.names` (the attribute names it reads).
"""

from __future__ import annotations

from .service import Serve, ServeConfig

__all__ = ["Serve", "ServeConfig"]
