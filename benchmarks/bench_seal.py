"""How long sealing a segment holds its topic's lock, step by step (in process).

Writes `--records` records of ~100 B into one `disk` topic without sealing, then seals
them segment by segment (10,000 records each, the default policy) the way the maintenance
thread does (`maintenance.seal_topic`), timing each step: the capture under the lock, the
encoding and the file writes outside it, and the registration under the lock again.

    python benchmarks/bench_seal.py [--records 200000]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import orjson
from bench_engine import open_engine

from seglog.engine.segments import encode_rows
from seglog.model import Durability, RecordIn, TopicConfig


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=200_000)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        e = open_engine(Path(d) / "data")  # no maintenance thread: nothing seals on its own
        e.put_topic("t", TopicConfig(durability=Durability.DISK))
        batch = [RecordIn(orjson.dumps({"i": i, "pad": "y" * 80})) for i in range(1000)]
        for _ in range(a.records // len(batch)):
            e.write("t", batch)
        t = e._topic("t")  # the engine's own state, as the maintenance thread uses it
        segs = t.segments
        assert segs is not None
        steps = {"capture (locked)": 0.0, "encode": 0.0, "files": 0.0, "register (locked)": 0.0}
        sealed = 0
        pc = time.perf_counter
        while True:
            t0 = pc()
            with t.lock:
                rng = segs.seal_range(t, e.clock.now_ms())
                if rng is None:
                    break
                captured = segs.capture(t, *rng)
            t1 = pc()
            files = encode_rows(captured)
            t2 = pc()
            info = segs.store.install("hot", rng[0], *files)
            t3 = pc()
            with t.lock:
                segs.register(t, info, captured)
                segs.drop_dead(t)
            t4 = pc()
            for k, dt in zip(steps, (t1 - t0, t2 - t1, t3 - t2, t4 - t3), strict=True):
                steps[k] += dt
            sealed += 1
        e.close(snapshot=False)
    print(f"{sealed} segments sealed; per segment:")
    for k, v in steps.items():
        print(f"  {k:18} {v / max(sealed, 1) * 1e3:6.2f} ms")


if __name__ == "__main__":
    main()
