"""Token log-probabilities of a given text, for GPTScore.

A :class:`TextScorer` returns ``log p(token | prefix, earlier tokens)`` for each token of
``text``. Two backends: any OpenAI-compatible *completions* endpoint that echoes prompt
log-probabilities (vLLM, llama.cpp's server; OpenAI's current models no longer do), and
llama.cpp in-process (``llama-cpp-python``; the model is loaded with ``logits_all=True``).
Both run on the scoring worker, never on the app's request path.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from .base import JudgeError, TransientJudgeError


@runtime_checkable
class TextScorer(Protocol):
    model: str

    async def logprobs(self, prefix: str, text: str) -> list[float]: ...


def _select(offsets: Sequence[int], logprobs: Sequence[float | None], start: int,
            end: int) -> list[float]:
    """Log-probs of the tokens that overlap the scored text [start, end).

    Token i spans [offsets[i], offsets[i+1]); a token that straddles the boundary (" The"
    carrying the prompt's trailing space) belongs to the text.
    """
    out = []
    for i, (off, lp) in enumerate(zip(offsets, logprobs)):
        stop = offsets[i + 1] if i + 1 < len(offsets) else end
        if off < end and stop > start and lp is not None:
            out.append(float(lp))
    return out


class OpenAICompletionScorer:
    def __init__(self, model: str, *, base_url: str | None = None,
                 api_key: str | None = None) -> None:
        import openai

        base_url = base_url or os.environ.get("OPENAI_BASE_URL")
        api_key = api_key or os.environ.get("OPENAI_API_KEY") or (
            "not-needed" if base_url else None)
        if not api_key:
            raise ValueError("GPTScore needs an OpenAI-compatible server: pass base_url= "
                             "(vLLM, llama.cpp server) or set OPENAI_API_KEY")
        self.model = model
        self._openai = openai
        self._client = openai.AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=2)

    async def logprobs(self, prefix: str, text: str) -> list[float]:
        openai = self._openai
        try:
            resp = await self._client.completions.create(
                model=self.model, prompt=prefix + text, echo=True, logprobs=1, max_tokens=1,
                temperature=0.0,
            )
        except (openai.RateLimitError, openai.APITimeoutError, openai.APIConnectionError) as e:
            raise TransientJudgeError(f"logprob server: {e}") from e
        except openai.APIError as exc:
            raise JudgeError(f"logprob server refused: {exc}"[:300]) from exc
        lp = resp.choices[0].logprobs
        if lp is None or not lp.token_logprobs or not lp.text_offset:
            raise JudgeError("the server returned no prompt log-probabilities (it must support "
                             "echo=True with logprobs on the completions endpoint)")
        return _select(lp.text_offset, lp.token_logprobs, len(prefix), len(prefix) + len(text))


class LlamaCppScorer:
    def __init__(self, model_path: str, *, n_ctx: int = 2048) -> None:
        try:
            from llama_cpp import Llama
        except ImportError:
            raise ImportError("GPTScore with llama.cpp needs: pip install 'tracescore[local]'") \
                from None
        from pathlib import Path

        self.model = Path(model_path).name
        self._llm = Llama(model_path=model_path, n_ctx=n_ctx, logits_all=True, verbose=False)
        self._lock = threading.Lock()

    def _score(self, prefix: str, text: str) -> list[float]:
        # Computed from the logits rather than with create_completion(echo=True, logprobs=1):
        # llama-cpp-python 0.3.x reports each echoed token's log-prob from the logits *at*
        # that token (which predict the next one), not from the logits before it.
        import numpy as np

        llm = self._llm
        with self._lock:
            toks = llm.tokenize((prefix + text).encode("utf-8"), add_bos=True)
            llm.reset()  # type: ignore[no-untyped-call]
            llm.eval(toks)
            logits = np.asarray(llm.scores[: len(toks)], dtype=np.float64)
            pieces = [llm.detokenize([t]).decode("utf-8", "replace") for t in toks]
        shift = logits.max(axis=1, keepdims=True)
        logz = np.log(np.exp(logits - shift).sum(axis=1, keepdims=True)) + shift
        offsets, values, pos = [], [], 0
        first = 1 if toks and toks[0] == llm.token_bos() else 0
        for i in range(first, len(toks)):
            offsets.append(pos)
            values.append(float(logits[i - 1, toks[i]] - logz[i - 1, 0]) if i > 0 else None)
            pos += len(pieces[i])
        return _select(offsets, values, len(prefix), len(prefix) + len(text))

    async def logprobs(self, prefix: str, text: str) -> list[float]:
        return await asyncio.to_thread(self._score, prefix, text)


def resolve_scorer(spec: Any, base_url: str | None = None) -> TextScorer:
    if isinstance(spec, TextScorer):
        return spec
    if isinstance(spec, str):
        kind, _, rest = spec.partition(":")
        if kind == "openai" and rest:
            return OpenAICompletionScorer(rest, base_url=base_url)
        if kind == "llama-cpp" and rest:
            return LlamaCppScorer(rest)
        if spec == "local":
            from .llama_cpp_judge import bundled_model_path

            return LlamaCppScorer(bundled_model_path())
    raise ValueError(f"GPTScore scorer {spec!r}: use 'openai:MODEL' (with base_url=), "
                     "'llama-cpp:/path/model.gguf', 'local', or a TextScorer")
