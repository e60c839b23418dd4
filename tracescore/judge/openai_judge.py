"""OpenAI-compatible judge through the official ``openai`` SDK (``AsyncOpenAI``).

Works against OpenAI and any server that speaks its chat completions API: vLLM, Ollama,
LiteLLM, llama.cpp's server. Structured output is asked for with ``response_format``
``json_schema``; a server that rejects it is asked with ``json_object``, then with plain
prompting, and the choice is remembered. The SDK's own retries are off: tracescore's
:class:`~tracescore.judge.resilience.ResilientJudge` retries, honouring ``Retry-After``.
The API key is read from the argument or ``OPENAI_API_KEY`` and never logged or stored.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

from .._internal.openai_errors import message, retry_after
from .base import JudgeError, JudgeReply, Message, TokenLogprob, TransientJudgeError

_MODES = ("json_schema", "json_object", "none")


class OpenAIJudge:
    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        temperature: float = 0.0,
        default_headers: Mapping[str, str] | None = None,
        structured_output: str = "json_schema",
    ) -> None:
        try:
            import openai
        except ImportError as exc:  # pragma: no cover - openai is a core dependency
            raise ImportError("the OpenAI judge needs the openai package") from exc
        if structured_output not in _MODES:
            raise ValueError(f"structured_output must be one of {_MODES}")
        base_url = base_url or os.environ.get("OPENAI_BASE_URL")
        api_key = api_key or os.environ.get("OPENAI_API_KEY")
        if not api_key:
            if base_url is None:
                raise ValueError(
                    "the OpenAI judge needs an API key: pass api_key= or set OPENAI_API_KEY "
                    "(for a local OpenAI-compatible server, pass base_url=)"
                )
            api_key = "not-needed"  # local servers (vLLM, llama.cpp, Ollama) ignore it
        self.model = model
        self.temperature = temperature
        self._mode = structured_output
        self._openai = openai
        self._client = openai.AsyncOpenAI(
            base_url=base_url, api_key=api_key, max_retries=0,
            default_headers=dict(default_headers or {}),
        )

    def __repr__(self) -> str:  # never show the key
        return f"OpenAIJudge(model={self.model!r}, base_url={str(self._client.base_url)!r})"

    async def complete(
        self,
        messages: Sequence[Message],
        *,
        json_schema: Mapping[str, Any] | None = None,
        max_tokens: int = 1024,
        logprobs: int | None = None,
        timeout_s: float | None = None,
    ) -> JudgeReply:
        openai = self._openai
        while True:
            kwargs: dict[str, Any] = {
                "model": self.model,
                "messages": [dict(m) for m in messages],
                "max_tokens": max_tokens,
                "temperature": self.temperature,
            }
            if timeout_s is not None:
                kwargs["timeout"] = timeout_s
            if json_schema is not None and self._mode == "json_schema":
                kwargs["response_format"] = {
                    "type": "json_schema",
                    "json_schema": {"name": "verdict", "schema": dict(json_schema)},
                }
            elif json_schema is not None and self._mode == "json_object":
                kwargs["response_format"] = {"type": "json_object"}
            if logprobs:
                kwargs["logprobs"] = True
                kwargs["top_logprobs"] = logprobs
            t0 = time.perf_counter()
            try:
                resp = await self._client.chat.completions.create(**kwargs)
            except openai.BadRequestError as exc:
                if json_schema is not None and "response_format" in kwargs and \
                        _MODES.index(self._mode) < 2:
                    self._mode = _MODES[_MODES.index(self._mode) + 1]
                    continue  # this server does not do that kind of structured output
                raise JudgeError(f"judge rejected the request (400): {message(exc)}") from exc
            except openai.RateLimitError as exc:
                raise TransientJudgeError(f"rate limited (429): {message(exc)}",
                                          retry_after(exc), 429) from exc
            except openai.APIStatusError as exc:
                status = exc.status_code
                if status >= 500 or status in (408, 409):
                    raise TransientJudgeError(f"judge server error ({status}): {message(exc)}",
                                              retry_after(exc), status) from exc
                raise JudgeError(f"judge refused the request ({status}): {message(exc)}") from exc
            except openai.APITimeoutError as exc:
                raise TransientJudgeError("judge request timed out") from exc
            except openai.APIConnectionError as exc:
                raise TransientJudgeError(f"cannot reach the judge: {message(exc)}") from exc
            except openai.APIResponseValidationError as exc:
                raise TransientJudgeError(f"malformed response from the judge: {exc}") from exc
            except json.JSONDecodeError as exc:
                # The SDK lets a cut-off or garbled response body through as a bare
                # JSONDecodeError: a transport fault (proxy, reset), worth a retry.
                raise TransientJudgeError(f"judge sent an unreadable response body: {exc}") \
                    from exc
            latency = (time.perf_counter() - t0) * 1000
            return _reply(resp, self.model, latency)

    async def aclose(self) -> None:
        await self._client.close()




def _reply(resp: Any, model: str, latency_ms: float) -> JudgeReply:
    if not getattr(resp, "choices", None):
        raise TransientJudgeError("judge returned no choices")
    choice = resp.choices[0]
    text = choice.message.content or ""
    usage = getattr(resp, "usage", None)
    lps = None
    lp = getattr(choice, "logprobs", None)
    if lp is not None and getattr(lp, "content", None):
        lps = [
            TokenLogprob(t.token, float(t.logprob),
                         {a.token: float(a.logprob) for a in (t.top_logprobs or [])})
            for t in lp.content
        ]
    return JudgeReply(
        text=text,
        model=getattr(resp, "model", None) or model,
        input_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
        output_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
        latency_ms=latency_ms,
        logprobs=lps,
    )
