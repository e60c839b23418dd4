"""Embeddings from any OpenAI-compatible ``/v1/embeddings`` server, through the ``openai`` SDK.

Works against OpenAI and servers that speak its embeddings API (vLLM, Ollama, LiteLLM,
llama.cpp's server, text-embeddings-inference). Texts go in batches of ``batch_size`` per
request; vectors are requested as plain floats (``encoding_format="float"``, which every
compatible server supports) and put back in input order by their ``index``.

Failures are mapped like :mod:`tracescore.judge.openai_judge` maps them: 429, 5xx, 408/409,
timeouts, connection errors and unreadable bodies are transient and retried with backoff and
jitter (``Retry-After`` honoured); other 4xx fail at once (:class:`EmbeddingError`, an error
score with the reason). After repeated transient failures a circuit breaker opens and calls
raise :class:`~tracescore.judge.base.RetryLater`, so scoring jobs wait for the server instead
of failing in a storm. The SDK's own retries are off. The API key is read from the argument or
``OPENAI_API_KEY`` and never logged, stored or shown in ``repr``.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

from .._internal.openai_errors import message, retry_after
from ..judge.base import RetryLater
from ..judge.resilience import CircuitBreaker, RetryPolicy
from . import EmbeddingError, TransientEmbeddingError


class OpenAIEmbedder:
    """``model`` is what the server calls the model; ``dimensions`` (text-embedding-3 models)
    asks for shorter vectors. The cache key is ``openai:<model>`` (plus ``@<n>d``).
    ``policy`` (retries, backoff, timeout) and ``breaker`` default to the judge's settings."""

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        dimensions: int | None = None,
        batch_size: int = 128,
        timeout_s: float = 30.0,
        max_retries: int = 4,
        default_headers: Mapping[str, str] | None = None,
        policy: RetryPolicy | None = None,
        breaker: CircuitBreaker | None = None,
    ) -> None:
        try:
            import openai
        except ImportError as exc:
            raise ImportError("the OpenAI embedder needs the openai package: "
                              "pip install openai") from exc
        if not model:
            raise ValueError("the OpenAI embedder needs a model name, e.g. "
                             "'openai:text-embedding-3-small'")
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        if dimensions is not None and dimensions < 1:
            raise ValueError("dimensions must be >= 1")
        base_url = base_url or os.environ.get("OPENAI_BASE_URL")
        api_key = api_key or os.environ.get("OPENAI_API_KEY")
        if not api_key:
            if base_url is None:
                raise ValueError(
                    "the OpenAI embedder needs an API key: pass api_key= or set OPENAI_API_KEY "
                    "(for a local OpenAI-compatible server, pass base_url=)")
            api_key = "not-needed"  # local servers ignore it
        from .._internal.secrets import register_secret

        register_secret(api_key)
        self.server_model = model
        self.dimensions = dimensions
        self.model = f"openai:{model}" + (f"@{dimensions}d" if dimensions else "")
        self.batch_size = batch_size
        self.policy = policy or RetryPolicy(max_retries=max_retries, timeout_s=timeout_s)
        self.breaker = breaker or CircuitBreaker()
        self.requests = 0
        self._openai = openai
        self._client = openai.AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0,
                                          timeout=timeout_s,
                                          default_headers=dict(default_headers or {}))

    def __repr__(self) -> str:  # never show the key
        return (f"OpenAIEmbedder(model={self.server_model!r}, "
                f"base_url={str(self._client.base_url)!r})")

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        out: list[list[float]] = []
        for i in range(0, len(texts), self.batch_size):
            out.extend(await self._with_retries(list(texts[i:i + self.batch_size])))
        return out

    async def _with_retries(self, batch: list[str]) -> list[list[float]]:
        attempt = 0
        while True:
            try:
                self.breaker.before_call()
            except RetryLater as later:
                last = self.breaker.last_failure
                raise RetryLater("embedding server circuit breaker is open (server failing"
                                 + (f"; last failure: {last}" if last else "") + "); waiting",
                                 later.delay_s) from None
            try:
                vectors = await self._request(batch)
            except TransientEmbeddingError as exc:
                self.breaker.failure(str(exc))
                if attempt >= self.policy.max_retries:
                    if self.breaker.state != CircuitBreaker.CLOSED:
                        raise RetryLater(f"embedding server unavailable after {attempt + 1} "
                                         f"tries: {exc}", self.breaker.cooldown_s) from exc
                    raise EmbeddingError(f"embedding request failed after {attempt + 1} tries:"
                                         f" {exc}") from exc
                await asyncio.sleep(self.policy.delay(attempt, exc.retry_after))
                attempt += 1
                continue
            except EmbeddingError:
                self.breaker.success()  # the server answered; the request was bad
                raise
            except BaseException:
                self.breaker.abandon()
                raise
            self.breaker.success()
            return vectors

    async def _request(self, batch: list[str]) -> list[list[float]]:
        openai = self._openai
        kwargs: dict[str, Any] = {"model": self.server_model, "input": batch,
                                  "encoding_format": "float"}
        if self.dimensions is not None:
            kwargs["dimensions"] = self.dimensions
        self.requests += 1
        try:
            resp = await self._client.embeddings.create(**kwargs)
        except openai.RateLimitError as exc:
            raise TransientEmbeddingError(f"rate limited (429): {message(exc)}",
                                          retry_after(exc), 429) from exc
        except openai.APIStatusError as exc:
            status = exc.status_code
            if status >= 500 or status in (408, 409):
                raise TransientEmbeddingError(f"embedding server error ({status}): {message(exc)}",
                                              retry_after(exc), status) from exc
            raise EmbeddingError(f"embedding server refused the request ({status}): "
                                 f"{message(exc)}") from exc
        except openai.APITimeoutError as exc:
            raise TransientEmbeddingError("embedding request timed out") from exc
        except openai.APIConnectionError as exc:
            raise TransientEmbeddingError(f"cannot reach the embedding server: {message(exc)}") \
                from exc
        except openai.APIResponseValidationError as exc:
            raise TransientEmbeddingError(f"malformed response from the embedding server: "
                                          f"{exc}") from exc
        except json.JSONDecodeError as exc:
            # A cut-off or garbled body reaches us as a bare JSONDecodeError (see openai_judge).
            raise TransientEmbeddingError(f"unreadable response body: {exc}") from exc
        data = list(getattr(resp, "data", None) or [])
        if len(data) != len(batch):
            raise TransientEmbeddingError(
                f"embedding server returned {len(data)} vectors for {len(batch)} texts")
        try:
            by_index = sorted(data, key=lambda d: int(d.index))
            if [int(d.index) for d in by_index] != list(range(len(batch))):
                raise ValueError("indices are not 0..n-1")
            return [[float(x) for x in d.embedding] for d in by_index]
        except (TypeError, ValueError, AttributeError) as exc:
            raise TransientEmbeddingError(f"malformed embeddings response: {exc}") from exc

    async def aclose(self) -> None:
        await self._client.close()
