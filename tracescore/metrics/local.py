"""The built-in local metrics: pure computation over the record, no judge calls.

Importing this module registers them (the registry imports it on first lookup). Each family
lives in its own module; this is the visible list.
"""

from __future__ import annotations

from . import registry
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

for _cls in LOCAL_METRICS:
    registry.register(_cls)

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
