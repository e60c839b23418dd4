"""The metrics of the fleet tests' ``tracescore serve`` processes (--metrics-module)."""

from helpers import AnswerLength, ContextCount

METRICS = [ContextCount(), AnswerLength()]
