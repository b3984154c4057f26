"""docs/metrics.md lists exactly the metric families a real server exports, with their
types: a family added to the server without a doc row, or a doc row for a name the server
does not export (a typo, a rename), fails here."""

from __future__ import annotations

import re
from pathlib import Path

from tests.ops.conftest import Scrape

DOC = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"
ROW = re.compile(r"^\| `([a-zA-Z_:][a-zA-Z0-9_:]*)` \| (\w+) \|", re.M)


def doc_rows(text: str) -> dict[str, str]:
    """Name → type of every table row whose first cell is one backticked metric name."""
    rows: dict[str, str] = {}
    for name, kind in ROW.findall(text):
        assert name not in rows, f"{name} documented twice"
        rows[name] = kind
    return rows


def test_doc_lists_every_exported_family_and_nothing_else(scrape: Scrape) -> None:
    documented = doc_rows(DOC.read_text(encoding="utf-8"))
    exported = scrape.families
    assert set(exported) - set(documented) == set(), "exported but not in docs/metrics.md"
    assert set(documented) - set(exported) == set(), "in docs/metrics.md but not exported"
    wrong = {n: (documented[n], exported[n]) for n in exported if documented[n] != exported[n]}
    assert wrong == {}, "documented type != exported type"


def test_every_family_has_samples(scrape: Scrape) -> None:
    # The per-topic and queue families are empty without topics: the fixture's writes must
    # have populated them, or the name checks above and in test_deploy prove less.
    assert {n for n, k in scrape.sample_counts.items() if k == 0} == set()
    assert len(scrape.families) >= 40


def test_doc_rows_parse_names_and_types() -> None:
    text = "| `a_total` | counter | | x |\n| `b` | gauge | `l` | y |\n| not a row |\n"
    assert doc_rows(text) == {"a_total": "counter", "b": "gauge"}
