"""saga-llm-evaluation's GPTScore and SelfCheckGPT.

GPTScore: the mean log-probability of the answer's tokens given a prompt built from the query,
under a scoring model. Always ≤ 0; higher (closer to 0) is better. No judge call: one scoring
forward pass per record.

SelfCheckGPT: ``n`` extra answers are sampled from the app's own LLM for the same prompt (the
integrations record the prompt of the app's last LLM call; without one the query is used), and
the judge checks each sentence of the answer against each sample. Score = share of
(sentence, sample) pairs judged consistent. It multiplies cost (``n`` generations and ``n``
judge calls per record), so it is off by default and, once configured, is sampled at its own
low rate (``default_sample_rate``, 0.05) unless ``sample_rates`` says otherwise.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any

from ..judge import prompts as P
from ..judge.logprobs import TextScorer, resolve_scorer
from ..judge.session import JudgeSession, Usage
from ..judge.steps import YES_NO, _list, _obj, _verdict
from ..record import ANSWER, QUERY, RagRecord
from ..score import Score
from .base import Metric
from .judged import JudgeMetric
from .text import split_sentences

GPTSCORE_TEMPLATE = "Answer the question.\nQuestion: {query}\nAnswer: "


class GPTScore(Metric):
    """Mean log p(answer token | query prompt, previous tokens) under a scoring model."""

    name = "gptscore"
    requires = frozenset({QUERY, ANSWER})
    description = "Mean token log-probability of the answer given the query (saga GPTScore)"
    threshold = None

    def __init__(self, scorer: Any = None, *, base_url: str | None = None,
                 template: str = GPTSCORE_TEMPLATE, threshold: float | None = None) -> None:
        if scorer is None:
            raise ValueError(
                "gptscore needs a model that returns log-probabilities: use "
                "tracescore.metrics.saga_extra.GPTScore(scorer='local' | "
                "'llama-cpp:/path/model.gguf' | 'openai:MODEL', base_url=...)"
            )
        if "{query}" not in template:
            raise ValueError("the GPTScore template must contain {query}")
        self.scorer: TextScorer = resolve_scorer(scorer, base_url)
        self.template = template
        self.threshold = threshold

    async def __call__(self, record: RagRecord) -> Score:
        prefix = self.template.format(query=record.query or "")
        lps = await self.scorer.logprobs(prefix, record.answer or "")
        if not lps:
            return Score.failed(self.name, "the answer produced no scored tokens",
                                metric=self.name, metric_version=self.version)
        mean = sum(lps) / len(lps)
        return self.result(mean, f"mean log-prob {mean:.3f} over {len(lps)} tokens "
                           f"({self.scorer.model})",
                           details={"tokens": len(lps), "sum_logprob": sum(lps),
                                    "scorer_model": self.scorer.model})


SELFCHECK_VERSION = "selfcheck-v1"
SELFCHECK_TASK = (
    "For each sentence in `sentences` (in order), say whether it is supported by `sample`, "
    "another answer to the same request: 'yes' if the sample states or clearly implies it, "
    "'no' if the sample contradicts it or does not contain it."
)
SELFCHECK_FORMAT = '{"verdicts": ["yes|no", ...]} with one verdict per sentence, in order.'

Generate = Callable[[str], "str | Awaitable[str]"]


class SelfCheckGPT(JudgeMetric):
    """Share of the answer's sentences consistent with ``n`` resampled answers."""

    name = "selfcheckgpt"
    value_range = (0.0, 1.0)
    requires = frozenset({ANSWER})
    description = "Share of answer sentences consistent with n resampled answers (SelfCheckGPT)"
    default_sample_rate = 0.05

    def __init__(self, generate: Any = None, *, n: int = 3,
                 threshold: float | None = 0.5) -> None:
        if generate is None:
            raise ValueError(
                "selfcheckgpt needs the app's own model to resample answers: "
                "SelfCheckGPT(generate=my_chat_model) (a LangChain chat model or runnable, or "
                "a function prompt -> str)"
            )
        if n < 1:
            raise ValueError("n must be >= 1")
        self.generate = generate
        self.n = n
        self.threshold = threshold

    async def _sample(self, prompt: str) -> str:
        g = self.generate
        if hasattr(g, "ainvoke"):
            out = await g.ainvoke(prompt)
            content = getattr(out, "content", out)
            return content if isinstance(content, str) else str(content)
        res = g(prompt)
        if inspect.isawaitable(res):
            res = await res
        return str(res)

    async def evaluate(self, record: RagRecord, session: JudgeSession,
                       usage: Usage) -> Score:
        sentences = split_sentences(record.answer or "")
        if not sentences:
            return self.result(1.0, "the answer has no sentences to check")
        prompt = record.prompt or record.query or ""
        t0 = time.perf_counter()
        samples = await asyncio.gather(*(self._sample(prompt) for _ in range(self.n)))
        gen_s = time.perf_counter() - t0
        consistent = 0
        for sample in samples:
            payload = {"sentences": sentences, "sample": sample}

            def validate(data: Any, k: int = len(sentences)) -> list[str]:
                rows = _list(_obj(data, "reply").get("verdicts"), "verdicts", k)
                return [_verdict(v, YES_NO, "verdict") for v in rows]

            r = await session.step("selfcheck", SELFCHECK_VERSION, payload,
                                   P.messages(SELFCHECK_TASK, payload, SELFCHECK_FORMAT),
                                   validate, max_tokens=32 + 8 * len(sentences),
                                   record_id=record.record_id)
            usage.add("selfcheck", r)
            consistent += sum(v == "yes" for v in r.data)
        total = len(sentences) * self.n
        return self.result(consistent / total,
                           f"{consistent} of {total} sentence-sample pairs consistent "
                           f"({len(sentences)} sentences × {self.n} samples)",
                           details={"generations": self.n, "generation_s": round(gen_s, 3),
                                    "prompt_source": "llm prompt" if record.prompt
                                    else "query"})
