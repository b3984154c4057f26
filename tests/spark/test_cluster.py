"""The connector on a Spark standalone cluster (issue 11, "beyond one machine"): a master
and two workers started from the installed `pyspark` package on loopback, the driver in
its own process (`cluster_job.py`). The batch read, the streaming copy and the sink must
give what they give on `local[2]` (checked against the server's own API), with tasks in
executor processes: nothing may depend on driver-local state.

Executors use this interpreter (`spark.pyspark.python`), i.e. an environment with
`seglog` installed on every worker — one of the two ways docs/spark.md describes.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.spark.conftest import ServerProc

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, proc: subprocess.Popen[bytes], log: Path, seconds: float = 90) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.2)  # process start-up, not a correctness wait
    raise RuntimeError(f"port {port} never opened:\n{log.read_text()[-3000:]}")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    import pyspark

    home = Path(pyspark.__file__).parent
    base = tmp_path_factory.mktemp("spark-cluster")
    env = {
        **os.environ,
        "SPARK_HOME": str(home),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_LOG_DIR": str(base),
    }
    port = free_port()
    procs: list[subprocess.Popen[bytes]] = []
    try:
        log = base / "master.log"
        master = subprocess.Popen(
            [
                str(home / "bin" / "spark-class"),
                "org.apache.spark.deploy.master.Master",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--webui-port",
                str(free_port()),
            ],
            env=env,
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
        )
        procs.append(master)
        wait_port(port, master, log)
        for i in range(2):
            wlog = base / f"worker{i}.log"
            (base / f"work{i}").mkdir()
            procs.append(
                subprocess.Popen(
                    [
                        str(home / "bin" / "spark-class"),
                        "org.apache.spark.deploy.worker.Worker",
                        f"spark://127.0.0.1:{port}",
                        "--host",
                        "127.0.0.1",
                        "--cores",
                        "1",
                        "--memory",
                        "768m",
                        "--webui-port",
                        str(free_port()),
                        "--work-dir",
                        str(base / f"work{i}"),
                    ],
                    env=env,
                    stdout=wlog.open("wb"),
                    stderr=subprocess.STDOUT,
                )
            )
        yield f"spark://127.0.0.1:{port}"
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()


def topic_rows(c: Any, topic: str) -> list[list[Any]]:
    rows: list[list[Any]] = []
    cursor = 0
    while True:
        res = c.diff(topic, cursor, limit=1000, include_tags=True)
        rows += [[r.seq, r.tag, r.data] for r in res.records]
        if res.caught_up:
            return rows
        cursor = res.next_from_seq


def test_batch_stream_and_sink_on_a_standalone_cluster(
    cluster: str, server: ServerProc, tmp_path: Path
) -> None:
    c = server.client()
    src = [{"data": {"i": i, "s": "x" * (i % 7)}, "tag": f"g{i % 4}"} for i in range(1000)]
    c.append("cl.src", src[:500])
    c.append("cl.src", src[500:])
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    job = subprocess.run(
        [sys.executable, "-m", "tests.spark.cluster_job", cluster, server.url, str(tmp_path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        timeout=280,
    )
    lines = [ln for ln in job.stdout.decode().splitlines() if ln.startswith("RESULT ")]
    assert job.returncode == 0 and lines, job.stderr.decode()[-4000:]
    out = orjson.loads(lines[0][len("RESULT ") :])
    assert out["default_parallelism"] == 2  # two executors, one core each
    assert out["partitions"] == 4
    # tasks ran under two executors' Python daemons, not in or under the driver
    assert len(out["daemon_pids"]) == 2 and out["driver_pid"] not in out["daemon_pids"]
    want = topic_rows(c, "cl.src")
    assert [[s, t, orjson.loads(d)] for s, t, d in out["batch"]] == want
    copied = topic_rows(c, "cl.copy")
    # Partitions are appended in parallel: the copy keeps every record once, in order within
    # each source partition (250 seqs), not across them.
    assert sorted([[t, d] for _, t, d in copied], key=lambda r: r[1]["i"]) == [
        [t, d] for _, t, d in want
    ]
    for lo in range(0, 1000, 250):
        part = [d["i"] for _, _, d in copied if lo <= d["i"] < lo + 250]
        assert part == sorted(part)
    sunk = topic_rows(c, "cl.sink")
    assert sorted(d["k"] for _, _, d in sunk) == list(range(600))
    assert all(t == f"t{d['k'] % 3}" for _, t, d in sunk)
