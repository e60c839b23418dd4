"""Deterministic agent checks: local metrics over a record's tool calls (no judge, no
reference). The analysis is :mod:`.agent_checks`; docs/agents.md explains each check and
its limits.

Every check requires an agent run (:data:`~tracescore.record.AGENT`: the record carries tool
calls or the tools offered): a plain RAG chain's record is skipped with that reason, never
scored 0. A check that needs what was not captured (the offered tools, their schemas) is
skipped with the reason. Yes/no checks are 1 when the problem was found (lower is better), so
a report's rate is the share of runs with the problem and ``compare`` tests its change.
"""

from __future__ import annotations

from ..record import AGENT, RagRecord
from ..score import Score
from .agent_checks import LOOP_STEPS, analyse
from .base import Metric

__all__ = ["AGENT_CHECKS", "AgentModelCalls", "AgentNoAnswer", "AgentSteps",
           "InvalidToolArguments", "RepeatedToolCalls", "ToolErrorRate", "UnknownToolCalls"]


class _AgentCheck(Metric):
    kind = "local"
    version = "1"
    requires = frozenset({AGENT})
    higher_is_better = False
    on_write_chars = 0  # scored by the worker: a record's calls can be many

    def _skip(self, reason: str) -> Score:
        return Score.skipped(self.name, reason, metric=self.name, metric_version=self.version)


def _calls(indices: list[int], record: RagRecord) -> str:
    assert record.agent is not None
    calls = record.agent.calls
    return ", ".join(f"#{i + 1} {calls[i].name} (step {calls[i].step})" for i in indices[:10]) \
        + (" …" if len(indices) > 10 else "")


class ToolErrorRate(_AgentCheck):
    """The share of the run's tool calls that failed: the tool raised, the framework answered
    with an error (an unknown tool, arguments it rejected), or no result was seen."""

    name = "tool_error_rate"
    value_range = (0.0, 1.0)
    description = "Share of the agent's tool calls that failed (error or no result)."

    def __init__(self, *, threshold: float | None = 0.0) -> None:
        self.threshold = threshold

    def __call__(self, record: RagRecord) -> Score:
        agent = record.agent
        assert agent is not None
        if not agent.calls:
            return self._skip("no tool calls")
        f = analyse(agent)
        n = len(agent.calls)
        expl = f"{len(f.failed)} of {n} tool calls failed"
        if f.failed:
            expl += ": " + _calls(f.failed, record)
        return self.result(len(f.failed) / n, expl,
                           details={"failed": f.failed, "calls": n})


class _Flag(_AgentCheck):
    binary = True
    value_range = (0.0, 1.0)
    threshold = 0.5


class UnknownToolCalls(_Flag):
    """1 when the agent called a tool that was not offered to the model (a hallucinated tool
    name); skipped when the offered tools were not captured."""

    name = "unknown_tool_calls"
    description = "1 if the agent called a tool that was not offered to the model."

    def __call__(self, record: RagRecord) -> Score:
        agent = record.agent
        assert agent is not None
        f = analyse(agent)
        if not f.tools_known:
            return self._skip("the tools offered to the model were not captured")
        if not f.unknown:
            return self.result(0.0, f"all {len(agent.calls)} calls name offered tools")
        names = sorted({agent.calls[i].name for i in f.unknown})
        return self.result(1.0, f"{len(f.unknown)} calls of tools not offered "
                           f"({', '.join(names)}): {_calls(f.unknown, record)}",
                           details={"calls": f.unknown, "tools": names})


