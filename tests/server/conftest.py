from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster import missing_redis, pg_bin, start_postgres

from grader.server.admin import ensure_assignment, set_open
from grader.server.db import Database, migrate
from grader.server.run import start_redis, stop


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory):
    if why := missing_redis():
        pytest.skip(why)
    proc, url = start_redis(tmp_path_factory.mktemp("redis"))
    yield url
    stop(proc)


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Database]:
    """The server's database, SQLite and PostgreSQL, migrated, with sigmoid open (no app, no workers)."""
    pg = None
    if request.param == "postgresql":
        if pg_bin() is None:
            pytest.skip("PostgreSQL not installed (scripts/setup-system.sh --tests)")
        pg = start_postgres(tmp_path / "pg")
    url = pg.url if pg else f"sqlite:///{tmp_path / 'server.db'}"
    migrate(url)
    database = Database(url)
    ensure_assignment(database, "sigmoid")
    set_open(database, "sigmoid", True)
    yield database
    database.engine.dispose()
    if pg is not None:
        pg.stop()
