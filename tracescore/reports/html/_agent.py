"""An agent run in a report's record card: its steps, each tool call with its arguments and
outcome, the failed checks marked on the call (the same marks as ``tracescore show``,
:mod:`..agent_view`). Renders the record's decoded ``agent`` part: no connection, no queries;
every captured text goes through :func:`html.escape`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from ...metrics.agent_checks import analyse
from ...store.agent_rows import agent_from_json
from ..agent_view import CHECKS

MAX_CHARS = 200


def _short(text: str | None) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= MAX_CHARS else text[:MAX_CHARS] + "…"


def agent_html(agent_json: Any, scores: Sequence[Mapping[str, Any]]) -> str:
    agent = agent_from_json(agent_json)
    if agent is None:
        return ""
    f = analyse(agent)
    failed = [s["name"] for s in scores if s.get("name") in CHECKS
              and s.get("status") == "ok" and s.get("label") == "fail"]
    by_step: dict[int, list[int]] = {}
    for i, c in enumerate(agent.calls):
        by_step.setdefault(c.step, []).append(i)
    steps = []
    last = max([agent.steps, *by_step]) if by_step or agent.steps else 0
    for step in range(1, last + 1):
        calls = []
        for i in by_step.get(step, []):
            c = agent.calls[i]
            args = json.dumps(c.arguments, ensure_ascii=False, default=repr)
            outcome = (f'<span class="good">→ {escape(_short(c.result))}</span>' if c.ok
                       else f'<span class="bad">→ error: {escape(_short(c.error))}</span>')
            marks = "".join(f'<li class="bad">{escape(m)}</li>' for m in f.marks(i))
            calls.append(f'<li><span class="mono">#{i + 1} {escape(c.name)}'
                         f"({escape(_short(args))})</span> {outcome}"
                         + (f'<ul class="marks">{marks}</ul>' if marks else "") + "</li>")
        loop = ""
        if f.loop and f.loop[2] <= step < f.loop[2] + f.loop[1]:
            loop = f' <span class="bad">loop: {escape(f.loop[0])}</span>'
        body = f"<ul>{''.join(calls)}</ul>" if calls else \
            '<span class="missing">no tool call: answered or stopped</span>'
        steps.append(f"<li><b>step {step}</b>{loop} {body}</li>")
    tools = ", ".join(t.name for t in agent.tools) or "not captured"
    head = (f"agent run: {agent.steps} steps, {len(agent.calls)} tool calls, "
            f"{agent.model_calls} model calls")
    if failed:
        head += f" — failed: {', '.join(failed)}"
    return (f'<details class="agent"{" open" if failed else ""}><summary>{escape(head)}'
            f'</summary><p class="meta">tools offered: {escape(tools)}</p>'
            f"<ol class=\"steps\">{''.join(steps)}</ol></details>")
