"""Run a real `seglog` server process for black-box HTTP tests.

`ServerProcess` starts `python -m seglog.server --port 0 --port-file F --data-dir D` with a
clean `SEGLOG_*` environment plus whatever the test adds, waits until the port file exists
and `GET /v0/ready` answers 200, and stops it with SIGTERM (graceful, final snapshot) or
SIGKILL (crash). `restart()` reuses the data directory. The server's stdout/stderr go to a
log file next to the data dir (never a pipe, so a chatty server cannot block), and every
start failure quotes the tail of that log.

    with ServerProcess(env={"SEGLOG_MAX_TOPICS": "1"}) as srv:
        httpx.get(srv.url + "/v0/health")
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Self

import httpx

DEFAULT_START_TIMEOUT_S = 30.0
DEFAULT_STOP_TIMEOUT_S = 15.0


class ServerStartError(RuntimeError):
    """The server exited or did not become ready in time (message includes its log)."""


def clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """`os.environ` without inherited `SEGLOG_*` settings, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEGLOG_")}
    env.setdefault("PYTHONUNBUFFERED", "1")
    if extra:
        env.update(extra)
    return env


def _connect_host(host: str) -> str:
    """The address a client should dial for a bound `host` (wildcards ⇒ loopback)."""
    h = host.strip().strip("[]")
    if h in ("", "0.0.0.0"):
        return "127.0.0.1"
    if h == "::":
        return "[::1]"
    return f"[{h}]" if ":" in h else h


