"""docs/README.md indexes every doc in docs/, every relative link in it and in the README
resolves, and the README links the index."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def relative_links(md: Path) -> set[str]:
    return {t for t in LINK.findall(md.read_text(encoding="utf-8")) if "://" not in t}


def test_index_lists_every_doc() -> None:
    docs = {p.name for p in DOCS.glob("*.md")} - {"README.md"}
    linked = {Path(t).name for t in relative_links(DOCS / "README.md") if "/" not in t}
    assert docs - linked == set(), "docs missing from docs/README.md"


def test_links_resolve() -> None:
    for md in (DOCS / "README.md", ROOT / "README.md", ROOT / "deploy" / "README.md"):
        broken = {t for t in relative_links(md) if not (md.parent / t).exists()}
        assert broken == set(), f"{md.relative_to(ROOT)}: broken links"


def test_readme_links_the_index_and_keeps_its_setup_commands() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "docs/README.md" in relative_links(ROOT / "README.md")
    assert (
        "python3.11 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/seglog serve" in readme
    )
    assert (
        "python3.11 -m venv .venv && .venv/bin/pip install -e '.[dev,spark]' && "
        ".venv/bin/python -m pytest -q -p no:cacheprovider" in readme
    )


def test_license_is_apache_2() -> None:
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text