class InvalidToolArguments(_Flag):
    """1 when a call's arguments do not validate against its tool's declared JSON schema
    (a JSON-schema subset, :mod:`.jsonschema_lite`); skipped when no offered tool declared a
    schema. Calls of unknown tools, of tools without a schema, and arguments cut for size are
    not checked (counted in the details)."""

    name = "invalid_tool_arguments"
    description = "1 if a tool call's arguments break the tool's declared JSON schema."

    def __call__(self, record: RagRecord) -> Score:
        agent = record.agent
        assert agent is not None
        f = analyse(agent)
        if not f.schemas_known:
            return self._skip("no offered tool declared a JSON schema")
        checked = len(agent.calls) - len(f.unknown) - len(f.unchecked)
        details = {"checked": checked, "unchecked": f.unchecked,
                   "invalid": {str(i): e for i, e in f.invalid.items()}}
        if not f.invalid:
            return self.result(0.0, f"{checked} calls checked, all valid", details=details)
        parts = [f"#{i + 1} {agent.calls[i].name} (step {agent.calls[i].step}): "
                 + "; ".join(e[:3]) for i, e in list(f.invalid.items())[:5]]
        return self.result(1.0, f"{len(f.invalid)} of {checked} checked calls have invalid "
                           "arguments: " + " | ".join(parts), details=details)


class RepeatedToolCalls(_Flag):
    """1 when the agent repeated a call exactly (same tool, same arguments) or looped: called
    the same tool in ``loop_steps`` (default 4) consecutive steps."""

    name = "repeated_tool_calls"
    description = ("1 if the agent repeated an identical tool call or called one tool in "
                   f"{LOOP_STEPS}+ consecutive steps (a loop).")

    def __init__(self, *, loop_steps: int = LOOP_STEPS) -> None:
        if loop_steps < 2:
            raise ValueError("loop_steps must be at least 2")
        self.loop_steps = loop_steps

    def __call__(self, record: RagRecord) -> Score:
        agent = record.agent
        assert agent is not None
        f = analyse(agent, self.loop_steps)
        details = {"repeats": {str(i): j for i, j in f.repeats.items()},
                   "loop": list(f.loop) if f.loop else None}
        parts = []
        if f.repeats:
            parts.append(f"{len(f.repeats)} identical repeats: " + ", ".join(
                f"#{i + 1} repeats #{j + 1} ({agent.calls[i].name})"
                for i, j in list(f.repeats.items())[:5]))
        if f.loop:
            tool, n, first = f.loop
            parts.append(f"loop: {tool} called in {n} consecutive steps from step {first}")
        if not parts:
            return self.result(0.0, f"{len(agent.calls)} calls, no repeats, no loop",
                               details=details)
        return self.result(1.0, "; ".join(parts), details=details)


class AgentNoAnswer(_Flag):
    """1 when the agent run ended without an answer (no final text: it stopped on an error,
    a step limit, or a tool call that was never answered)."""

    name = "agent_no_answer"
    description = "1 if the agent run ended without an answer."

    def __call__(self, record: RagRecord) -> Score:
        if record.answer is not None and record.answer.strip():
            return self.result(0.0, "answered")
        why = f"ended with an error: {record.error}" if record.error else "no final answer"
        if not record.content_captured:
            return self._skip("content capture is off: the answer was not kept")
        return self.result(1.0, why[:500])


class _Count(_AgentCheck):
    higher_is_better = False
    threshold = None


class AgentSteps(_Count):
    """The agent's steps in the request: its own model turns (model calls outside tools and
    retrievers); each turn may ask for several tool calls."""

    name = "agent_steps"
    description = "Agent steps (its own model turns) in the request."

    def __call__(self, record: RagRecord) -> Score:
        agent = record.agent
        assert agent is not None
        return self.result(float(agent.steps), f"{agent.steps} steps, "
                           f"{len(agent.calls)} tool calls")


class AgentModelCalls(_Count):
    """Every model call of the request (the agent's turns and any model call inside its
    tools or retrievers): the request's model cost in calls."""

    name = "agent_model_calls"
    description = "Model calls in the request (agent turns and calls inside tools)."

    def __call__(self, record: RagRecord) -> Score:
        agent = record.agent
        assert agent is not None
        return self.result(float(agent.model_calls), f"{agent.model_calls} model calls")


#: The reference-free agent checks, in the order ``show`` and the docs list them.
AGENT_CHECKS: tuple[type[Metric], ...] = (
    ToolErrorRate, UnknownToolCalls, InvalidToolArguments, RepeatedToolCalls, AgentNoAnswer,
    AgentSteps, AgentModelCalls,
)
