"""Judge backend for any LangChain ``BaseChatModel`` the app already has.

The model's own LangChain callbacks still fire, but the scoring worker runs with OpenTelemetry
instrumentation suppressed, so tracescore's handler ignores these calls: the judge is never
captured and scored in a loop. Errors whose type or status code says "rate limit", "timeout"
or 5xx are treated as transient (retried); the rest are final. The reply's model is the one the
provider reported (``response_metadata["model_name"]`` or ``["model"]``) when it says, else
the configured one.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from .base import JudgeError, JudgeReply, Message, TokenLogprob, TransientJudgeError

_TRANSIENT_WORDS = ("ratelimit", "rate_limit", "timeout", "overloaded", "unavailable",
                    "connection", "serviceunavailable", "internalserver", "apiconnection")


class LangChainJudge:
    def __init__(self, model: Any) -> None:
        self.chat_model = model
        self.model = str(getattr(model, "model_name", None) or getattr(model, "model", None)
                         or type(model).__name__)

    async def complete(
        self,
        messages: Sequence[Message],
        *,
        json_schema: Mapping[str, Any] | None = None,
        max_tokens: int = 1024,
        logprobs: int | None = None,
        timeout_s: float | None = None,
    ) -> JudgeReply:
        from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

        kinds = {"system": SystemMessage, "user": HumanMessage, "assistant": AIMessage}
        lc_messages = [kinds[m["role"]](content=m["content"]) for m in messages]
        t0 = time.perf_counter()
        try:
            msg = await self.chat_model.ainvoke(lc_messages)
        except Exception as exc:
            name = type(exc).__name__.lower()
            status = getattr(exc, "status_code", None) or getattr(
                getattr(exc, "response", None), "status_code", None)
            if any(w in name for w in _TRANSIENT_WORDS) or (
                    isinstance(status, int) and (status >= 500 or status == 429)):
                raise TransientJudgeError(f"{type(exc).__name__}: {exc}"[:300],
                                          status=status if isinstance(status, int) else None) \
                    from exc
            raise JudgeError(f"{type(exc).__name__}: {exc}"[:300]) from exc
        latency = (time.perf_counter() - t0) * 1000
        content = msg.content if isinstance(msg.content, str) else "".join(
            b.get("text", "") if isinstance(b, dict) else str(b) for b in msg.content)
        usage = getattr(msg, "usage_metadata", None) or {}
        lps = None
        meta = getattr(msg, "response_metadata", None) or {}
        reported = meta.get("model_name") or meta.get("model") if isinstance(meta, dict) \
            else None
        raw = meta.get("logprobs") if isinstance(meta, dict) else None
        if isinstance(raw, dict) and isinstance(raw.get("content"), list):
            lps = [TokenLogprob(t["token"], float(t["logprob"]),
                                {a["token"]: float(a["logprob"]) for a in t.get("top_logprobs", [])})
                   for t in raw["content"]]
        return JudgeReply(text=content, model=str(reported or self.model),
                          input_tokens=int(usage.get("input_tokens", 0)),
                          output_tokens=int(usage.get("output_tokens", 0)),
                          latency_ms=latency, logprobs=lps)

    async def aclose(self) -> None:
        return None
