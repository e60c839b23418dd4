"""Metrics: plain callables over a `RagRecord` returning `Score`s, registered by name.

- :mod:`.base` — :class:`Metric`: name, what it requires, version, threshold, ``__call__``.
- :mod:`.registry` — name → metric; reads the built-ins from :mod:`.builtin`, which lists
  them once; users add their own with :func:`register`.
- local metrics (no judge): :mod:`.rouge`, :mod:`.bleu`, :mod:`.overlap` (token F1, exact
  match), :mod:`.rgb` (RGB's accuracy, rejection, error detection/correction), listed in
  :mod:`.local`; their text helpers in :mod:`.text`.
- agent checks (no judge): :mod:`.agent` (tool errors, unknown tools, invalid arguments,
  repeats and loops, steps, model calls, no answer; analysis in :mod:`.agent_checks`, schema
  validation in :mod:`.jsonschema_lite`) and :mod:`.trajectory` (Ragas tool-call accuracy/F1
  and agentevals trajectory matches against a route's expected calls).
- judge metrics: :mod:`.judged` (Valor's suite, saga's binary judges, G-Eval), :mod:`.ragas`,
  :mod:`.rgb_abilities` (``rgb_noise``), :mod:`.saga_extra` (GPTScore, SelfCheckGPT).
"""

from __future__ import annotations

from .base import Metric
from .registry import available, get, register, resolve

__all__ = ["Metric", "available", "get", "register", "resolve"]
