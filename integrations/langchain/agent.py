"""An agent's tool calls, from LangChain's callbacks (request path: bounded appends).

Read from the framework's own objects, never from formatted text:

- the tools offered: the ``tools`` of the chat model's ``invocation_params`` (what
  ``bind_tools`` bound, in the provider's format);
- the calls asked for: the ``tool_calls`` (and ``invalid_tool_calls``: arguments that were not
  JSON) of the ``AIMessage`` each model call of the agent returned — the agent's steps are its
  model calls outside tools and retrievers;
- their outcomes: the tool run's end (its ``ToolMessage``, whose ``status`` is ``"error"`` when
  the tool node caught an exception) or error, and otherwise the ``ToolMessage`` the next model
  call was shown — LangGraph's ``ToolNode`` answers a call of an unknown tool with an error
  ``ToolMessage`` without running any tool.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

from tracescore._internal.tool_calls import AgentTrace

from .messages import is_map
from .runs import _Root, _Run

#: Messages scanned backwards for tool replies in one prompt.
MAX_SCAN = 256
#: Agent events a request stored compact keeps for later (:func:`note`); past it they are
#: applied at once (a long agent run's log stays bounded, as its trace is).
MAX_LOG = 512


def note(root: _Root, fn: Any, *args: Any) -> None:
    """Apply an agent event ``fn(*args)`` now, or — a request its trace fraction leaves
    unsampled (stored compact, whose record keeps no agent part) — log it: :func:`settle`
    applies the log, in order, only if the record is built in full after all (a rule forced
    it, ``keep_full_text``; on the writer thread for a record built there). Request path:
    one tuple appended instead of the tool-call bookkeeping."""
    log = root.agent_log
    if log is None:
        fn(*args)
    elif len(log) < MAX_LOG:
        log.append((fn, args))
    else:
        settle(root)
        fn(*args)


def settle(root: _Root) -> None:
    """Apply the logged agent events (:func:`note`); later events are applied at once."""
    log = root.agent_log
    if log is None:
        return
    root.agent_log = None
    for fn, args in log:
        fn(*args)


def final_replies(root: _Root, outputs: Any) -> None:
    """At the root's end: outcomes of calls still pending from the run's final messages
    (the replies the last model call, or nobody, saw)."""
    agent = root.agent
    if agent is not None and agent.unresolved():
        tool_replies(agent, outputs)


def _trace(root: _Root) -> AgentTrace:
    if root.agent is None:
        root.agent = AgentTrace()
    return root.agent


def model_start(root: _Root, run: _Run, params: Mapping[str, Any], prompt: Any) -> None:
    """A model call started: count it; an agent step (outside tools and retrievers) notes
    the tools offered and the replies to the previous step's calls in its prompt."""
    root.model_calls += 1
    if run.tool_call is not None or run.retriever is not None:
        return
    root.steps += 1
    run.agent_step = root.steps
    tools = params.get("tools") if is_map(params) else None
    if tools:
        agent = _trace(root)
        agent.offer(tools)
    agent = root.agent
    if agent is not None:
        agent.steps = root.steps
        if agent.calls and agent.unresolved():
            tool_replies(agent, prompt)


def model_end(run: _Run, response: Any) -> None:
    """An agent step's model call ended: the tool calls its message asks for."""
    if not run.agent_step:
        return
    gens = getattr(response, "generations", None) or []
    msg = getattr(gens[0][0], "message", None) if gens and gens[0] else None
    calls = getattr(msg, "tool_calls", None)
    invalid = getattr(msg, "invalid_tool_calls", None)
    if not calls and not invalid:
        return
    agent = _trace(run.root)
    agent.steps = run.root.steps
    for c in calls or ():
        if is_map(c):
            agent.ask(c.get("name"), c.get("args"), c.get("id"), run.agent_step)
    for c in invalid or ():  # arguments that did not parse: a call that cannot have run
        if is_map(c):
            agent.ask(c.get("name"), c.get("args"), c.get("id"), run.agent_step)
            agent.resolve(c.get("id"), False, error=c.get("error") or "invalid tool call")


def tool_end(run: _Run, output: Any) -> None:
    agent = run.root.agent
    if agent is None:
        return
    call = getattr(output, "tool_call_id", None)
    if not isinstance(call, str):
        call = _own_call(run)
    if call is None:
        return
    if getattr(output, "status", None) == "error":
        agent.resolve(call, False, error=output)
    else:
        agent.resolve(call, True, result=output)


def tool_error(run: _Run, error: BaseException) -> None:
    agent = run.root.agent
    call = _own_call(run)
    if agent is not None and call is not None:
        agent.resolve(call, False, error=error)


def _own_call(run: _Run) -> str | None:
    """The tool run's own call id (not one inherited from an enclosing tool run)."""
    if not run.is_tool or run.tool_call is None:
        return None
    if run.parent is not None and run.parent.tool_call == run.tool_call:
        return None
    return run.tool_call


def tool_replies(agent: AgentTrace, messages: Any) -> None:
    """Outcomes of pending calls from the ``ToolMessage`` replies in ``messages`` (a prompt, or
    a graph's final ``messages``), scanned from the end; a known outcome is kept."""
    if is_map(messages):
        messages = messages.get("messages")
    if not isinstance(messages, (list, tuple)):
        return
    for m in itertools.islice(reversed(messages), MAX_SCAN):
        if getattr(m, "type", None) != "tool":
            continue
        call = getattr(m, "tool_call_id", None)
        if getattr(m, "status", None) == "error":
            agent.resolve(call, False, error=m, first=True)
        else:
            agent.resolve(call, True, result=m, first=True)
