"""A judge that cannot be reached, said out loud: where it is, why, since when, and what
happens to the jobs.

:class:`Outage` follows one :class:`~.resilience.ResilientJudge`'s run of transient failures.
When the circuit breaker opens it logs ONE WARNING (rate-limited across outages: a judge that
flaps does not fill the log) naming the judge's base URL (never its key), the cause and the
jobs' fate; when the judge answers again, one INFO. While the outage lasts, :meth:`reason` is
the text every deferred job carries in ``jobs.reason`` — the database is what ``tracescore
report`` reads in another process, so the reason has to live there, not in this process.

:func:`check_reachable` is the CLI's up-front check (``judge-check``, ``demo``): one HTTP GET
of ``{base_url}/models`` with a short timeout. Any HTTP answer means the server is there (a
404 included: not every OpenAI-compatible server lists models); a refused connection, a DNS
failure or no answer within the timeout is a one-line reason, in seconds rather than after
the judge's retries (minutes against a server that accepts and never answers).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

__all__ = ["Outage", "check_reachable", "failure_cause", "judge_url", "judge_where"]

log = logging.getLogger("tracescore")

#: Outages starting within this many seconds of the last WARNING are logged at INFO instead.
WARN_EVERY_S = 600.0

_UNREACHABLE_TYPES = ("APIConnectionError", "ConnectError", "RemoteProtocolError",
                      "ReadError", "WriteError", "NetworkError", "ProxyError")
_TIMEOUT_TYPES = ("APITimeoutError", "ReadTimeout", "ConnectTimeout", "WriteTimeout",
                  "PoolTimeout", "TimeoutException")


def _safe_url(url: str) -> str:
    """``url`` without user info, query or fragment (where credentials could hide)."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return "(unparsable URL)"
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    netloc = host + (f":{port}" if port else "")
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", "")).rstrip("/")


def judge_url(backend: Any) -> str | None:
    """The base URL a judge backend sends its requests to (None for an in-process model),
    with no credentials in it."""
    url = getattr(backend, "base_url", None)
    if url is None:
        client = getattr(backend, "_client", None)  # OpenAIJudge's AsyncOpenAI client
        url = getattr(client, "base_url", None)
    return _safe_url(str(url)) if url else None


def judge_where(backend: Any) -> str:
    """"the judge at URL" or "the judge MODEL" (a backend without a URL)."""
    url = judge_url(backend)
    if url:
        return f"the judge at {url}"
    return f"the judge {getattr(backend, 'model', '') or type(backend).__name__}"


def _chain(exc: BaseException) -> list[BaseException]:
    out: list[BaseException] = []
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen and len(out) < 20:
        seen.add(id(e))
        out.append(e)
        e = e.__cause__ or e.__context__
    return out


def _strerror(e: OSError) -> str:
    """"connection refused", "name or service not known": the system's words, not
    asyncio's ("Connect call failed ('127.0.0.1', 8000)")."""
    if isinstance(e.errno, int) and e.errno > 0 and not isinstance(e, socket.gaierror):
        text = os.strerror(e.errno)
    else:
        text = e.strerror or ""
    if not text and e.args:
        text = str(e.args[-1]) if len(e.args) > 1 else str(e.args[0])
    return text[:1].lower() + text[1:] if text else type(e).__name__


def failure_cause(exc: BaseException, timeout_s: float | None = None) -> tuple[str, str]:
    """(state, cause) of a transient failure: ("unreachable", "connection refused"),
    ("not answering", "no answer within 60 s") or ("failing", the error's text)."""
    chain = _chain(exc)
    names = [type(e).__name__ for e in chain]
    if any(n in _TIMEOUT_TYPES for n in names) or isinstance(exc, asyncio.TimeoutError) or \
            "timed out" in str(exc):
        return "not answering", (f"no answer within {timeout_s:g} s" if timeout_s
                                 else "no answer in time")
    for e in chain:
        if isinstance(e, OSError) and not isinstance(e, TimeoutError) and \
                (e.errno is not None or e.strerror):
            return "unreachable", _strerror(e)
    if any(n in _UNREACHABLE_TYPES for n in names):
        bare = [e for e in chain if isinstance(e, OSError) and str(e)]
        return "unreachable", str(bare[-1]) if bare else "connection failed"
    return "failing", str(exc)[:300]


def _utc(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t))


def _duration(s: float) -> str:
    if s < 10:
        return f"{s:.2g} s"
    if s < 90:
        return f"{s:.0f} s"
    if s < 5400:
        return f"{s / 60:.0f} min"
    return f"{s / 3600:.1f} h"


@dataclass
class _Down:
    since: float  # time.time() of the first failure of the run
    state: str
    cause: str
    last_failure: str
    warned: bool = False


