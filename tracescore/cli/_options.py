"""What the commands share: the ``--db``, ``--since`` and ``--where`` options, opening a
database with a clear error, writing an output file atomically, and the usage-error classes
(exit code 2)."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TextIO, TypeVar

import click

from .demo import DEFAULT_DB as DEMO_DB

DEFAULT_DB = "tracescore.db"
#: ``reports.report.DEFAULT_WORST`` (a test holds them equal), not imported from there: that
#: module loads the store, sqlite-utils and pandas (~0.4 s) that every command, ``--help`` and
#: a starting ``tracescore worker`` would pay before parsing its options
DEFAULT_WORST = 3

F = TypeVar("F", bound=Callable[..., Any])


class DatabaseProblem(click.ClickException):
    """A missing or unreadable database: exit code 2, like other usage errors."""

    exit_code = 2


class MissingExtra(click.ClickException):
    """An optional framework that is not installed: exit code 2, with the pip command."""

    exit_code = 2


class OutputProblem(click.FileError):
    """An output file that cannot be written: exit code 2, like other usage errors."""

    exit_code = 2


def _open(db: Path | str) -> Any:
    from ..read.db import DatabaseError, open_db

    try:
        return open_db(db)
    except DatabaseError as exc:
        hint = ""
        if isinstance(db, Path) and not db.exists():
            hint = (f"\nPass --db PATH (or set TRACESCORE_DB); `tracescore demo` writes "
                    f"{DEMO_DB}.")
        from ..store.base import redact_text

        raise DatabaseProblem(f"{redact_text(str(exc), db)}{hint}") from None


def _db_value(ctx: click.Context, param: click.Parameter, value: Any) -> Path | str:
    """``--db``: a SQLite file (a :class:`Path`) or a ``postgresql://`` URL (kept as a str:
    a Path would fold its ``//``)."""
    text = str(value)
    if text.startswith(("postgresql://", "postgres://")):
        return text
    if Path(text).is_dir():
        raise click.BadParameter(f"{text} is a directory, not a database file", ctx=ctx,
                                 param=param)
    return Path(text)


def _demo_fallback(ctx: click.Context, param: click.Parameter, value: Any) -> Path | str:
    """The read commands' default ``tracescore.db``, or the demo's database when only that
    one exists here: `tracescore demo`, then `tracescore report` works as --help says.
    Only when neither --db nor TRACESCORE_DB was given; said on stderr."""
    db = _db_value(ctx, param, value)
    source = ctx.get_parameter_source(param.name or "db")
    if (source is click.core.ParameterSource.DEFAULT and isinstance(db, Path)
            and not db.exists() and Path(DEMO_DB).is_file()):
        click.echo(f"({db} not found; reading {DEMO_DB}, written by `tracescore demo`)",
                   err=True)
        return Path(DEMO_DB)
    return db


def _db_option(default: str, help_text: str, envvar: str | None = "TRACESCORE_DB",
               demo_fallback: bool = False) -> Callable[[F], F]:
    if demo_fallback:
        help_text += f" Without --db or TRACESCORE_DB: {DEMO_DB} when only that one exists."
    return click.option(
        "--db", "db", metavar="PATH|URL", default=default,
        envvar=envvar, show_default=True, show_envvar=envvar is not None, help=help_text,
        callback=_demo_fallback if demo_fallback else _db_value,
    )


@contextlib.contextmanager
def _output(path: Path) -> Iterator[TextIO]:
    """stdout for ``-``; else a file that appears only once complete (written beside it and
    renamed), so a reader never sees half an export and a failure leaves no partial file.

    A new file is created private (0600: it holds captured queries and documents); a file
    that exists keeps its mode (``chmod`` it once to share it)."""
    if str(path) == "-":
        yield sys.stdout
        return
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        try:
            mode = os.stat(path).st_mode & 0o7777
        except FileNotFoundError:
            mode = 0o600
        tmp.unlink(missing_ok=True)  # a leftover of a killed run: O_EXCL below must create
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.fchmod(fd, mode)  # the existing file's mode, or 0600 (whatever the umask)
        with open(fd, "w", encoding="utf-8", newline="") as f:
            yield f
        os.replace(tmp, path)
    except OSError as exc:
        raise OutputProblem(str(path), hint=exc.strerror or str(exc)) from None
    finally:
        tmp.unlink(missing_ok=True)


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _name(db: Any) -> str:
    """``db`` for output: a URL's password hidden."""
    from ..store import redact_url

    return redact_url(str(db))


