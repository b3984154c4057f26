"""Fenced code blocks of a Markdown document, with where they start (for error messages)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs"
README = DOCS.parent / "README.md"

_FENCE = re.compile(r"^```(?P<info>[^\n`]*)\n(?P<body>.*?)^```\s*$", re.MULTILINE | re.DOTALL)


@dataclass(frozen=True, slots=True)
class Block:
    lang: str
    flags: tuple[str, ...]
    code: str
    line: int  # 1-based line of the opening fence

    @property
    def runnable(self) -> bool:
        return "no-run" not in self.flags


def blocks(text: str, lang: str | None = None) -> list[Block]:
    """Every top-level fenced block (of `lang`, if given), in document order."""
    out: list[Block] = []
    for m in _FENCE.finditer(text):
        info = m.group("info").split()
        block = Block(
            lang=info[0] if info else "",
            flags=tuple(info[1:]),
            code=m.group("body"),
            line=text.count("\n", 0, m.start()) + 1,
        )
        if lang is None or block.lang == lang:
            out.append(block)
    return out


def section(text: str, heading: str) -> str:
    """The text under a `## heading`, up to the next `## `."""
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]
