"""Shared fixtures: engines on temp data dirs with an injected clock, and a live server
per test module (`server`; directories that need another kind define their own)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from seglog.clock import ManualClock
from seglog.engine.engine import Engine, EngineOptions
from tests.support.server import ServerProcess

# Hypothesis profiles, picked by HYPOTHESIS_PROFILE:
#   "ci" (default): Hypothesis' defaults (property tests that leave `max_examples` open keep
#     their 100), short stateful runs; tests/engine/test_model.py sizes itself for CI.
#   "slow": >= 1000 examples everywhere not pinned, longer stateful histories.
# No per-example deadline in either: on a loaded 2-core CI machine a slow example is
# noise, not a failure (performance is measured in benchmarks/, never in tests).
settings.register_profile("ci", stateful_step_count=30, deadline=None)
settings.register_profile("slow", max_examples=1000, stateful_step_count=60, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


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


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    """A real server for the module's tests, auth off (each test uses its own topics)."""
    with ServerProcess() as srv:
        yield srv
