"""Shared fixtures: engines on temp data dirs with an injected clock."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from seglog.clock import ManualClock
from seglog.engine.engine import Engine, EngineOptions


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


EngineFactory = Callable[..., Engine]


@pytest.fixture
def make_engine(tmp_path: Path, clock: ManualClock) -> Iterator[EngineFactory]:
    """Open engines on `tmp_path/data` (same dir each call: reopening = restart)."""
    opened: list[Engine] = []

    def factory(**overrides: object) -> Engine:
        opts = EngineOptions(data_dir=tmp_path / "data", wal_shards=1, **overrides)  # type: ignore[arg-type]
        e = Engine(opts, clock=clock)
        e.open()
        opened.append(e)
        return e

    yield factory
    for e in opened:
        if e.wal is not None:
            e.close(snapshot=False)
