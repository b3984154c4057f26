"""Fixtures shared by the engine's fault tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from seglog.engine.engine import Engine
from tests.engine.oracle import abandon
from tests.support.faultfs import FaultFs


@pytest.fixture
def engines() -> Iterator[list[tuple[Engine, FaultFs]]]:
    """Engines a test opened on FaultFs images; each is abandoned (its threads stopped,
    nothing more written) when the test ends."""
    opened: list[tuple[Engine, FaultFs]] = []
    yield opened
    for e, f in opened:
        if e.wal is not None:
            abandon(e, f)
