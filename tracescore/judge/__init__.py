"""LLM judges: one interface, three backends, shared cached steps.

``tracescore.init(judge=...)`` accepts ``"openai:MODEL"``, ``"llama-cpp:PATH"``, ``"local"``
(the tiny bundled SmolLM2 model: proves the offline path, far too weak to trust), a LangChain
``BaseChatModel``, or a :class:`Judge`. Judges run on the scoring worker only.

- the interface and its backends: :mod:`.base`, :mod:`.openai_judge`, :mod:`.langchain_judge`,
  :mod:`.llama_cpp_judge`; :mod:`.logprobs` (token log-probabilities, for GPTScore);
- around any backend: :mod:`.resilience` (timeouts, retries, breaker, JSON repair) and
  :mod:`.session` (the shared-step cache, budgets, accounting);
- what is asked: :mod:`.steps` (shared steps of the RAG metrics), :mod:`.ragas_steps`,
  :mod:`.rgb_steps`, with their :mod:`.prompts` and exact JSON :mod:`.schemas`;
- :mod:`.canary` — known-answer verdicts that flag a degenerate judge.
"""

from __future__ import annotations

from .base import InvalidJudgeOutput, Judge, JudgeError, JudgeReply, RetryLater
from .resilience import CircuitBreaker, ResilientJudge, RetryPolicy

__all__ = ["CircuitBreaker", "InvalidJudgeOutput", "Judge", "JudgeError", "JudgeReply",
           "ResilientJudge", "RetryLater", "RetryPolicy", "resolve_judge"]


def resolve_judge(spec: object) -> Judge:
    """Turn an ``init(judge=...)`` value into a backend (not yet wrapped for resilience)."""
    if isinstance(spec, str):
        kind, _, rest = spec.partition(":")
        if kind == "openai" and rest:
            from .openai_judge import OpenAIJudge

            return OpenAIJudge(rest)
        if kind == "llama-cpp" and rest:
            from .llama_cpp_judge import LlamaCppJudge

            return LlamaCppJudge(rest)
        if spec == "local":
            from .llama_cpp_judge import LlamaCppJudge, bundled_model_path

            return LlamaCppJudge(bundled_model_path())
        raise ValueError(
            f"unknown judge {spec!r}: use 'openai:MODEL', 'llama-cpp:/path/model.gguf', "
            "'local', a LangChain chat model, or a tracescore.judge.Judge"
        )
    if isinstance(spec, Judge):
        return spec
    try:
        from langchain_core.language_models import BaseChatModel
    except ImportError:
        BaseChatModel = None  # type: ignore[misc,assignment]  # noqa: N806
    if BaseChatModel is not None and isinstance(spec, BaseChatModel):
        from .langchain_judge import LangChainJudge

        return LangChainJudge(spec)
    raise TypeError(f"judge must be a string, a LangChain chat model or a Judge, got {spec!r}")
