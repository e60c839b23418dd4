from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tracescore._internal.errors import internal_error_counts


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "ts.db"


@pytest.fixture
def make_ts(db_path: Path) -> Iterator[Any]:
    """Build real pipelines on a temp db (in-memory span export); shut them all down after."""
    from tracescore.testing import in_memory

    made: list[Any] = []

    def make(**kwargs: Any) -> tuple[Any, Any]:
        kwargs.setdefault("db", db_path)
        ts, exporter = in_memory(**kwargs)
        made.append(ts)
        return ts, exporter

    yield make
    for ts in made:
        ts.shutdown(timeout=10)


@pytest.fixture(autouse=True)
def no_background_internal_errors(request: pytest.FixtureRequest) -> Iterator[None]:
    """Background threads cannot raise into a test: fail the test if they logged an error."""
    before = internal_error_counts()
    yield
    if request.node.get_closest_marker("allow_internal_errors"):
        return
    after = internal_error_counts()
    grown = {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}
    assert not grown, f"tracescore internal errors during the test: {grown}"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "allow_internal_errors: the test provokes tracescore internal errors"
    )


# -- PostgreSQL ------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    """A superuser URL of a PostgreSQL server for the whole run (see tests/pg.py)."""
    import os

    from pg import ENV_URL, start_cluster

    url = os.environ.get(ENV_URL)
    if url:
        yield url
        return
    try:
        url, stop = start_cluster()
    except FileNotFoundError as exc:
        if os.environ.get("CI"):
            pytest.fail(f"PostgreSQL tests cannot run in CI: {exc}")
        pytest.skip(str(exc))
    try:
        yield url
    finally:
        stop()


@pytest.fixture
def pg_url(pg_server: str) -> Iterator[str]:
    """A fresh, empty PostgreSQL database for one test."""
    import psycopg
    from pg import create_database, log_tail

    try:
        url, drop = create_database(pg_server)
    except psycopg.OperationalError as exc:  # the session's server went away: say why
        pytest.fail(f"the tests' PostgreSQL server is not answering: {exc}\n"
                    f"its log ends:\n{log_tail(pg_server)}")
    yield url
    drop()


@pytest.fixture(params=["sqlite", "postgres"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The database of a test that runs on both backends: a SQLite path or a
    ``postgresql://`` URL (a fresh database)."""
    if request.param == "sqlite":
        return str(tmp_path / "ts.db")
    return str(request.getfixturevalue("pg_url"))