class Outage:
    """The judge's current outage (if any), its reason text and its log lines.

    ``where``: "the judge at URL"; ``cooldown_s``: the breaker's probe interval;
    ``max_wait_s``: how long a job may wait before it becomes an error score (the worker's
    ``judge_max_wait_s``; None: not known here, named by its option)."""

    def __init__(self, where: str, cooldown_s: float, max_wait_s: float | None = None) -> None:
        self.where = where
        self.cooldown_s = cooldown_s
        self.max_wait_s = max_wait_s
        self.warn_every_s = WARN_EVERY_S
        #: False: no log lines (a CLI command that says the outage itself, in one line)
        self.announce = True
        self._down: _Down | None = None
        self._last_warning: float | None = None  # time.monotonic()
        self.warnings = 0

    @property
    def current(self) -> dict[str, Any] | None:
        """The outage as data (for ``stats()``), or None while the judge answers."""
        d = self._down
        if d is None:
            return None
        return {"judge": self.where, "since": d.since, "state": d.state, "cause": d.cause,
                "last_failure": d.last_failure, "reason": self.reason()}

    def failed(self, exc: BaseException, text: str, timeout_s: float | None) -> None:
        """A transient failure (``text``: the error as the breaker keeps it)."""
        state, cause = failure_cause(exc, timeout_s)
        if self._down is None:
            self._down = _Down(time.time(), state, cause, text)
        else:
            self._down.state, self._down.cause, self._down.last_failure = state, cause, text

    def breaker_opened(self) -> None:
        """The breaker just opened: jobs start waiting. Said once per outage."""
        d = self._down
        if d is None or d.warned or not self.announce:
            return
        d.warned = True
        now = time.monotonic()
        level = logging.WARNING
        if self._last_warning is not None and now - self._last_warning < self.warn_every_s:
            level = logging.INFO  # a flapping judge: one WARNING per warn_every_s
        else:
            self._last_warning = now
            self.warnings += 1
        wait = (f"after {_duration(self.max_wait_s)} (judge_max_wait_s)"
                if self.max_wait_s is not None else
                "after judge_max_wait_s (6 h unless set in init)")
        log.log(level, "tracescore: %s is %s since %s (%s): judge metrics are deferred — their "
                "jobs stay queued in the database and are retried when it answers (a probe "
                "every %s); a job still waiting %s becomes an error score. The app is not "
                "affected; `tracescore report` shows the waiting jobs.", self.where, d.state,
                _utc(d.since), self._cause_text(d), _duration(self.cooldown_s), wait)

    def answered(self) -> None:
        """A call got an answer: the outage (if any) is over."""
        d, self._down = self._down, None
        if d is not None and d.warned:
            log.info("tracescore: %s answers again after %s; the waiting judge jobs are being "
                     "scored.", self.where, _duration(time.time() - d.since))

    @staticmethod
    def _cause_text(d: _Down) -> str:
        return d.cause if d.state != "failing" else f"last failure: {d.last_failure}"

    def reason(self, fallback: str = "") -> str:
        """The reason a job waits, one line: "waiting for the judge at URL (unreachable since
        T: connection refused)"; ``fallback`` when no outage is known."""
        d = self._down
        if d is None:
            return fallback
        sep = ": " if d.state != "failing" else "; "
        return (f"waiting for {self.where} ({d.state} since {_utc(d.since)}{sep}"
                f"{self._cause_text(d)}); retried when it answers")


def check_reachable(backend: Any, timeout_s: float = 5.0) -> str | None:
    """None when the judge's server answers HTTP at all within ``timeout_s`` (or the backend
    has no URL: an in-process model), else one line: "cannot reach the judge at URL:
    connection refused". Blocking; a handful of seconds at most."""
    url = judge_url(backend)
    if url is None:
        return None
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"the judge's base URL {url!r} is not an http(s) URL"
    req = urllib.request.Request(url + "/models", method="GET",
                                 headers={"User-Agent": "tracescore-reachability-check"})
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:  # noqa: S310 (http/s)
            resp.read(1)
    except urllib.error.HTTPError:
        return None  # it answered (401, 404...): the server is there
    except TimeoutError:
        return (f"the judge at {url} accepted the connection but did not answer within "
                f"{timeout_s:g} s")
    except urllib.error.URLError as exc:
        reason = exc.reason
        if isinstance(reason, TimeoutError):
            return (f"the judge at {url} did not answer within {timeout_s:g} s")
        cause = _strerror(reason) if isinstance(reason, OSError) else str(reason)
        return f"cannot reach the judge at {url}: {cause}"
    except (OSError, ValueError) as exc:  # reset, closed mid-answer, bad URL
        _, cause = failure_cause(exc)
        return f"cannot reach the judge at {url}: {cause}"
    return None
