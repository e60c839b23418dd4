"""One HTTP POST with one deadline for the whole exchange (connect, send, read the answer).

urllib's ``timeout`` bounds each socket operation, not the request: a receiver that sends one
byte a second keeps a POST with ``timeout=2`` open for as long as it likes. Here a watchdog
timer shuts the socket down when the deadline passes, which ends a blocked ``recv``/``send``
at once whatever the receiver does.

A URL's ``user:password@`` is sent as HTTP Basic authentication (urllib would fail on it with
an error that quotes the password); the password is never part of a text this module makes.
"""

from __future__ import annotations

import base64
import http.client
import socket
import ssl
import threading
import time
from dataclasses import dataclass
from email.message import Message
from urllib.parse import unquote, urlsplit

__all__ = ["Answer", "DeadlineExceeded", "BadURL", "basic_auth", "post"]

#: At most this much of an answer's body is read (what a receiver says, for the error text).
MAX_BODY = 65536


class DeadlineExceeded(TimeoutError):
    """The exchange did not finish within its deadline."""


class BadURL(ValueError):
    """The URL cannot be sent to (its text is safe to show: it never quotes the URL)."""


@dataclass(frozen=True)
class Answer:
    status: int
    headers: Message
    body: bytes


def basic_auth(url: str) -> str | None:
    """The ``Authorization`` header value for a URL's ``user:password@``, or None."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return None
    pair = f"{unquote(parts.username or '')}:{unquote(parts.password or '')}"
    return "Basic " + base64.b64encode(pair.encode("utf-8")).decode("ascii")


def _target(url: str) -> tuple[str, str, int | None, str]:
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise BadURL("the URL's host or port is not valid") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BadURL("the URL is not an http(s) URL")
    if not url.isascii() or any(ord(c) <= 0x20 or c == "\x7f" for c in url):
        raise BadURL("the URL has non-ASCII, blank or control characters")
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return parts.scheme, parts.hostname, port, path


def post(url: str, body: bytes, headers: dict[str, str], deadline_s: float) -> Answer:
    """POST ``body`` to ``url`` and read the answer (its first :data:`MAX_BODY` bytes), all
    within ``deadline_s`` seconds from the call. Blocks at most that long (plus the name
    lookup, which the standard library cannot interrupt).

    Raises :class:`DeadlineExceeded` when the deadline passes, :class:`BadURL` for a URL that
    cannot be sent to, ``OSError`` / ``http.client.HTTPException`` for a connection that
    fails. Redirects are answers like any other (not followed)."""
    scheme, host, port, path = _target(url)
    auth = basic_auth(url)
    send = dict(headers)
    if auth is not None and not any(k.lower() == "authorization" for k in send):
        send["Authorization"] = auth
    end = time.monotonic() + deadline_s
    conn: http.client.HTTPConnection
    if scheme == "https":
        conn = http.client.HTTPSConnection(host, port, timeout=deadline_s,
                                           context=ssl.create_default_context())
    else:
        conn = http.client.HTTPConnection(host, port, timeout=deadline_s)
    lock = threading.Lock()
    state = {"done": False, "fired": False}

    def cut() -> None:
        with lock:
            if state["done"]:
                return
            state["fired"] = True
            sock = conn.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)  # wakes a blocked recv/send in the other thread
            except OSError:
                pass

    timer = threading.Timer(deadline_s, cut)
    timer.daemon = True
    timer.start()
    try:
        try:
            conn.connect()
            left = end - time.monotonic()
            if left <= 0:
                raise DeadlineExceeded
            if conn.sock is not None:
                conn.sock.settimeout(left)
            conn.request("POST", path, body=body, headers=send)
            resp = conn.getresponse()
            data = resp.read(MAX_BODY)
            with lock:
                state["done"] = True
                cut_off = state["fired"]
            if cut_off:  # (a status line cut at the deadline can parse as a whole one)
                raise DeadlineExceeded
            return Answer(resp.status, resp.headers, data)
        except (OSError, http.client.HTTPException) as exc:
            if state["fired"] or time.monotonic() >= end or isinstance(exc, TimeoutError):
                raise DeadlineExceeded from None
            raise
    finally:
        with lock:
            state["done"] = True
        timer.cancel()
        conn.close()
