"""OpenAI-compatible judge through the official ``openai`` SDK (``AsyncOpenAI``).

Works against OpenAI and any server that speaks its chat completions API: vLLM, Ollama,
LiteLLM, llama.cpp's server. Structured output is asked for with ``response_format``
``json_schema``; a server that rejects it is asked with ``json_object``, then with plain
prompting, and the choice is remembered. The SDK's own retries are off: tracescore's
:class:`~tracescore.judge.resilience.ResilientJudge` retries, honouring ``Retry-After``.
The API key is read from the argument or ``OPENAI_API_KEY`` and never logged or stored.

A reply body is read up to ``max_reply_bytes`` (1 MB by default, counted on the wire): a
longer one (a declared ``Content-Length`` or the bytes as they arrive) stops the read, closes
the connection and is a :class:`ReplyTooLarge` error score, "judge reply over 1 MB" — so a
runaway server costs the app at most that much memory per concurrent call.
"""

from __future__ import annotations

import importlib
import json
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any

from .._internal.openai_errors import message as _message
from .._internal.openai_errors import retry_after
from .._internal.secrets import register_secret, scrub
from .base import JudgeError, JudgeReply, Message, TokenLogprob, TransientJudgeError

_MODES = ("json_schema", "json_object", "none")

#: The default cap on a judge reply's body, in bytes.
MAX_REPLY_BYTES = 1_000_000


class ReplyTooLarge(JudgeError):
    """The judge's reply body is longer than the judge's ``max_reply_bytes``: not read
    further, not retried (the same request would get the same reply)."""


def _size(n: int) -> str:
    return f"{n / 1_000_000:g} MB" if n >= 100_000 else f"{n} bytes"


def _too_large(limit: int) -> ReplyTooLarge:
    return ReplyTooLarge(f"judge reply over {_size(limit)} (max_reply_bytes={limit}); "
                         "not read further")


_CAPPED: dict[type, type] = {}


def _capped_stream(response: Any, limit: int) -> Any:
    """``response.stream`` wrapped so that reading past ``limit`` bytes raises
    :class:`ReplyTooLarge`. The wrapper subclasses the ``AsyncByteStream`` of the HTTP
    library the response comes from (httpx or httpx2: the SDK uses either)."""
    base = importlib.import_module(type(response).__module__.split(".")[0]).AsyncByteStream
    cls = _CAPPED.get(base)
    if cls is None:
        class Capped(base):  # type: ignore[valid-type,misc]
            def __init__(self, inner: Any, limit: int) -> None:
                self._inner = inner
                self._limit = limit

            async def __aiter__(self) -> AsyncIterator[bytes]:
                seen = 0
                async for chunk in self._inner:
                    seen += len(chunk)
                    if seen > self._limit:
                        raise _too_large(self._limit)
                    yield chunk

            async def aclose(self) -> None:
                await self._inner.aclose()

        cls = _CAPPED[base] = Capped
    return cls(response.stream, limit)


def _reply_limit(limit: int) -> Callable[[Any], Awaitable[None]]:
    """An HTTP client response hook: refuse a declared body over ``limit`` at once, cap the
    rest while it is read (the client closes the connection when the cap raises)."""
    async def hook(response: Any) -> None:
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            raise _too_large(limit)
        response.stream = _capped_stream(response, limit)

    return hook


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
        max_reply_bytes: int = MAX_REPLY_BYTES,
    ) -> None:
        try:
            import openai
        except ImportError as exc:  # pragma: no cover - openai is a core dependency
            raise ImportError("the OpenAI judge needs the openai package") from exc
        if structured_output not in _MODES:
            raise ValueError(f"structured_output must be one of {_MODES}")
        if isinstance(max_reply_bytes, bool) or not isinstance(max_reply_bytes, int) or \
                max_reply_bytes < 1:
            raise ValueError("max_reply_bytes must be a positive int (bytes)")
        base_url = base_url or os.environ.get("OPENAI_BASE_URL")
        api_key = api_key or os.environ.get("OPENAI_API_KEY")
        if not api_key:
            if base_url is None:
                raise ValueError(
                    "the OpenAI judge needs an API key: pass api_key= or set OPENAI_API_KEY "
                    "(for a local OpenAI-compatible server, pass base_url=)"
                )
            api_key = "not-needed"  # local servers (vLLM, llama.cpp, Ollama) ignore it
        register_secret(api_key)  # a server may echo it in an error: scrubbed everywhere
        self.model = model
        self.temperature = temperature
        self._mode = structured_output
        self._openai = openai
        self.max_reply_bytes = max_reply_bytes
        self._client_args: dict[str, Any] = dict(
            base_url=base_url, api_key=api_key, max_retries=0,
            default_headers=dict(default_headers or {}),
        )
        self._client = self._new_client()

    def _new_client(self) -> Any:
        http = self._openai.DefaultAsyncHttpxClient(
            event_hooks={"response": [_reply_limit(self.max_reply_bytes)]})
        return self._openai.AsyncOpenAI(**self._client_args, http_client=http)

    def after_fork(self) -> None:
        """A forked child gets a client of its own (the parent's pool holds its sockets)."""
        self._client = self._new_client()

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




