"""Framework adapters, shipped as ``tracescore.integrations``.

Each adapter imports its framework lazily; the tracescore core never imports LangChain or
LlamaIndex, nor these adapters (only the client's front doors do, lazily: ``ts.langchain_handler()``,
``ts.instrument_llama_index()``). A missing framework gives a clear
``pip install 'tracescore[...]'`` message (:func:`require`).
"""

from __future__ import annotations

from tracescore._internal.extras import require

__all__ = ["require"]