class ServerProcess:
    """One server process on a free port and a (by default temporary) data directory."""

    def __init__(
        self,
        data_dir: Path | None = None,
        env: Mapping[str, str] | None = None,
        *,
        wal_shards: int | None = 2,
        extra_args: tuple[str, ...] = (),
        start_timeout_s: float = DEFAULT_START_TIMEOUT_S,
    ) -> None:
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if data_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="seglog-http-")
            base = Path(self._tmp.name)
            data_dir = base / "data"
        else:
            base = data_dir.parent
        self.base = base
        self.data_dir = data_dir
        self.env: dict[str, str] = dict(env or {})
        self.wal_shards = wal_shards
        self.extra_args = extra_args
        self.start_timeout_s = start_timeout_s
        self.port_file = base / f"port-{os.getpid()}-{id(self)}"
        self.log_path = base / f"server-{id(self)}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self._address: str | None = None
        self.starts = 0
        self.use_cli = False  # True: run the `seglog serve` console script instead

    # ------------------------------------------------------------------ lifecycle

    def command(self) -> list[str]:
        if self.use_cli:
            script = Path(sys.executable).with_name("seglog")
            prog = (
                [str(script), "serve"]
                if script.exists()
                else [sys.executable, "-m", "seglog.cli.main", "serve"]
            )
        else:
            prog = [sys.executable, "-m", "seglog.server"]
        cmd = [
            *prog,
            "--port",
            "0",
            "--port-file",
            str(self.port_file),
            "--data-dir",
            str(self.data_dir),
        ]
        if self.wal_shards is not None:
            cmd += ["--wal-shards", str(self.wal_shards)]
        return [*cmd, *self.extra_args]

    def spawn(self) -> subprocess.Popen[bytes]:
        """Start the process without waiting for anything."""
        if self.proc is not None and self.proc.poll() is None:
            raise RuntimeError("server already running")
        self.port_file.unlink(missing_ok=True)
        self._address = None
        self.starts += 1
        log = self.log_path.open("ab")
        log.write(f"---- start #{self.starts}: {' '.join(self.command())}\n".encode())
        log.flush()
        try:
            self.proc = subprocess.Popen(
                self.command(),
                env=clean_env(self.env),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        finally:
            log.close()
        return self.proc

    def start(self) -> Self:
        """Spawn and wait for the port file and `GET /v0/ready` == 200."""
        self.spawn()
        try:
            self.wait_ready()
        except BaseException:
            self.kill()
            raise
        return self

    def wait_ready(self, timeout_s: float | None = None) -> None:
        deadline = time.monotonic() + (timeout_s or self.start_timeout_s)
        proc = self.proc
        assert proc is not None
        while self._address is None:
            if proc.poll() is not None:
                raise ServerStartError(self._why(f"server exited with code {proc.returncode}"))
            if time.monotonic() > deadline:
                raise ServerStartError(self._why("no port file before the timeout"))
            try:
                text = self.port_file.read_text().strip()
            except FileNotFoundError:
                text = ""
            if text:
                host, _, port = text.rpartition(":")
                self._address = f"{_connect_host(host)}:{port}"
            else:
                time.sleep(0.02)
        last = "no answer"
        with httpx.Client(timeout=2.0) as c:
            while True:
                if proc.poll() is not None:
                    raise ServerStartError(self._why(f"server exited with code {proc.returncode}"))
                try:
                    r = c.get(self.url + "/v0/ready", headers=self._probe_headers())
                    if r.status_code == 200:
                        return
                    last = f"{r.status_code} {r.text[:200]}"
                except httpx.HTTPError as e:
                    last = repr(e)
                if time.monotonic() > deadline:
                    raise ServerStartError(self._why(f"/v0/ready not 200 in time (last: {last})"))
                time.sleep(0.03)

    def _probe_headers(self) -> dict[str, str]:
        keys = self.env.get("SEGLOG_API_KEYS", "")
        if self.env.get("SEGLOG_PROBE_AUTH", "").strip().lower() in ("1", "true"):
            first = next((e.strip() for e in keys.split(",") if e.strip()), "")
            secret = first.split(":", 1)[0]
            if secret:
                return {"Authorization": f"Bearer {secret}"}
        return {}

    def stop(self, timeout_s: float = DEFAULT_STOP_TIMEOUT_S) -> int | None:
        """SIGTERM, wait up to `timeout_s`, then SIGKILL. Returns the exit code."""
        proc = self.proc
        if proc is None:
            return None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        return proc.returncode

    def kill(self) -> int | None:
        """SIGKILL (a crash: no final snapshot, page cache stays)."""
        proc = self.proc
        if proc is None:
            return None
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        return proc.returncode

    def restart(
        self, *, graceful: bool = True, env: Mapping[str, str] | None = None
    ) -> ServerProcess:
        """Stop (SIGTERM if `graceful`, else SIGKILL) and start again on the same data dir."""
        if graceful:
            self.stop()
        else:
            self.kill()
        if env is not None:
            self.env = dict(env)
        return self.start()

    def close(self) -> None:
        self.stop()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # ------------------------------------------------------------------ info

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def address(self) -> str:
        if self._address is None:
            raise RuntimeError("server not started")
        return self._address

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def _why(self, what: str) -> str:
        tail = self.log_text()[-4000:]
        return f"seglog server failed to start: {what}\ncommand: {' '.join(self.command())}\n--- server output ---\n{tail}"


def run_to_exit(
    env: Mapping[str, str], timeout_s: float = 20.0, data_dir: Path | None = None
) -> tuple[int | None, str]:
    """Start a server that is expected to refuse to start. Returns `(exit code, output)`;
    the code is None (and the process killed) if it was still running after `timeout_s`
    and had become ready (i.e. it did *not* refuse)."""
    with tempfile.TemporaryDirectory(prefix="seglog-guard-") as tmp:
        srv = ServerProcess(data_dir=data_dir or Path(tmp) / "data", env=env)
        srv.spawn()
        proc = srv.proc
        assert proc is not None
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            srv.kill()
            return None, srv.log_text()
        return proc.returncode, srv.log_text()


def run_server_to_exit(
    args: Sequence[str], env: Mapping[str, str] | None = None, timeout_s: float = 20.0
) -> tuple[int | None, str]:
    """Run `python -m seglog.server <args>` (exactly these flags, nothing added), expecting
    it to exit by itself, e.g. refusing to start. Returns `(exit code, output)`; the code
    is None (and the process killed) if it was still running after `timeout_s`."""
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "seglog.server", *args],
            env=clean_env(env),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            code: int | None = proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
            code = None
        out.seek(0)
        return code, out.read().decode(errors="replace")