def _field(obj: Any, name: str) -> Any:
    """``obj.name`` or ``obj[name]``; None when absent. The SDK builds its response models
    without validation, so a broken envelope shows up as strings, dicts or missing fields."""
    if isinstance(obj, dict):
        return obj.get(name)
    if obj is None or isinstance(obj, (str, bytes, int, float, list)):
        return None
    try:
        value = getattr(obj, name, None)
    except Exception:
        return None
    if value is None:
        extra = getattr(obj, "model_extra", None)
        if isinstance(extra, dict):
            value = extra.get(name)
    return value


def _server_said(resp: Any) -> str:
    err = _field(resp, "error")
    if err is None:
        return ""
    msg = _field(err, "message") if not isinstance(err, str) else err
    return f"; the server said: {str(msg if msg is not None else err)[:300]}"


def _malformed(what: str, resp: Any) -> TransientJudgeError:
    # A 200 with a broken envelope is the server's (or a proxy's) fault: retried, bounded.
    return TransientJudgeError(f"malformed reply from the judge: {what}{_server_said(resp)}")


def _reply(resp: Any, model: str, latency_ms: float) -> JudgeReply:
    choices = _field(resp, "choices")
    if not isinstance(choices, list) or not choices:
        raise _malformed("no choices" if not choices else
                         f"choices is a {type(choices).__name__}, not a list", resp)
    choice = choices[0]
    if isinstance(choice, str) or not (isinstance(choice, dict) or hasattr(choice, "__dict__")):
        raise _malformed(f"choices[0] is a {type(choice).__name__}, not an object", resp)
    message = _field(choice, "message")
    if message is None:
        if _field(choice, "text") is not None:
            raise _malformed("choices[0] is a completions-style choice (text), not a chat "
                             "message", resp)
        raise _malformed("choices[0].message is missing or null", resp)
    content = _field(message, "content")
    if content is not None and not isinstance(content, str):
        raise _malformed(f"choices[0].message.content is a {type(content).__name__}, "
                         "not a string", resp)
    if content is None and not _field(message, "refusal"):
        raise _malformed("choices[0].message.content is null", resp)
    text = content or ""
    usage = _field(resp, "usage")
    lps = None
    lp = _field(choice, "logprobs")
    if lp is not None and _field(lp, "content"):
        try:
            lps = [
                TokenLogprob(str(_field(t, "token")), float(_field(t, "logprob")),
                             {str(_field(a, "token")): float(_field(a, "logprob"))
                              for a in (_field(t, "top_logprobs") or [])})
                for t in _field(lp, "content")
            ]
        except (TypeError, ValueError):
            lps = None  # unusable log-probs: the text still counts, unweighted
    return JudgeReply(
        text=text,
        model=str(_field(resp, "model") or model),
        input_tokens=_int(_field(usage, "prompt_tokens")),
        output_tokens=_int(_field(usage, "completion_tokens")),
        latency_ms=latency_ms,
        logprobs=lps,
    )


def _int(v: Any) -> int:
    try:
        return max(0, int(v or 0))
    except (TypeError, ValueError):
        return 0


def message(exc: Exception) -> str:
    """The server's error message, with keys and bearer tokens scrubbed."""
    return scrub(_message(exc))
