"""Spark test fixtures: one local SparkSession per run, real seglog servers as subprocesses.

Environment that Spark reads once per JVM/worker must be set before the first session is
built (docs/spark.md): the worker interpreter (`PYSPARK_PYTHON`) and loopback binding.
`local[2,2]` gives two task slots and lets a failed task be retried once (the sink test
forces such a retry); plain `local[N]` never retries.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.server import ServerProcess

os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"


class ServerProc(ServerProcess):
    """The shared test server (`tests.support.server`) plus the public client on it."""

    def client(self) -> Any:
        from seglog.client import Client

        return Client(self.url, timeout=30.0)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2,2]")
        .appName("seglog-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.streaming.stopTimeout", "10s")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProc]:
    """One shared server; tests use their own topic names."""
    s = ServerProc(tmp_path_factory.mktemp("seglog-server") / "data").start()
    yield s
    s.stop()


@pytest.fixture
def server_factory(tmp_path: Path) -> Iterator[Callable[..., ServerProc]]:
    """Servers owned by one test (e.g. to stop one and read its data dir offline)."""
    started: list[ServerProc] = []

    def make(env: dict[str, str] | None = None, name: str = "srv") -> ServerProc:
        (tmp_path / name).mkdir(parents=True, exist_ok=True)
        s = ServerProc(tmp_path / name / "data", env)
        started.append(s)
        return s.start()

    yield make
    for s in started:
        s.stop()
