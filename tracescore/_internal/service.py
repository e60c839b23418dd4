"""One background service: a daemon thread that runs a step now and then, written once.

Every loop of tracescore that runs on its own thread (retention, the sessions closer, the
monitor runner, the notifier, the holds reaper, the scoring worker, the queue's writer) HOLDS
one :class:`Service` — composed, not inherited, the way the OpenTelemetry SDK's
``BatchProcessor`` is written once and held by its span, log and metric processors. The
service owns the thread, the stop and wake events, the interval, the deadline of
:meth:`Service.stop`, what happens at ``os.fork()``, and what happens when a step raises;
the loop that holds it owns only its step.

The loop::

    wait first_wait_s (or a wake) → step() → wait what it returned (None: interval_s) → …

- :meth:`~Service.wake` (alias :meth:`~Service.run_now`) makes the next step start at once; a
  wake during a step makes the next one start at once after it (never lost, never doubled).
- :meth:`~Service.stop` sets the stop event, wakes the thread and joins it up to a deadline; a
  step that takes long can watch :attr:`Service.stopping` (an ``Event``) to end early.
- A step that raises never ends the loop silently: the error is counted (``errors``,
  ``last_error``), handed to ``on_error`` (default: the internal-error funnel, which logs it,
  rate-limited, and counts it by place) and the loop goes on after the wait ``on_error``
  returns (None: ``interval_s``). ``on_exit`` runs on the thread when the loop ends (closing
  what the step opened), also after an error.
- After ``os.fork()`` the child has no thread and the parent's events may hold locks taken at
  fork time: the service gets fresh events and no thread, then ``on_fork()`` runs (the holder
  resets what its thread held: connections, loops, leases); with ``restart_after_fork=True``
  one that was running in the parent starts again in the child.
- A step may run for the life of the thread (the scoring worker's step is one run of its
  asyncio loop, which ends when the worker stops or raises): the holder then wakes it its own
  way, and :meth:`~Service.stop` still ends the wait after it (a restart's backoff).
- Registered once for all services through a weak set, so a service that is dropped is not
  kept alive by the fork hook.

The queue's writer thread (:class:`~tracescore.queue.RecordQueue`) holds one too, with the
three abilities the other loops do not use:

- ``wake_event=``: the holder's own ``Event`` is the one the service waits on, so a request
  path wakes it with a bare ``event.set()`` and no call layer (the queue's ``put``). After
  ``os.fork()`` the service makes a fresh one (the parent's may hold a lock taken at fork
  time); the holder reads it back from :attr:`Service.wake_event` in ``on_fork``.
- :attr:`Service.woken`: whether a wake (True) or the end of the wait (False) started the
  step in progress (the writer lingers only when a sampled record woke it). A second,
  "write now" signal that cuts such a linger short, and a backoff that wakes must not cut
  short, live in the step (the holder's own event, waited on there).
- ``drain=``: a callable the thread runs after the stop was requested, instead of ending
  after the step in progress: at least once, then again until it returns True (done) or the
  deadline of :meth:`~Service.stop` passes (``timeout=None``: until done); ``on_exit`` runs
  after it (the writer counts what is still buffered then as lost).

Nothing here runs on the app's request path: :meth:`~Service.start`, :meth:`~Service.wake` and
:meth:`~Service.stop` may be called from any thread, and ``wake`` only sets an event (the
one a holder on the request path sets itself: ``wake_event``).
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from .errors import record_internal_error
from .secrets import scrub

__all__ = ["Service", "deadline_left"]

_services: weakref.WeakSet[Service] = weakref.WeakSet()
_hook_lock = threading.Lock()
_hooked = False


def _after_fork_in_child() -> None:
    for svc in list(_services):
        svc._after_fork()


def _register(svc: Service) -> None:
    global _hooked
    with _hook_lock:
        _services.add(svc)
        if not _hooked and hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=_after_fork_in_child)
            _hooked = True


class Service:
    """A daemon thread running ``step`` every ``interval_s`` seconds (see the module doc).

    ``step()`` returns the seconds to wait before the next step, or None for ``interval_s``.
    ``first_wait_s``: the wait before the first step (0: at once). ``on_error(exc)`` returns
    the wait after a failed step (None: ``interval_s``); by default the error goes to the
    internal-error funnel under ``name``. ``on_exit()`` runs on the thread as the loop ends.
    ``on_fork()`` runs in a forked child, after the reset and before a restart.
    ``wake_event``: the holder's ``Event`` to wait on (replaced by a fresh one at a fork:
    :attr:`wake_event`). ``drain()``: run after a stop until it returns True or the stop's
    deadline passes (see the module doc). :attr:`woken` tells a step what started it.
    """

    def __init__(self, name: str, step: Callable[[], float | None], *,
                 interval_s: float, first_wait_s: float = 0.0,
                 on_error: Callable[[Exception], float | None] | None = None,
                 on_exit: Callable[[], Any] | None = None,
                 restart_after_fork: bool = False,
                 on_fork: Callable[[], Any] | None = None,
                 wake_event: threading.Event | None = None,
                 drain: Callable[[], bool] | None = None) -> None:
        self.name = name
        self.step = step
        self.interval_s = float(interval_s)
        self.first_wait_s = float(first_wait_s)
        self.on_error = on_error
        self.on_exit = on_exit
        self.restart_after_fork = restart_after_fork
        self.on_fork = on_fork
        self.drain = drain
        #: the step in progress was started by a wake (True) or by the end of its wait (False)
        self.woken = False
        #: steps that returned, steps that raised, and the last one's error (scrubbed)
        self.runs = 0
        self.errors = 0
        self.last_error: str | None = None
        self._reset()
        if wake_event is not None:
            self._wake = wake_event
        _register(self)

    def _reset(self) -> None:
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        #: when the drain after a stop ends (time.monotonic(); None: when it is done)
        self._deadline: float | None = None

    # -- control (any thread) ----------------------------------------------------------------
    @property
    def stopping(self) -> threading.Event:
        """Set once :meth:`stop` was called: a long step checks it to end early."""
        return self._stop

    @property
    def wake_event(self) -> threading.Event:
        """The event the thread waits on: ``wake_event.set()`` is :meth:`wake` without the
        call (for a holder on a request path). A fresh one after a fork."""
        return self._wake

    @property
    def alive(self) -> bool:
        t = self._thread
        return t is not None and t.is_alive()

    @property
    def thread(self) -> threading.Thread | None:
        """The thread of the last :meth:`start` in this process (None before, and after a
        fork until it starts again)."""
        return self._thread

    @property
    def started(self) -> bool:
        """:meth:`start` was called (in this process) since the last :meth:`stop`."""
        return self._thread is not None

    def start(self) -> None:
        """Start the thread (no-op while it runs). A stopped service may start again."""
        with self._lock:
            if self.alive:
                return
            self._stop.clear()
            t = threading.Thread(target=self._run, name=self.name, daemon=True)
            self._thread = t
            t.start()

    def wake(self) -> None:
        """The next step now rather than at the end of its wait (non-blocking)."""
        self._wake.set()

    run_now = wake

    def stop(self, timeout: float | None = 10.0) -> bool:
        """Stop after the step in progress (and the ``drain``, if any, bounded by ``timeout``);
        wait up to ``timeout`` s (None: for ever) for the thread. True when it has ended (or
        never ran)."""
        self._deadline = None if timeout is None else time.monotonic() + timeout
        self._stop.set()
        self._wake.set()
        t = self._thread
        if t is not None and t is not threading.current_thread() and t.is_alive():
            t.join(timeout)
        return t is None or not t.is_alive()

    # -- the thread -------------------------------------------------------------------------
    def _run(self) -> None:
        stop, wake = self._stop, self._wake
        wait: float | None = self.first_wait_s
        try:
            while not stop.is_set():
                if wait is None or wait > 0:
                    self.woken = wake.wait(wait)
                else:
                    self.woken = wake.is_set()
                # cleared before the step: a wake during it makes the next one at once
                wake.clear()
                if stop.is_set():
                    break
                try:
                    wait = self.step()
                    self.runs += 1
                except Exception as exc:
                    self.errors += 1
                    self.last_error = scrub(f"{type(exc).__name__}: {exc}")[:500]
                    wait = self._failed(exc)
                if wait is None:
                    wait = self.interval_s
            if self.drain is not None:
                self._drain_out(self.drain)
        finally:
            if self.on_exit is not None:
                try:
                    self.on_exit()
                except Exception as exc:
                    record_internal_error(f"{self.name}.exit", exc)

    def _drain_out(self, drain: Callable[[], bool]) -> None:
        """After the stop: ``drain()`` at least once, then until it is done or the deadline."""
        self.woken = True
        while True:
            try:
                done = drain()
                self.runs += 1
            except Exception as exc:
                self.errors += 1
                self.last_error = scrub(f"{type(exc).__name__}: {exc}")[:500]
                wait = self._failed(exc)
                left = deadline_left(self._deadline)
                pause = self.interval_s if wait is None else wait
                time.sleep(max(0.0, min(pause, left) if left is not None else pause))
                done = False
            if done:
                return
            left = deadline_left(self._deadline)
            if left is not None and left <= 0:
                return

    def _failed(self, exc: Exception) -> float | None:
        if self.on_error is None:
            record_internal_error(self.name, exc)
            return None
        try:
            return self.on_error(exc)
        except Exception as inner:  # the handler itself failed: counted, the loop goes on
            record_internal_error(f"{self.name}.on_error", inner)
            return None

    def _after_fork(self) -> None:
        was_running = self._thread is not None and not self._stop.is_set()
        self._reset()
        if self.on_fork is not None:
            try:
                self.on_fork()
            except Exception as exc:
                record_internal_error(f"{self.name}.fork", exc)
        if was_running and self.restart_after_fork:
            self.start()


def deadline_left(deadline: float | None) -> float | None:
    """Seconds left until ``deadline`` (a ``time.monotonic()`` value; None: no deadline)."""
    return None if deadline is None else max(0.0, deadline - time.monotonic())
