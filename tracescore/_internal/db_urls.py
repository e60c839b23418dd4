"""Database names: which backend a ``db`` names, and how to show it without its password.

``db`` is a SQLite file path or a ``postgresql://`` / ``postgres://`` URL. Every message,
log line and report that names a database goes through :func:`redact_url`; a driver's error
text goes through :func:`redact_text`. Pure functions: no I/O, safe on any thread.
"""

from __future__ import annotations

import os
import re

__all__ = ["PG_SCHEMES", "is_postgres", "redact_text", "redact_url"]

PG_SCHEMES = ("postgresql://", "postgres://")


def is_postgres(db: str | os.PathLike[str]) -> bool:
    """Whether ``db`` names a PostgreSQL database (a URL) rather than a SQLite file."""
    return isinstance(db, str) and db.startswith(PG_SCHEMES)


#: libpq's query-string form of a password (``?password=...``, ``&sslpassword=...``); the
#: value runs to the next ``&name=`` or the end, so an unencoded ``&``, ``#`` or ``@`` in it
#: stays hidden too.
_QUERY_PASSWORD_VALUE = re.compile(
    r"(?i)([?&](?:ssl)?password=)(.*?)(?=&[A-Za-z_][A-Za-z0-9_]*=|$)", re.DOTALL)


def _userinfo(url: str) -> tuple[str, str | None, str, bool]:
    """(scheme, user info or None, the rest after it, conservative?) of a URL."""
    scheme, _, rest = url.partition("://")
    if "@" not in rest:
        return scheme, None, rest, False
    end = next((i for i, ch in enumerate(rest) if ch in "/?#"), len(rest))
    if "@" in rest[end:]:  # not a URL a parser reads as written: all up to the last @
        userinfo, _, after = rest.rpartition("@")
        return scheme, userinfo, after, True
    userinfo, _, hosts = rest[:end].rpartition("@")
    return scheme, userinfo, hosts + rest[end:], False


def redact_url(db: str | os.PathLike[str]) -> str:
    """``db`` for messages and logs: a URL's password replaced by ``***``, in the user info
    (``user:***@host``) and in the query string (``password=***``, ``sslpassword=***``).

    Parsed conservatively, for a password typed without percent-encoding: when an ``@``
    follows the URL's host part (a ``/``, ``#`` or ``?`` in the password ends it early),
    everything between ``://`` and the last ``@`` is hidden (``postgresql://***@host/db``).
    """
    text = str(db)
    if not is_postgres(text):
        return text
    text = _QUERY_PASSWORD_VALUE.sub(r"\1***", text)
    scheme, userinfo, after, conservative = _userinfo(text)
    if userinfo is None:
        return text
    if conservative:
        return f"{scheme}://***@{after}"
    user, colon, _ = userinfo.partition(":")
    return f"{scheme}://{user}:***@{after}" if colon else text


def redact_text(text: str, db: str | os.PathLike[str]) -> str:
    """``text`` (a driver's error message, say) with ``db``'s password hidden, and the pieces
    of it a driver may quote when it reads a password typed without percent-encoding
    differently (``p@ss`` read as password ``p`` and host ``ss@host``)."""
    from urllib.parse import unquote

    url = str(db)
    if not is_postgres(url):
        return text
    secrets = {m.group(2) for m in _QUERY_PASSWORD_VALUE.finditer(url)}
    _, userinfo, _, conservative = _userinfo(_QUERY_PASSWORD_VALUE.sub(r"\1", url))
    if userinfo is not None:
        secrets.add(userinfo if conservative else userinfo.partition(":")[2])
    for secret in list(secrets):
        secrets.add(unquote(secret))
        secrets.update(re.split(r"[@/#?&:]", secret))
    for secret in sorted((s for s in secrets if len(s) >= 3), key=len, reverse=True):
        text = text.replace(secret, "***")
    return text
