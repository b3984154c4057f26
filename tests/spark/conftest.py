"""Spark test fixtures: one local SparkSession per run, real seglog servers as subprocesses.

Environment that Spark reads once per JVM/worker must be set before the first session is
built (docs/spark.md): the worker interpreter (`PYSPARK_PYTHON`) and loopback binding.
`local[2,2]` gives two task slots and lets a failed task be retried once (the sink test
forces such a retry); plain `local[N]` never retries.
"""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"


@functools.cache
def server_available() -> bool:
    r = subprocess.run(
        [sys.executable, "-m", "seglog.server", "--help"],
        capture_output=True,
        timeout=60,
        check=False,
    )
    return r.returncode == 0


@dataclass
class ServerProc:
    proc: subprocess.Popen[bytes]
    url: str
    data_dir: Path
    log_path: Path
    env: dict[str, str] = field(default_factory=dict)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)

    def client(self) -> Any:
        from seglog.client import Client

        return Client(self.url, timeout=30.0)


def start_server(
    base: Path, env: dict[str, str] | None = None, timeout_s: float = 60.0
) -> ServerProc:
    import httpx

    base.mkdir(parents=True, exist_ok=True)
    data_dir = base / "data"
    port_file = base / "port"
    port_file.unlink(missing_ok=True)
    log_path = base / "server.log"
    full_env = {**os.environ, **(env or {})}
    cmd = [
        sys.executable,
        "-m",
        "seglog.server",
        "--port",
        "0",
        "--port-file",
        str(port_file),
        "--data-dir",
        str(data_dir),
    ]
    with log_path.open("ab") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=full_env)
    deadline = time.monotonic() + timeout_s
    url = ""
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(
                f"seglog server exited with {proc.returncode}: {log_path.read_text()[-2000:]}"
            )
        if port_file.exists() and not url:
            url = "http://" + port_file.read_text().strip()
        if url:
            try:
                if httpx.get(url + "/v0/ready", timeout=2.0).status_code == 200:
                    return ServerProc(proc, url, data_dir, log_path, env or {})
            except httpx.HTTPError:
                pass
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError(
        f"seglog server not ready after {timeout_s}s: {log_path.read_text()[-2000:]}"
    )


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
    if not server_available():
        pytest.skip("seglog.server is not runnable yet")
    s = start_server(tmp_path_factory.mktemp("seglog-server"))
    yield s
    s.stop()


@pytest.fixture
def server_factory(tmp_path: Path) -> Iterator[Callable[..., ServerProc]]:
    """Servers owned by one test (e.g. to stop one and read its data dir offline)."""
    if not server_available():
        pytest.skip("seglog.server is not runnable yet")
    started: list[ServerProc] = []

    def make(env: dict[str, str] | None = None, name: str = "srv") -> ServerProc:
        s = start_server(tmp_path / name, env)
        started.append(s)
        return s

    yield make
    for s in started:
        s.stop()
