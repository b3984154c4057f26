"""Server startup (STORAGE §2, §6 step 1, §8; API §10): the directory locks are taken before
anything listens or writes `SEGLOG_PORT_FILE`; a busy port refuses the start instead of
being shared (no `SO_REUSEPORT`); a cold dir serves one data dir; `python -m seglog.server`,
`python -m seglog serve` and the `seglog serve` console script take the same flags, and
`seglog.server` does not import the CLI back."""

from __future__ import annotations

import errno
import socket
import subprocess
import sys
from pathlib import Path

import grimp
import httpx
import pytest
from typer.main import get_command

from seglog.cli.main import app as cli_app
from seglog.config import Settings
from seglog.engine.engine import Engine, EngineOptions
from seglog.engine.maintenance import relocate_cold, seal_topic
from seglog.model import RecordIn, TopicConfig
from seglog.server import argument_parser, format_address, listen, settings_from_argv
from tests.http.live import diff, put_topic, seqs_of, state, write
from tests.support.server import ServerProcess, run_server_to_exit


def _port_of(srv: ServerProcess) -> int:
    return int(srv.address.rpartition(":")[2])


def _refusal(out: str) -> str:
    """The one `refusing to start` line of a server's output (asserting there is one,
    and that the server neither crashed nor got as far as listening)."""
    lines = [line for line in out.splitlines() if "refusing to start" in line]
    assert len(lines) == 1, out
    assert "Traceback" not in out, out
    assert "listening on" not in out and "topics recovered" not in out, out
    return lines[0]


# ---------------------------------------------------------------- the listening socket


def test_listen_resolves_port_zero_and_refuses_a_busy_port_without_reuseport() -> None:
    with listen("127.0.0.1", 0) as first:
        port = first.getsockname()[1]
        assert port != 0
        assert first.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT) == 0
        with pytest.raises(OSError) as busy:
            listen("127.0.0.1", port).close()
        assert busy.value.errno == errno.EADDRINUSE
        with socket.socket() as sharer:  # a process that asks to share the port cannot
            sharer.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            with pytest.raises(OSError) as shared:
                sharer.bind(("127.0.0.1", port))
            assert shared.value.errno == errno.EADDRINUSE
    assert format_address("::1", 80) == "[::1]:80"
    assert format_address("127.0.0.1", 80) == "127.0.0.1:80"


def test_accepted_connections_have_nagle_off() -> None:
    """Small SSE frames and acks must leave at once, not wait for the peer's delayed ACK."""
    with listen("127.0.0.1", 0) as server, socket.socket() as client:
        client.connect(server.getsockname())
        conn, _ = server.accept()
        with conn:
            assert conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0


def test_a_busy_port_refuses_the_second_server_and_the_first_keeps_every_request(
    tmp_path: Path,
) -> None:
    with ServerProcess(data_dir=tmp_path / "a-data") as first:
        port = _port_of(first)
        assert port != 0
        assert first.port_file.read_text() == f"127.0.0.1:{port}\n"
        with socket.socket() as sharer:  # the live listener does not allow SO_REUSEPORT
            sharer.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            with pytest.raises(OSError) as shared:
                sharer.bind(("127.0.0.1", port))
            assert shared.value.errno == errno.EADDRINUSE
        with httpx.Client(base_url=first.url, timeout=15) as c:
            put_topic(c, "only-on-first")
            write(c, "only-on-first", [{"data": 1}])

        second_port_file = tmp_path / "b-port"
        code, out = run_server_to_exit(
            [
                "--port", str(port),
                "--data-dir", str(tmp_path / "b-data"),
                "--port-file", str(second_port_file),
                "--wal-shards", "1",
            ]
        )  # fmt: skip
        assert code == 1, out
        assert _refusal(out) == (
            f"seglog: refusing to start: cannot listen on 127.0.0.1:{port}: address already in use"
        )
        assert not second_port_file.exists()

        for _ in range(40):  # a fresh connection each time: every one reaches the first
            with httpx.Client(base_url=first.url, timeout=15) as c:
                assert state(c, "only-on-first")["head_seq"] == 1


def test_a_second_server_on_the_same_data_dir_exits_without_touching_the_first(
    tmp_path: Path,
) -> None:
    with ServerProcess(data_dir=tmp_path / "data") as first:
        assert first.proc is not None
        port_file = first.port_file
        before = port_file.read_text()
        st = port_file.stat()
        code, out = run_server_to_exit(
            [
                "--port", "0",
                "--data-dir", str(first.data_dir),
                "--port-file", str(port_file),
                "--wal-shards", "1",
            ]
        )  # fmt: skip
        assert code == 1, out
        assert port_file.read_text() == before  # the first's port file is untouched
        assert (port_file.stat().st_ino, port_file.stat().st_mtime_ns) == (
            st.st_ino,
            st.st_mtime_ns,
        )
        assert not port_file.with_name(port_file.name + ".tmp").exists()
        assert _refusal(out) == (
            f"seglog: refusing to start: data directory {first.data_dir} is already in use"
        )
        lock = first.data_dir / ".seglog.lock"
        assert lock.read_text() == f"pid={first.proc.pid}\n"
        assert httpx.get(first.url + "/v0/ready", timeout=15).status_code == 200


