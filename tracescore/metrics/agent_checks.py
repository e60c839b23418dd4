"""What is wrong with an agent run, call by call: the analysis behind the agent metrics
(:mod:`.agent`) and the steps ``tracescore show`` marks. Pure computation, no I/O.

A call is checked for: its outcome (an error, or no result seen), whether its tool was among
those offered to the model, whether its arguments validate against the tool's declared JSON
schema (:mod:`.jsonschema_lite`), and whether it repeats an earlier call exactly (same tool,
same arguments, compared as canonical JSON). The run is checked for a loop: the same tool
called in :data:`LOOP_STEPS` or more consecutive agent steps, whatever the arguments.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..record import AgentRun
from .jsonschema_lite import validate

__all__ = ["LOOP_STEPS", "Findings", "analyse", "call_key"]

#: Consecutive agent steps calling the same tool that count as a loop.
LOOP_STEPS = 4


def call_key(name: str, arguments: Any) -> tuple[str, str]:
    """A call's identity: its tool and its arguments as canonical JSON."""
    try:
        return name, json.dumps(arguments, sort_keys=True, ensure_ascii=False, default=repr)
    except (TypeError, ValueError, RecursionError):
        return name, repr(arguments)


@dataclass
class Findings:
    """Indices into ``agent.calls``; ``invalid``: call → the schema violations;
    ``unchecked``: calls to offered tools whose arguments could not be checked (no schema
    declared, arguments cut for size); ``repeats``: call → the earlier identical call;
    ``loop``: (tool, steps in a row, first step) of the longest same-tool run of steps, when it
    reaches ``loop_steps``."""

    failed: list[int] = field(default_factory=list)
    unknown: list[int] = field(default_factory=list)
    invalid: dict[int, list[str]] = field(default_factory=dict)
    unchecked: list[int] = field(default_factory=list)
    repeats: dict[int, int] = field(default_factory=dict)
    loop: tuple[str, int, int] | None = None
    tools_known: bool = False
    schemas_known: bool = False

    def marks(self, i: int) -> list[str]:
        """What ``show`` prints beside call ``i``."""
        out = []
        if i in self.unknown:
            out.append("UNKNOWN TOOL (not offered)")
        if i in self.invalid:
            out.append("INVALID ARGUMENTS: " + "; ".join(self.invalid[i]))
        if i in self.failed:
            out.append("FAILED")
        if i in self.repeats:
            out.append(f"REPEATS call #{self.repeats[i] + 1}")
        return out


def analyse(agent: AgentRun, loop_steps: int = LOOP_STEPS) -> Findings:
    f = Findings()
    schemas: dict[str, Mapping[str, Any] | None] = {t.name: t.schema for t in agent.tools}
    f.tools_known = bool(schemas)
    f.schemas_known = any(s is not None for s in schemas.values())
    seen: dict[tuple[str, str], int] = {}
    for i, c in enumerate(agent.calls):
        if not c.ok:
            f.failed.append(i)
        if f.tools_known and c.name not in schemas:
            f.unknown.append(i)
        elif c.name in schemas:
            schema = schemas[c.name]
            if schema is None or c.arguments_cut:
                f.unchecked.append(i)
            else:
                errors = validate(c.arguments, schema)
                if errors:
                    f.invalid[i] = errors
        key = call_key(c.name, c.arguments)
        if key in seen:
            f.repeats[i] = seen[key]
        else:
            seen[key] = i
    f.loop = _loop(agent, loop_steps)
    return f


def _loop(agent: AgentRun, loop_steps: int) -> tuple[str, int, int] | None:
    """The longest run of consecutive steps that each call one same tool."""
    by_step: dict[int, set[str]] = {}
    for c in agent.calls:
        by_step.setdefault(c.step, set()).add(c.name)
    best: tuple[str, int, int] | None = None
    runs: dict[str, tuple[int, int]] = {}  # tool → (length, first step) of its current run
    prev = None
    for step in sorted(by_step):
        nxt: dict[str, tuple[int, int]] = {}
        for name in by_step[step]:
            length, first = runs.get(name, (0, step)) if prev == step - 1 else (0, step)
            nxt[name] = (length + 1, first)
            if best is None or length + 1 > best[1]:
                best = (name, length + 1, first)
        runs, prev = nxt, step
    return best if best is not None and best[1] >= loop_steps else None
