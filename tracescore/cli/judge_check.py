"""``tracescore judge-check``'s work: reach the judge, run the canary, turn every way it can
fail into one line and an exit code of its own (never a traceback).

Exit codes (the command's help and docs/cli.md say the same):

- 0: the judge agrees with the known answers;
- 1: the judge is degenerate (always the same verdict, or agreement near chance);
- 2: a usage error (an unknown ``--judge`` spec, a missing key, a database that cannot be
  opened);
- 3: the judge cannot be reached or does not answer (connection refused, DNS, no answer
  within the timeout, server errors or rate limits through every retry): no verdict;
- 4: the judge answered but refused every request (a bad key, an unknown model) or the check
  failed otherwise: no verdict.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator
from typing import Any

import click

__all__ = ["EXIT_REFUSED", "EXIT_UNREACHABLE", "JudgeProblem", "run_judge_check"]

EXIT_UNREACHABLE = 3
EXIT_REFUSED = 4

#: The up-front reachability check waits at most this long (or ``--timeout`` if shorter).
REACH_TIMEOUT_S = 10.0


class JudgeProblem(click.ClickException):
    """The judge gave no verdict: one line on stderr, its own exit code."""

    def __init__(self, message: str, exit_code: int) -> None:
        from .._internal.secrets import scrub

        super().__init__(scrub(" ".join(message.split())))
        self.exit_code = exit_code  # type: ignore[misc]  # per instance: 3 or 4


def run_judge_check(backend: Any, db: str, timeout_s: float) -> Any:
    """Run the canary against ``backend`` (from :func:`tracescore.judge.resolve_judge`),
    caching verdicts and storing the result in ``db``; the :class:`CanaryResult`, or
    :class:`JudgeProblem` when the judge gave no verdict."""
    from ..judge import ResilientJudge, RetryPolicy
    from ..judge.base import JudgeError, RetryLater, TransientJudgeError
    from ..judge.canary import run_canary
    from ..judge.outage import check_reachable, judge_where
    from ..judge.session import JudgeSession

    where = judge_where(backend)
    problem = check_reachable(backend, min(timeout_s, REACH_TIMEOUT_S))
    if problem is not None:
        raise JudgeProblem(problem, EXIT_UNREACHABLE)
    seen = {"answers": 0, "refusals": 0}
    last: list[BaseException] = []

    def on_call(reply: Any, exc: BaseException | None) -> None:
        if exc is None:
            seen["answers"] += 1
        elif isinstance(exc, JudgeError) and not isinstance(exc, TransientJudgeError):
            seen["refusals"] += 1
            last[:] = [exc]

    resilient = ResilientJudge(backend, policy=RetryPolicy(timeout_s=timeout_s),
                               on_call=on_call)
    resilient.outage.announce = False  # said below, in one line

    async def check() -> Any:
        session = JudgeSession(resilient, db)
        try:
            return await run_canary(session)
        finally:
            session.close()
            await backend.aclose()

    try:
        with _library_logs_quiet():
            result = asyncio.run(check())
    except RetryLater as exc:
        raise JudgeProblem(_down_line(where, resilient.outage.current, exc.reason),
                           EXIT_UNREACHABLE) from None
    except JudgeError as exc:
        raise JudgeProblem(f"{where} gave no verdict: {exc}", EXIT_REFUSED) from None
    except (KeyboardInterrupt, click.ClickException):
        raise
    except Exception as exc:  # one line, never a traceback (the message names the type)
        raise JudgeProblem(f"judge-check against {where} failed: {type(exc).__name__}: {exc}",
                           EXIT_REFUSED) from None
    if seen["refusals"] and not seen["answers"]:
        raise JudgeProblem(f"{where} refused every request: {last[0]}", EXIT_REFUSED)
    return result


def _down_line(where: str, down: dict[str, Any] | None, fallback: str) -> str:
    """"cannot reach the judge at URL: connection refused", "... did not answer: no answer
    within 60 s", "... keeps failing: judge server error (503)"."""
    if down is None:
        return f"{where} gave no verdict: {fallback}"
    if down["state"] == "unreachable":
        return f"cannot reach {where}: {down['cause']}"
    if down["state"] == "not answering":
        return f"{where} did not answer: {down['cause']}"
    return f"{where} keeps failing: {down['last_failure']}"


@contextlib.contextmanager
def _library_logs_quiet() -> Iterator[None]:
    """The command says the outcome itself: the library's own warnings (the outage, the
    canary's verdict) would print a second line through logging's last-resort handler, so
    they are dropped unless the user configured logging."""
    logger = logging.getLogger("tracescore")
    if logger.handlers or logging.getLogger().handlers:
        yield
        return
    null = logging.NullHandler()
    logger.addHandler(null)
    try:
        yield
    finally:
        logger.removeHandler(null)
