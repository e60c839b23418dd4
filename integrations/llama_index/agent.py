"""An agent's tool calls, from LlamaIndex's instrumentation (request path: bounded appends).

Read from LlamaIndex's own objects:

- the tools offered: the ``tools`` a chat call was given (``LLMChatStartEvent``'s
  ``additional_kwargs``, what ``FunctionAgent`` passes to ``astream_chat_with_tools``), or,
  for agents that describe their tools in the prompt (``ReActAgent``), the ``tools`` of the
  workflow agent the request runs (of each agent of an ``AgentWorkflow``) when its first tool
  call runs;
- the calls asked for: the ``ToolCallBlock`` blocks (or ``tool_calls`` in the message's
  ``additional_kwargs``) of the message each agent step's chat call returned, and the
  ``ToolCall`` event each ``call_tool`` workflow step receives (a ReAct agent's calls exist
  only there); the agent's steps are its chat calls outside tools;
- their outcomes: the ``ToolCallResult`` the ``call_tool`` step returns — its
  ``ToolOutput.is_error`` is set for an unknown tool ("Tool x not found") and for a tool
  that raised.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tracescore._internal.tool_calls import AgentTrace

from ._model import TOOL, Node, Run

CALL_TOOL = "call_tool"


def _trace(run: Run) -> AgentTrace:
    if run.agent is None:
        run.agent = AgentTrace()
    return run.agent


def _in_tool(node: Node) -> bool:
    p = node.parent
    while p is not None:
        if p.kind == TOOL:
            return True
        p = p.parent
    return False


def chat_start(node: Node, run: Run, event: Any) -> None:
    """A chat call started (its outer LLM span, once): count it; an agent step notes the
    tools it was offered."""
    run.model_calls += 1
    if _in_tool(node):
        return
    run.agent_steps += 1
    node.agent_step = run.agent_steps
    extra = getattr(event, "additional_kwargs", None)
    tools = extra.get("tools") if isinstance(extra, Mapping) else None
    if tools:
        _trace(run).offer(tools)
    if run.agent is not None:
        run.agent.steps = run.agent_steps


def chat_end(node: Node, run: Run, event: Any) -> None:
    """An agent step's chat call ended: the tool calls its message asks for."""
    if not node.agent_step:
        return
    message = getattr(getattr(event, "response", None), "message", None)
    if message is None:
        return
    asked: list[tuple[Any, Any, Any]] = []
    for b in getattr(message, "blocks", None) or ():
        if getattr(b, "block_type", None) == "tool_call":
            asked.append((getattr(b, "tool_name", None), getattr(b, "tool_kwargs", None),
                          getattr(b, "tool_call_id", None)))
    if not asked:
        extra = getattr(message, "additional_kwargs", None)
        for c in (extra.get("tool_calls") or ()) if isinstance(extra, Mapping) else ():
            fn = c.get("function") if isinstance(c, Mapping) else getattr(c, "function", None)
            name = fn.get("name") if isinstance(fn, Mapping) else getattr(fn, "name", None)
            args = fn.get("arguments") if isinstance(fn, Mapping) else getattr(
                fn, "arguments", None)
            cid = c.get("id") if isinstance(c, Mapping) else getattr(c, "id", None)
            asked.append((name, args, cid))
    if not asked:
        return
    agent = _trace(run)
    agent.steps = run.agent_steps
    for name, args, cid in asked:
        agent.ask(name, args, cid, node.agent_step)


def workflow_tools(workflow: Any) -> list[Any]:
    """The tools of the workflow agent that runs the request (an ``AgentWorkflow``: of each
    of its agents)."""
    tools = getattr(workflow, "tools", None)
    if isinstance(tools, (list, tuple)):
        return list(tools)
    agents = getattr(workflow, "agents", None)
    out: list[Any] = []
    for a in (agents.values() if isinstance(agents, Mapping) else ()):
        got = getattr(a, "tools", None)
        if isinstance(got, (list, tuple)):
            out.extend(got)
    return out


def call_tool_enter(run: Run, instance: Any, bound_args: Any) -> None:
    """A workflow agent's ``call_tool`` step starts with its ``ToolCall`` event."""
    ev = bound_args.arguments.get("ev") if bound_args is not None else None
    name = getattr(ev, "tool_name", None)
    if not isinstance(name, str):
        return
    agent = _trace(run)
    if not agent.tools:  # tools described in the prompt (ReAct): the agent's own list
        tools = workflow_tools(run.workflow)
        if tools:
            agent.offer(tools)
    agent.ask(name, getattr(ev, "tool_kwargs", None), getattr(ev, "tool_id", None),
              max(run.agent_steps, 1))


def call_tool_result(run: Run, result: Any) -> None:
    """The ``ToolCallResult`` a ``call_tool`` step returned."""
    agent = run.agent
    if agent is None:
        return
    output = getattr(result, "tool_output", None)
    content = getattr(output, "content", None)
    if getattr(output, "is_error", False):
        agent.resolve(getattr(result, "tool_id", None), False, error=content or "error")
    else:
        agent.resolve(getattr(result, "tool_id", None), True, result=content)
