"""Errors are one line with host:port and a hint, never a traceback; data goes to stdout as a
table on a terminal and as JSON lines in a pipe; every option has help; --version and shell
completion exist."""

from __future__ import annotations

import shlex
import socket
import subprocess
from typing import Any

import typer.main

from seglog import __version__
from seglog.cli.main import app
from seglog.client import Client
from tests.cli.conftest import cli_argv, cli_env, run_cli, run_cli_tty
from tests.support.server import ServerProcess


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_refused_connection_is_one_line_with_host_port_and_a_hint() -> None:
    port = free_port()
    r = run_cli("topics", "ls", url=f"http://127.0.0.1:{port}")
    assert r.code == 1
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert f"127.0.0.1:{port}" in lines[0]
    assert "hint:" in lines[0]
    assert r.stdout == ""


def test_a_server_error_is_one_unwrapped_line(server: ServerProcess) -> None:
    name = "a-topic-with-a-rather-long-name-so-that-the-message-passes-eighty-columns"
    r = run_cli("topics", "describe", name, url=server.url)
    assert r.code == 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert len(lines[0]) > 80  # not hard-wrapped although COLUMNS=80
    assert server.address in lines[0]
    assert "topic_not_found" in lines[0]
    assert "seglog topics ls" in lines[0]


def test_usage_errors_exit_2() -> None:
    assert run_cli("tail").code == 2
    assert run_cli("no-such-command").code == 2


def test_version() -> None:
    r = run_cli("--version")
    assert r.code == 0
    assert r.stdout.strip() == f"seglog {__version__}"


def test_shell_completion_is_available() -> None:
    r = run_cli("completion", "bash")
    assert r.code == 0, r.stderr
    assert "complete" in r.stdout and "_SEGLOG_COMPLETE" in r.stdout
    assert run_cli("completion", "zsh").stdout.startswith("#compdef seglog")
    assert run_cli("completion", "tcsh").code == 2


def test_show_completion_detects_the_calling_shell() -> None:
    """`--show-completion` names no shell: it finds one among the parent processes (so run
    it from a bash, as a user would, not from whatever runs the tests)."""
    cmd = " ".join(shlex.quote(a) for a in cli_argv("--show-completion"))
    p = subprocess.run(
        ["bash", "-c", f"{cmd}; true"], capture_output=True, env=cli_env(), timeout=60, check=False
    )
    assert p.returncode == 0, p.stderr
    assert b"_SEGLOG_COMPLETE" in p.stdout and b"complete" in p.stdout


def test_every_option_and_argument_has_help() -> None:
    missing: list[str] = []
    seen: list[str] = []

    def walk(cmd: Any, path: str) -> None:
        seen.append(path)
        for p in cmd.params:
            if p.name in ("install_completion", "show_completion"):
                continue
            if not getattr(p, "help", None):
                missing.append(f"{path} {p.name}")
        if hasattr(cmd, "commands"):
            for name, sub in cmd.commands.items():
                walk(sub, f"{path} {name}")

    walk(typer.main.get_command(app), "seglog")
    assert "seglog queue work" in seen and len(seen) > 20
    assert missing == []


def test_topics_ls_is_json_lines_in_a_pipe_and_a_table_on_a_terminal(
    server: ServerProcess, client: Client
) -> None:
    client.put_topic("ls.a")
    client.put_topic("ls.b")
    client.append("ls.b", [{"data": 1}, {"data": 2}])
    piped = run_cli("topics", "ls", "--prefix", "ls.", url=server.url)
    assert piped.code == 0, piped.stderr
    rows = piped.json_lines()
    assert [(r["topic"], r["count"]) for r in rows] == [("ls.a", 0), ("ls.b", 2)]
    tty = run_cli_tty("topics", "ls", "--prefix", "ls.", url=server.url)
    assert tty.code == 0, tty.stderr
    assert "ls.b" in tty.stdout and "topic" in tty.stdout and "{" not in tty.stdout
    forced = run_cli_tty("topics", "ls", "--prefix", "ls.", "--json", url=server.url)
    assert '"topic":"ls.a"' in forced.stdout
    aliased = run_cli("topics", "list", "--prefix", "ls.", url=server.url)
    assert aliased.code == 0 and aliased.json_lines() == rows, aliased.stderr


def test_a_malformed_url_is_a_usage_error() -> None:
    for url in ("foo", "http://[::1", "http://h:99999", "ftp://h:1"):
        r = run_cli("tail", "t", url=url)
        assert r.code == 2, (url, r.stderr)
        assert "Traceback" not in r.stderr and "--url" in r.stderr
