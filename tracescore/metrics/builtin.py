"""The built-in metrics, listed once: the registry reads this list on its first lookup.

Each family's module keeps its own visible tuple; none of them imports the registry, so the
imports run one way: registry → builtin → metric modules → base.
"""

from __future__ import annotations

from .agent import AGENT_CHECKS
from .base import Metric
from .judged import JUDGE_METRICS
from .local import LOCAL_METRICS
from .ragas import RAGAS_METRICS
from .rgb_abilities import RgbNoise
from .saga_extra import GPTScore, SelfCheckGPT
from .tool_correctness import ToolCorrectness
from .trajectory import REFERENCE_METRICS

BUILTIN_METRICS: tuple[type[Metric], ...] = (
    *LOCAL_METRICS,
    *JUDGE_METRICS,
    *RAGAS_METRICS,
    RgbNoise,
    GPTScore,
    SelfCheckGPT,
    *AGENT_CHECKS,
    *REFERENCE_METRICS,
    ToolCorrectness,
)
