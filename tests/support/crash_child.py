"""Child process for crash tests: append fsync-class records as fast as it can and print
one line per acknowledged write (`seq` + the exact data JSON) to stdout, flushed, so the
parent knows exactly what was acked before it SIGKILLs us.

usage: python -m tests.support.crash_child DATA_DIR SHARDS DURABILITY
"""

from __future__ import annotations

import sys
from pathlib import Path

from seglog.engine.engine import Engine, EngineOptions
from seglog.model import Durability, RecordIn, TopicConfig


def main() -> None:
    data_dir, shards, durability = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    e = Engine(EngineOptions(data_dir=data_dir, wal_shards=shards, segment_max_events=64))
    e.open()
    e.put_topic("crash", TopicConfig(durability=Durability(durability)))
    out = sys.stdout
    i = 0
    while True:
        batch = [RecordIn.of({"w": i + k, "pad": "p" * ((i + k) % 37)}) for k in range(1 + i % 5)]
        res = e.write("crash", batch)
        lines = [f"{s} {r.data_json.decode()}\n" for s, r in zip(res.seqs, batch, strict=True)]
        out.write("".join(lines))
        out.flush()
        i += len(batch)
        if i % 200 == 0:
            from seglog.engine.maintenance import seal_topic

            seal_topic(e, e.topics["crash"])


if __name__ == "__main__":
    main()