def _quiet_stdout() -> None:
    # Python would report the broken pipe again when it flushes stdout at exit.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def _since(ctx: click.Context, param: click.Parameter, value: str) -> float | None:
    from ..read.db import parse_since

    try:
        return parse_since(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx=ctx, param=param) from None


def _where_value(ctx: click.Context, param: click.Parameter,
                 value: tuple[str, ...]) -> dict[str, str]:
    """``--where KEY=VALUE`` (repeatable) → a mapping; a malformed item is a usage error."""
    from ..reports.compare import CompareError, parse_where

    try:
        return parse_where(value)
    except CompareError as exc:
        raise click.BadParameter(str(exc), ctx=ctx, param=param) from None


def _where_option(help_text: str = "Only records with this segment value (repeatable), e.g. "
                  "environment=production.") -> Callable[[F], F]:
    return click.option("--where", "where", metavar="KEY=VALUE", multiple=True,
                        callback=_where_value, help=help_text)


def _config_values(ctx: click.Context, param: click.Parameter, value: Path | None) -> None:
    """``--config FILE``: a TOML file of the command's options, as defaults that the command
    line overrides. Keys are the long option names, with dashes or underscores
    (``otlp-http = "0.0.0.0:4318"``, ``metric = ["faithfulness", "token_f1"]``, ``monitors =
    "monitors.toml"``); the keys may also sit in a table named after the command
    (``[serve]``). An unknown key, a value of the wrong type or a file that is not TOML is a
    usage error (exit 2) naming the key, before anything starts."""
    if value is None:
        return
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib

    try:
        data = tomllib.loads(value.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise click.BadParameter(f"cannot read {value}: {exc}", ctx=ctx, param=param) from None
    except (tomllib.TOMLDecodeError, RecursionError) as exc:
        raise click.BadParameter(f"{value} is not valid TOML: {exc}", ctx=ctx,
                                 param=param) from None
    name = ctx.command.name or ""
    if isinstance(data.get(name), dict) and all(isinstance(v, dict) for v in data.values()):
        data = data[name]
    names: dict[str, click.Parameter] = {}
    for p in ctx.command.params:
        if not isinstance(p, click.Option) or p is param or p.name is None:
            continue
        names[p.name.replace("_", "-")] = p
        for flag in p.opts:
            if flag.startswith("--"):
                names[flag[2:]] = p
    defaults: dict[str, Any] = {}
    for key, v in data.items():
        p = names.get(str(key).replace("_", "-"))
        if p is None:
            known = ", ".join(sorted({f[2:] for q in names.values() for f in q.opts
                                      if f.startswith("--")}))
            raise click.BadParameter(f"{value}: unknown key {key!r}; known keys: {known}",
                                     ctx=ctx, param=param)
        if p.multiple and not isinstance(v, list):
            v = [v]
        if isinstance(v, (dict, list)) and not p.multiple:
            raise click.BadParameter(f"{value}: {key!r} takes one value, got {v!r}", ctx=ctx,
                                     param=param)
        try:  # the option's own type and checks, now, so the error names the file's key
            p.type_cast_value(ctx, v)
        except click.BadParameter as exc:
            raise click.BadParameter(f"{value}: {key!r}: {exc.message}", ctx=ctx,
                                     param=param) from None
        defaults[str(p.name)] = v
    ctx.default_map = {**(ctx.default_map or {}), **defaults}


def _config_option(command: str) -> Callable[[F], F]:
    return click.option(
        "--config", "config", metavar="FILE", is_eager=True, expose_value=False,
        callback=_config_values,
        type=click.Path(exists=True, dir_okay=False, path_type=Path),
        help=f"A TOML file of this command's options (keys as the long option names, at the "
             f"top or in a [{command}] table); the command line overrides it.")
