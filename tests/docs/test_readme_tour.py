"""The README's tour runs as written: every shell command of its `bash` block (with the venv's
`bin/` first on PATH, as an activated venv has it, and `SEGLOG_URL` pointing at a server on a
free port), the console URL, and its Python snippets with `127.0.0.1:4000` replaced by that
server's address. Each command has a check here; a command added to the tour without one
fails the test until it gets one.

The Spark snippet runs too, in a fresh JVM (~30 s): Java and pyspark are part of the
README's test set-up.
"""

from __future__ import annotations

import json
import os
import queue
import shlex
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from seglog.client import Client
from tests.docs.blocks import README, Block, blocks, section
from tests.support.server import ServerProcess, clean_env

DEFAULT = "127.0.0.1:4000"
COMMAND_TIMEOUT_S = 60.0


def tour() -> str:
    return section(README.read_text(), "A five-minute tour")


def shell_commands() -> list[list[str]]:
    (block,) = blocks(tour(), "bash")
    return [shlex.split(line, comments=True) for line in block.code.splitlines() if line.strip()]


def python_snippets() -> list[Block]:
    return blocks(tour(), "python")


def tour_env(srv: ServerProcess) -> dict[str, str]:
    venv_bin = str(Path(sys.executable).parent)
    env = clean_env({"SEGLOG_URL": srv.url})
    env["PATH"] = venv_bin + os.pathsep + env.get("PATH", "")
    env["VIRTUAL_ENV"] = str(Path(venv_bin).parent)
    return env


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    # The tour's first command, `seglog serve`, as the console script (on a free port).
    (first, *_rest) = shell_commands()
    assert first == ["seglog", "serve", "&"], f"the tour should start with the server: {first}"
    srv = ServerProcess()
    srv.use_cli = True
    with srv:
        yield srv


def run(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S
    )


def json_lines(text: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


class Follower:
    """A background command (`... &`): its stdout lines arrive on a queue."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path) -> None:
        self.proc = subprocess.Popen(
            argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)

    def wait_for(self, needle: str) -> str:
        """The first line containing `needle` (fails after COMMAND_TIMEOUT_S without one)."""
        seen: list[str] = []
        while True:
            try:
                line = self.lines.get(timeout=COMMAND_TIMEOUT_S)
            except queue.Empty:
                pytest.fail(f"follower never printed {needle!r}; it printed {seen}")
            seen.append(line)
            if needle in line:
                return line

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGINT)
        try:
            return self.proc.wait(COMMAND_TIMEOUT_S)
        finally:
            self.proc.kill()


Check = Callable[[subprocess.CompletedProcess[str]], None]


def check_health(out: subprocess.CompletedProcess[str]) -> None:
    (health,) = json_lines(out.stdout)
    assert health["status"] == "ok"


def check_tail(out: subprocess.CompletedProcess[str]) -> None:
    assert [r["data"] for r in json_lines(out.stdout)] == [
        {"id": 1, "item": "book"},
        {"id": 2, "item": "pen"},
    ]


def check_describe(out: subprocess.CompletedProcess[str]) -> None:
    (state,) = json_lines(out.stdout)
    assert state["topic"] == "orders"
    assert state["head_seq"] == 3
    assert state["count"] == 3


def produced(n: int, seqs: str) -> Check:
    def check(out: subprocess.CompletedProcess[str]) -> None:
        assert f"orders: {n} record" in out.stderr and f"seqs {seqs}" in out.stderr, out.stderr

    return check


FOREGROUND: dict[str, Check] = {
    "seglog health": check_health,
    """seglog produce orders '{"id": 1, "item": "book"}' '{"id": 2, "item": "pen"}'""": produced(
        2, "1..2"
    ),
    "seglog tail orders": check_tail,
    """seglog produce orders '{"id": 3, "item": "ink"}'""": produced(1, "3..3"),
    "seglog topics describe orders --json": check_describe,
}
BACKGROUND = {"seglog tail orders -f"}


def test_tour_shell_commands_console_and_client(server: ServerProcess, tmp_path: Path) -> None:
    env = tour_env(server)
    assert shutil.which("seglog", path=env["PATH"]) == str(Path(sys.executable).with_name("seglog"))
    followers: list[Follower] = []
    try:
        for argv in shell_commands()[1:]:
            background = argv[-1] == "&"
            argv = argv[:-1] if background else argv
            command = shlex.join(argv)
            if background:
                assert command in BACKGROUND, f"README tour: no check for `{command} &`"
                follower = Follower(argv, env, tmp_path)
                follower.wait_for('"id":2')  # it printed the backlog: it is following
                followers.append(follower)
                continue
            check = FOREGROUND.get(command)
            assert check is not None, f"README tour: no check for `{command}`"
            out = run(argv, env, tmp_path)
            assert out.returncode == 0, f"`{command}` exited {out.returncode}: {out.stderr}"
            check(out)
        # The follower printed what the second `produce` wrote, then stops on Ctrl-C.
        (follower,) = followers
        assert '"item":"ink"' in follower.wait_for('"id":3')
        assert follower.stop() in (0, 130)
    finally:
        for f in followers:
            f.proc.kill()
            f.proc.wait()

    console_url = f"http://{DEFAULT}/console"
    assert console_url in tour()
    page = httpx.get(console_url.replace(DEFAULT, server.address), timeout=10)
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")

    client_snippet = python_snippets()[0]
    assert "seglog.client" in client_snippet.code
    out = run(
        [sys.executable, "-c", client_snippet.code.replace(DEFAULT, server.address)],
        env,
        tmp_path,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "3 {'id': 3, 'item': 'ink'}",
        "4 {'id': 4, 'item': 'cup'}",
    ]


@pytest.mark.spark
def test_tour_spark_snippet(server: ServerProcess, tmp_path: Path) -> None:
    # Java and pyspark are part of the README's test set-up (the `spark` extra): no skip.
    with Client(server.url) as c:  # the records the tour's shell part writes, if not run yet
        if c.list_topics(prefix="orders").topics == []:
            c.append("orders", [{"data": {"id": 1, "item": "book"}}])
    spark_snippet = python_snippets()[1]
    assert "SparkSession" in spark_snippet.code
    out = run(
        [sys.executable, "-c", spark_snippet.code.replace(DEFAULT, server.address)],
        tour_env(server),
        tmp_path,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "|seq|" in out.stdout.replace(" ", "")
    assert '{"id":1,"item":"book"}' in out.stdout


def test_readme_links_every_doc() -> None:
    text = README.read_text()
    docs = sorted(p.name for p in (README.parent / "docs").glob("*.md"))
    assert docs, "no docs found"
    assert [d for d in docs if f"](docs/{d})" not in text] == []


def test_venv_is_used_one_way() -> None:
    """README and docs assume an activated venv; `.venv/bin/` appears only in the README's
    set-up commands and the sentences that explain the convention."""
    allowed = ("python3.11 -m venv .venv", ". .venv/bin/activate", "`.venv/bin/")
    for path in [README, *sorted((README.parent / "docs").glob("*.md"))]:
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if ".venv/bin/" in line:
                assert any(a in line for a in allowed), f"{path.name}:{n}: {line}"
