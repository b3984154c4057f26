"""Shared helpers for the CLI tests: one real server per test module and the `seglog` command
run as a subprocess (`python -m seglog`), with stdout piped (or on a pseudo-terminal)."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson
import pytest

from seglog.client import Client
from tests.support.server import ServerProcess, clean_env

SRC = os.path.join(os.path.dirname(__file__), "..", "..", "src")


@dataclass
class Ran:
    code: int
    stdout: str
    stderr: str

    def json_lines(self) -> list[Any]:
        return [orjson.loads(line) for line in self.stdout.splitlines() if line.strip()]


def cli_env(url: str | None = None, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = clean_env(extra)
    env["PYTHONPATH"] = os.path.abspath(SRC) + os.pathsep + env.get("PYTHONPATH", "")
    env["COLUMNS"] = "80"  # what a narrow terminal or a CI log would report
    env.pop("NO_COLOR", None)
    if url is not None:
        env["SEGLOG_URL"] = url
    return env


def cli_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "seglog", *args]


def run_cli(*args: str, url: str | None = None, stdin: str = "", timeout: float = 60.0) -> Ran:
    """Run `seglog ARGS` with stdout and stderr piped (not terminals)."""
    p = subprocess.run(
        cli_argv(*args),
        input=stdin.encode(),
        capture_output=True,
        env=cli_env(url),
        timeout=timeout,
        check=False,
    )
    return Ran(p.returncode, p.stdout.decode(), p.stderr.decode())


def run_cli_tty(*args: str, url: str | None = None, timeout: float = 60.0) -> Ran:
    """Run `seglog ARGS` with stdout on a pseudo-terminal (stderr piped)."""
    master, slave = pty.openpty()
    env = cli_env(url, {"TERM": "xterm", "COLUMNS": "160"})
    proc = subprocess.Popen(
        cli_argv(*args),
        stdin=subprocess.DEVNULL,
        stdout=slave,
        stderr=subprocess.PIPE,
        env=env,
    )
    os.close(slave)
    chunks: list[bytes] = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed its end
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    _, err = proc.communicate(timeout=timeout)
    return Ran(proc.wait(), b"".join(chunks).decode(errors="replace"), err.decode())


@pytest.fixture
def client(server: ServerProcess) -> Iterator[Client]:
    with Client(server.url) as c:
        yield c
