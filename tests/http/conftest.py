"""Fixtures for the black-box HTTP suite: real server processes (tests/support/server.py)
and httpx clients. A module-scoped server serves the read-mostly tests (each test uses its
own topic names); `make_server` gives a test its own server (own env, or restarts)."""

from __future__ import annotations

import itertools
import re
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import httpx
import pytest

from tests.support.server import ServerProcess

ServerFactory = Callable[..., ServerProcess]

_counter = itertools.count()


@pytest.fixture(scope="module")
def client(server: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=30.0) as c:
        yield c


@pytest.fixture
def make_server(tmp_path: Path) -> Iterator[ServerFactory]:
    """`make_server(env={...}, data_dir=None, start=True)`; every server is stopped after."""
    made: list[ServerProcess] = []

    def factory(
        env: Mapping[str, str] | None = None,
        data_dir: Path | None = None,
        start: bool = True,
        wal_shards: int | None = 2,
    ) -> ServerProcess:
        d = data_dir or tmp_path / f"data{len(made)}"
        srv = ServerProcess(data_dir=d, env=env, wal_shards=wal_shards)
        made.append(srv)
        if start:
            srv.start()
        return srv

    yield factory
    for srv in made:
        srv.close()


@pytest.fixture
def tname(request: pytest.FixtureRequest) -> Callable[[str], str]:
    """Unique, valid topic names derived from the test name: `tname("a")`."""
    base = re.sub(r"[^A-Za-z0-9]+", "-", request.node.name)[:60].strip("-") or "t"
    run = uuid.uuid4().hex[:6]

    def make(suffix: str = "") -> str:
        return f"{base}-{run}-{next(_counter)}{('-' + suffix) if suffix else ''}"

    return make


@pytest.fixture
def topic(tname: Callable[[str], str]) -> str:
    return tname("")
