"""Metrics: plain callables over a `RagRecord` returning `Score`s, registered by name."""

from __future__ import annotations

from .base import Metric
from .registry import available, get, register, resolve

__all__ = ["Metric", "available", "get", "register", "resolve"]
