"""Run many SIGKILL crash rounds against one data dir and print the counts.

usage: python scripts/crash_soak.py [ROUNDS] [SHARDS]
"""

from __future__ import annotations

import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.engine.test_crash import crash_round


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    shards = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    rng = random.Random(time.time_ns())
    verified = 0
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as d:
        for i in range(rounds):
            verified += crash_round(Path(d) / "data", rng, shards=shards)
            if (i + 1) % 20 == 0:
                print(f"{i + 1} rounds, {verified} acked records verified", flush=True)
    print(
        f"{rounds} passed, 0 failed: {verified} acked records verified in {time.monotonic() - t0:.1f}s"
    )


if __name__ == "__main__":
    main()