def test_two_servers_cannot_share_a_cold_dir(tmp_path: Path) -> None:
    data, cold = tmp_path / "a" / "data", tmp_path / "cold"
    e = Engine(
        EngineOptions(
            data_dir=data, cold_dir=cold, wal_shards=1, segment_max_events=10,
            hot_retain_segments=1,
        )
    )  # fmt: skip
    e.open()
    e.put_topic("t", TopicConfig())
    for w in range(4):
        e.write("t", [RecordIn.of({"n": w * 10 + i}) for i in range(10)])
        seal_topic(e, e.topics["t"], force=True)
    assert relocate_cold(e, e.topics["t"]) == 3
    e.close(snapshot=True)
    cold_segments = sorted(cold.rglob("seg-*"))
    assert len(cold_segments) == 6  # 3 segments: .data + .idx

    env = {"SEGLOG_COLD_DIR": str(cold), "SEGLOG_HOT_RETAIN_SEGMENTS": "1"}
    with ServerProcess(data_dir=data, env=env, wal_shards=1) as first:
        code, out = run_server_to_exit(
            [
                "--port", "0",
                "--data-dir", str(tmp_path / "b" / "data"),
                "--cold-dir", str(cold),
                "--wal-shards", "1",
            ]
        )  # fmt: skip
        assert code == 1, out
        assert (
            _refusal(out) == f"seglog: refusing to start: cold directory {cold} is already in use"
        )
        assert sorted(cold.rglob("seg-*")) == cold_segments
        with httpx.Client(base_url=first.url, timeout=15) as c:
            d = diff(c, "t", from_seq=0, limit=25)
            assert seqs_of(d) == list(range(1, 26))
            assert [r["data"] for r in d["records"]] == [{"n": n} for n in range(25)]


# ---------------------------------------------------------------- entry points and flags


def test_the_console_script_serves_with_the_cold_dir_locked(tmp_path: Path) -> None:
    cold = tmp_path / "cold"
    srv = ServerProcess(
        data_dir=tmp_path / "data",
        extra_args=("--host", "127.0.0.1", "--cold-dir", str(cold), "--log-level", "warning"),
    )
    srv.use_cli = True
    with srv:
        assert srv.proc is not None
        assert httpx.get(srv.url + "/v0/ready", timeout=15).status_code == 200
        assert (cold / ".seglog.lock").read_text() == f"pid={srv.proc.pid}\n"


def test_python_dash_m_seglog_runs_the_cli() -> None:
    r = subprocess.run(
        [sys.executable, "-m", "seglog", "serve", "--help"],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    assert b"--port-file" in r.stdout and b"--cold-dir" in r.stdout


def test_the_server_module_takes_the_flags_of_seglog_serve() -> None:
    serve = get_command(cli_app).commands["serve"]  # type: ignore[attr-defined]
    cli_flags = {opt for param in serve.params for opt in param.opts} - {"--help"}
    module_flags = {
        opt for action in argument_parser()._actions for opt in action.option_strings
    } - {"-h", "--help"}
    assert cli_flags == module_flags
    s = settings_from_argv(
        ["--host", "127.0.0.1:5001", "--port-file", "pf", "--cold-dir", "c", "--wal-shards", "0"]
    )
    assert (s.host, s.port, s.port_file, s.cold_dir) == ("127.0.0.1", 5001, Path("pf"), Path("c"))
    assert s.wal_shards == Settings.from_env().wal_shards  # 0 = the default, as `seglog serve`


def test_the_server_module_does_not_import_the_cli() -> None:
    graph = grimp.build_graph("seglog")
    assert graph.chain_exists(importer="seglog.cli", imported="seglog.server", as_packages=True)
    assert not graph.chain_exists(importer="seglog.server", imported="seglog.cli", as_packages=True)


# ---------------------------------------------------------------- a corrupt WAL


def test_a_corrupt_wal_refuses_the_start_names_file_and_offset_and_changes_nothing(
    tmp_path: Path,
) -> None:
    """STORAGE §3.1, black-box: acked fsync records, one byte flipped 30 % into the WAL,
    SIGKILL, restart. The server must not come up serving a silent subset: it exits 1,
    names the file and the offset, and leaves every file as it was; `seglog repair --yes`
    then chooses the loss explicitly and the server starts."""
    data = tmp_path / "data"
    with ServerProcess(data_dir=data, wal_shards=1) as srv, httpx.Client(base_url=srv.url) as c:
        put_topic(c, "t", {"durability": "fsync"})
        for i in range(40):
            write(c, "t", [{"data": {"i": i, "pad": "x" * 40}} for _ in range(5)])
        srv.kill()
    wal = data / "wal" / "wal-0000000000000001.log"
    buf = bytearray(wal.read_bytes())
    end = len(buf.rstrip(b"\0"))
    buf[int(end * 0.3)] ^= 0x01
    wal.write_bytes(bytes(buf))
    before = {p: p.read_bytes() for p in data.rglob("*") if p.is_file() and p.suffix != ".lock"}

    code, out = run_server_to_exit(["--port", "0", "--data-dir", str(data), "--wal-shards", "1"])
    assert code == 1, out
    line = next(x for x in out.splitlines() if "WAL corruption" in x)
    assert str(wal) in line and "at offset" in line and "seglog repair" in line, line
    assert "Traceback" not in out, out
    after = {p: p.read_bytes() for p in data.rglob("*") if p.is_file() and p.suffix != ".lock"}
    assert after == before, "a refused start changed the data dir"

    repaired = subprocess.run(
        [sys.executable, "-m", "seglog", "repair", str(data), "--yes"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    assert (data / "wal" / "quarantine").is_dir()
    with ServerProcess(data_dir=data, wal_shards=1) as srv, httpx.Client(base_url=srv.url) as c:
        got = seqs_of(diff(c, "t", from_seq=0, limit=1000))
        assert got == list(range(1, len(got) + 1)) and 0 < len(got) < 200
