"""Errors of ``tracescore.init`` (the settings, the judge and embedder factories) said in the
command line's words.

Those errors speak to Python callers: ``pass judge='openai:MODEL'``, ``judge_price must be
(usd_per_mtok_in, usd_per_mtok_out)``, ``pass api_key=``. A command that starts a pipeline
(``worker``, ``demo``, ``judge-check``) passes their text through :func:`cli_message`, so the
user reads the option they typed (``--judge 'openai:MODEL'``) and what the command line can do
instead of a keyword argument it has no option for (``set OPENAI_API_KEY``). The mapping from
``init`` argument to option is :data:`INIT_OPTIONS`, in this one place.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

__all__ = ["INIT_OPTIONS", "cli_message"]

#: ``tracescore.init`` argument → (the option that sets it, its metavar) on the command line
INIT_OPTIONS: Mapping[str, tuple[str, str]] = {
    "db": ("--db", "PATH|URL"),
    "metrics": ("--metric", "NAME"),
    "judge": ("--judge", "SPEC"),
    "embedder": ("--embedder", "SPEC"),
    "sample_rate": ("--sample-rate", "RATE"),
    "concurrency": ("--concurrency", "N"),
    "lease_seconds": ("--lease-seconds", "SECONDS"),
    "judge_price": ("--judge-price", "IN,OUT"),
    "judge_calls_per_minute": ("--judge-calls-per-minute", "N"),
    "judge_daily_budget_usd": ("--judge-daily-budget-usd", "USD"),
    "judge_budget": ("--judge-budget", "N/day"),
    "monitors": ("--monitors", "FILE"),
    "session_idle": ("--session-idle", "DURATION"),
    "session_metrics": ("--session-metric", "NAME"),
}

#: Python-only advice → what the command line offers instead (applied first, in order)
_PHRASES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"pass api_key= or set OPENAI_API_KEY"), "set OPENAI_API_KEY"),
    (re.compile(r"\bpass base_url="), "set OPENAI_BASE_URL"),
    (re.compile(r"\bwith base_url="), "with OPENAI_BASE_URL"),
    # choices only Python code can pass (an object, not a spec string)
    (re.compile(r",? or a (?:tracescore\.)?(?:judge\.)?Judge\b"), ""),
    (re.compile(r",? or a tracescore\.embeddings\.Embedder\b"), ""),
    (re.compile(r",? a LangChain chat model\b"), ""),
)


def _option_rules() -> tuple[tuple[re.Pattern[str], str], ...]:
    rules: list[tuple[re.Pattern[str], str]] = []
    # longest first: judge_price before judge
    for arg in sorted(INIT_OPTIONS, key=len, reverse=True):
        option, metavar = INIT_OPTIONS[arg]
        word = rf"(?<![\w.'\"-]){re.escape(arg)}"
        # judge_price=(usd_per_mtok_in, usd_per_mtok_out) → --judge-price IN,OUT
        rules.append((re.compile(rf"{word}=\([^)]*\)"), f"{option} {metavar}".strip()))
        # "sample rate for 'sample_rate' must be ..." → "... for --sample-rate must be ..."
        rules.append((re.compile(rf"'{re.escape(arg)}'"), option))
        # judge='local' → --judge 'local';  db=':memory:' → --db ':memory:'
        rules.append((re.compile(rf"{word}=(?!=)"), f"{option} "))
        # the subject of a sentence: "judge_price must be (a, b)", "concurrency must be ...",
        # "judge_daily_budget_usd needs ..." (not "the OpenAI judge needs")
        subject = rf"(?:^|(?<=[;:] )){re.escape(arg)}"
        rules.append((re.compile(rf"{subject} must be \([^)]*\)"),
                      f"{option} must be {metavar}"))
        rules.append((re.compile(rf"{subject}(?= (?:must|needs|is)\b)"), option))
    return tuple(rules)


_OPTION_RULES = _option_rules()


def cli_message(exc: BaseException | str) -> str:
    """``exc``'s text with ``init`` arguments replaced by their options (see the module)."""
    text = str(exc)
    for pattern, repl in _PHRASES + _OPTION_RULES:
        text = pattern.sub(repl, text)
    return text
