"""The built-in local metrics: pure computation over the record, no judge calls.

Each family lives in its own module; this is their visible list, which
:mod:`.builtin` hands to the registry.
"""

from __future__ import annotations

from .base import Metric
from .bleu import Bleu
from .overlap import ExactMatch, TokenF1
from .rgb import RgbAccuracy, RgbErrorCorrection, RgbErrorDetection, RgbRejection
from .rouge import Rouge

LOCAL_METRICS: tuple[type[Metric], ...] = (
    Rouge,
    Bleu,
    TokenF1,
    ExactMatch,
    RgbAccuracy,
    RgbRejection,
    RgbErrorDetection,
    RgbErrorCorrection,
)

__all__ = [
    "LOCAL_METRICS",
    "Bleu",
    "ExactMatch",
    "RgbAccuracy",
    "RgbErrorCorrection",
    "RgbErrorDetection",
    "RgbRejection",
    "Rouge",
    "TokenF1",
]
