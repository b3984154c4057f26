"""docs/client.md: every ```python block runs, in order, in one namespace, against a real
server. A block fails the test by raising (the doc's own `assert`s included); `no-run` blocks
are skipped and each must be said to be shown only."""

from __future__ import annotations

import contextlib
import io
import re

import pytest

from tests.docs.blocks import DOCS, Block, blocks
from tests.support.server import ServerProcess

DOC = DOCS / "client.md"
_PRINT_COMMENT = re.compile(r"^\s*print\(.*\)\s+# (.+)$", re.MULTILINE)


def python_blocks() -> list[Block]:
    return blocks(DOC.read_text(), "python")


def run_blocks(found: list[Block]) -> str:
    """Execute the runnable blocks in one namespace; returns what they printed."""
    namespace: dict[str, object] = {"__name__": "client_doc"}
    out = io.StringIO()
    for block in found:
        if not block.runnable:
            continue
        code = compile(block.code, f"docs/client.md:{block.line}", "exec")
        try:
            with contextlib.redirect_stdout(out):
                exec(code, namespace)
        except Exception as exc:
            pytest.fail(
                f"docs/client.md block at line {block.line} raised "
                f"{type(exc).__name__}: {exc}\n--- block ---\n{block.code}"
                f"--- printed so far ---\n{out.getvalue()}"
            )
    return out.getvalue()


def test_every_python_block_runs(server: ServerProcess, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SEGLOG_URL", server.url)
    found = python_blocks()
    assert sum(b.runnable for b in found) >= 10
    printed = run_blocks(found)
    lines = printed.splitlines()
    missing = [want for want in stated_outputs(found) if not shown(want, lines)]
    assert missing == [], f"outputs stated in docs/client.md but not printed: {missing}"


def stated_outputs(found: list[Block]) -> list[str]:
    """The comment after each `print(...)` line: the output the page says it prints."""
    out: list[str] = []
    for block in found:
        if block.runnable:
            out += [m.group(1).strip() for m in _PRINT_COMMENT.finditer(block.code)]
    return out


def shown(want: str, lines: list[str]) -> bool:
    """`want` is a printed line; a trailing `...` means the line starts with what is before."""
    if want.endswith("..."):
        head = want.removesuffix("...").rstrip(" ;,")
        return any(line.startswith(head) for line in lines)
    return want in lines


def test_the_doc_covers_what_it_promises() -> None:
    code = "".join(b.code for b in python_blocks() if b.runnable)
    for call in (
        "Client(",
        "AsyncClient(",
        "put_topic(",
        "idempotency_key=",
        "next_from_seq",
        ".watch(",
        "Tombstone",
        "read_arrow(",
        ".claim(",
        ".ack(",
        ".work(",
        "TopicNotFound",
        "SeglogConnectionError",
    ):
        assert call in code, f"no executed example uses {call!r}"


def test_no_run_blocks_are_explained() -> None:
    text = DOC.read_text().splitlines()
    for block in python_blocks():
        if not block.runnable:
            before = " ".join(text[max(block.line - 4, 0) : block.line - 1])
            assert "not run" in before, f"no-run block at line {block.line} is not explained"
