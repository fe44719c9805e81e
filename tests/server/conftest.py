from __future__ import annotations

import pytest
from cluster import missing_redis

from grader.server.run import start_redis, stop


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory):
    if why := missing_redis():
        pytest.skip(why)
    proc, url = start_redis(tmp_path_factory.mktemp("redis"))
    yield url
    stop(proc)
