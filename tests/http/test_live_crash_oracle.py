"""Black-box SIGKILL oracle, a few rounds in the default suite (the full run is
`scripts/crash_oracle.py`, 100 rounds by default).

Each round runs a concurrent HTTP workload against the real server process (writes to
`fsync`/`disk`/`ephemeral` topics, capped topics, `before_seq` and tag deletes, class
changes, drops and creates), SIGKILLs it with requests in flight, restarts it on the same
data dir and checks every acked outcome (module docstring of the script, checks (a)–(g))."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def _oracle() -> ModuleType:
    name = "seglog_crash_oracle"
    mod = sys.modules.get(name)
    if mod is None:
        spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / "crash_oracle.py")
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod  # dataclasses resolve their module through sys.modules
        spec.loader.exec_module(mod)
    return mod


def test_sigkill_oracle_rounds(tmp_path: Path) -> None:
    oracle = _oracle()
    # round 1 starts from an empty dir; round 2 begins with a graceful restart (snapshot),
    # so its crash recovers from a snapshot plus a WAL tail; round 3 is a plain crash again
    total = oracle.run(
        3,
        seed=20240611,
        shards=2,
        data_dir=tmp_path / "data",
        quiet=True,
        min_ms=300,
        max_ms=700,
        clean_restarts=0.5,
    )
    # the rounds really exercised what they check
    assert total.records_acked > 0 and total.records_verified > 0
    assert total.writes_acked > total.writes_unknown
    assert total.deletes_verified > 0
    assert total.capped_topics_checked > 0
    assert total.class_changes_verified > 0
    assert total.probes > 0
    assert total.topics_verified >= 3 * len(oracle.INITIAL)
