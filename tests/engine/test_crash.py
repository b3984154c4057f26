"""Crash tests: SIGKILL a writer at random instants; every acknowledged fsync-class record
must survive exactly once with identical bytes, and new seqs continue above the head.
`scripts/crash_soak.py` runs hundreds of rounds on demand."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from seglog.engine.engine import Engine, EngineOptions
from seglog.model import RecordIn

ROOT = Path(__file__).resolve().parents[2]


def crash_round(
    data_dir: Path, rng: random.Random, shards: int = 1, durability: str = "fsync"
) -> int:
    """One round: start the child, let it write for a random time, SIGKILL, recover, check.
    Returns how many acked records were verified."""
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.crash_child", str(data_dir), str(shards), durability],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
        env=env,
    )
    assert proc.stdout is not None
    # Wait until the child has acked something, then kill it at a random later instant.
    first = proc.stdout.readline()
    assert first, proc.stderr.read().decode() if proc.stderr else "child died"
    time.sleep(rng.uniform(0.0, 0.25))
    os.kill(proc.pid, signal.SIGKILL)
    rest = proc.stdout.read()
    proc.wait()
    acked: dict[int, bytes] = {}
    for line in (first + rest).decode().splitlines():
        parts = line.split(" ", 1)
        if len(parts) == 2 and line.endswith("}"):
            acked[int(parts[0])] = parts[1].encode()
    e = Engine(EngineOptions(data_dir=data_dir, wal_shards=shards, segment_max_events=64))
    e.open()
    try:
        got: dict[int, bytes] = {}
        cursor = 0
        while True:
            r = e.read("crash", cursor, limit=1000)
            assert r.tombstone is None
            for rec in r.records:
                assert rec.seq not in got, f"seq {rec.seq} returned twice"
                got[rec.seq] = rec.data_json
            cursor = r.next_from_seq
            if r.caught_up:
                break
        for seq, data in acked.items():
            assert got.get(seq) == data, f"acked seq {seq} lost or changed"
        head = e.topics["crash"].head
        assert head >= max(acked)
        assert e.write("crash", [RecordIn.of("after")]).seqs == [head + 1]
    finally:
        e.close(snapshot=False)
    return len(acked)


@pytest.mark.parametrize("shards", [1, 3])
def test_sigkill_never_loses_acked_fsync_writes(tmp_path: Path, shards: int) -> None:
    rng = random.Random(1234 + shards)
    data = tmp_path / "data"
    total = 0
    for _ in range(3):
        total += crash_round(data, rng, shards=shards)
    assert total > 0
