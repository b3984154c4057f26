"""The composition root: settings → directory locks → listener → engine (recovery) → ASGI
app → granian.

Only this module names the HTTP server. granian runs embedded in our own uvloop, one
process, `--http auto` (HTTP/1.1 and h2c prior knowledge on one port, API §0.1).

Startup, in this order, each refusal a one-line message on stderr and a non-zero exit:
1. the startup guard and the key spec (API §1.5; exit 2);
2. the data-dir lock, then the cold-dir lock (STORAGE §2, §6 step 1; exit 1 "… is
   already in use") — before anything listens or writes `SEGLOG_PORT_FILE`, so a second
   server on the same directories touches nothing of the first one's;
3. the listening socket, bound here without `SO_REUSEPORT` (exit 1 "cannot listen on
   host:port: …"). granian's own Linux listener sets `SO_REUSEPORT`, which lets a second
   process bind a busy port and silently take half of its connections; granian is handed
   our socket instead. Port 0 is resolved by the kernel, and the real port is reported;
4. `SEGLOG_PORT_FILE`, then recovery in a worker thread while the listener is open, so
   `/v0/ready` answers `503 not_ready` with `replay_progress` until the engine is ready
   (API §10). The engine's `DataDir` adopts the locks taken in step 2.
5. recovery refuses a corrupt WAL (STORAGE §3.1): the error names the file and offset,
   nothing on disk changes, and the exit status is 1 (`seglog repair` is the way on).

Shutdown on SIGTERM/SIGINT: stop accepting, signal open streams, drain in-flight requests
(bounded), stop maintenance and the router worker, final router drain, final snapshot,
release the directory locks.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import gc
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Coroutine, Sequence
from pathlib import Path
from typing import Any

from granian._granian import SocketHolder
from granian.constants import HTTPModes, Interfaces
from granian.server.embed import Server as GranianServer

from seglog.config import ConfigError, Settings
from seglog.engine.engine import Engine, EngineOptions
from seglog.engine.maintenance import Maintenance
from seglog.engine.router_worker import RouterWorker
from seglog.http.app import ServerState, build_app
from seglog.http.auth import KeyRing, check_startup_guard
from seglog.storage.datadir import DataDirInUse, DirLocks
from seglog.storage.fs import RealFs

log = logging.getLogger("seglog.server")

BACKLOG = 1024


def engine_options(s: Settings) -> EngineOptions:
    return EngineOptions(
        data_dir=s.data_dir,
        cold_dir=s.cold_dir,
        wal_shards=s.wal_shards,
        segment_max_events=s.segment_max_events,
        segment_max_bytes=s.segment_max_bytes,
        segment_max_age_ms=s.segment_max_age_ms,
        hot_retain_segments=s.hot_retain_segments,
        hot_retain_bytes=s.hot_retain_bytes,
        max_topics=s.max_topics,
        max_routers=s.max_routers,
        max_total_bytes=s.max_total_bytes,
    )


def format_address(host: str, port: int) -> str:
    """`host:port`, with an IPv6 literal in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def listen(host: str, port: int, backlog: int = BACKLOG) -> socket.socket:
    """A TCP socket bound to `host:port` and listening. `SO_REUSEADDR` (a restart may bind
    over connections in TIME_WAIT) but never `SO_REUSEPORT`, so a port another process
    listens on raises `OSError` (`EADDRINUSE`) instead of being shared."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # Accepted connections inherit it. granian sets it on listeners it builds itself,
        # not on ours; without it Nagle holds small SSE frames and acks back for the
        # peer's delayed ACK (tens of ms at 100 watchers, BENCHMARKS.md).
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((host, port))
        sock.listen(backlog)
    except BaseException:
        sock.close()
        raise
    return sock


class _PreboundGranian(GranianServer):
    """granian's embedded server serving a socket bound by `listen`, instead of building
    its own listener from `address`/`port` (which sets `SO_REUSEPORT` on Linux). granian
    takes ownership of `fd` and closes it when it stops."""

    def __init__(self, fd: int, *args: Any, **kwargs: Any) -> None:
        self._prebound_fd = fd
        super().__init__(*args, **kwargs)

    def _init_shared_socket(self) -> None:
        # granian's stub declares neither the holder's `(fd, uds, backlog)` constructor
        # nor these attributes' types; the worker serves `_shd` when `_ssp` is None.
        self._ssp = None
        self._shd = SocketHolder(self._prebound_fd, False, self.backlog)  # type: ignore[call-arg,assignment]
        self._sfd = self._prebound_fd  # type: ignore[assignment]


def _write_port_file(path: Path, host: str, port: int) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(f"{host}:{port}\n")
    os.replace(tmp, path)


# Python collects its young generation every 700 container allocations by default. A
# batched append allocates tens of thousands of short-lived objects per request (decoded
# records, frames, index entries), so those collections, and the older-generation passes
# they trigger over the engine's millions of long-lived objects, cost a 5,000-record append
# about a third of its time (BENCHMARKS.md, "GC thresholds"). Raised, they stay bounded.
GC_THRESHOLDS = (50_000, 10, 10)


def tune_gc() -> None:
    gc.set_threshold(*GC_THRESHOLDS)


async def serve(settings: Settings, keyring: KeyRing, locks: DirLocks, sock: socket.socket) -> int:
    """Serve on `sock` (listening) with the directories locked by `locks` until
    SIGTERM/SIGINT. Returns the exit code."""
    engine = Engine(engine_options(settings))
    state = ServerState(engine=engine, settings=settings, keyring=keyring)
    app = build_app(state)
    host = settings.host
    port = int(sock.getsockname()[1])
    server = _PreboundGranian(
        os.dup(sock.fileno()),
        app,
        address=host,
        port=port,
        interface=Interfaces.ASGINL,
        http=HTTPModes.auto,
        websockets=True,
        log_enabled=settings.log_level.lower() == "debug",
        backlog=BACKLOG,
    )
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    server_task = asyncio.create_task(server.serve())
    if settings.port_file is not None:
        _write_port_file(settings.port_file, host, port)
    log.info(
        "listening on http://%s (HTTP/1.1 + h2c), data dir %s",
        format_address(host, port),
        settings.data_dir,
    )

    recovery_error: list[BaseException] = []

    tune_gc()

    def recover() -> None:
        try:
            engine.open(locks=locks)
            gc.freeze()  # what recovery built lives as long as the server: never walk it
        except BaseException as e:  # reported below; the server must not serve half-open
            recovery_error.append(e)
        finally:
            loop.call_soon_threadsafe(state.recovery_done.set)

    threading.Thread(target=recover, name="seglog-recovery", daemon=True).start()
    await state.recovery_done.wait()
    if recovery_error:
        log.error("recovery failed: %s", recovery_error[0])
        server.signal_handler_interrupt()  # type: ignore[no-untyped-call]
        await server_task
        return 1
    state.start(loop)
    maintenance = Maintenance(engine)
    maintenance.start()
    router_worker = RouterWorker(engine)
    router_worker.start()
    log.info("ready: %d topics recovered", len(engine.topics))
    stopped = asyncio.create_task(stop.wait())
    await asyncio.wait({stopped, server_task}, return_when=asyncio.FIRST_COMPLETED)
    failed = not stop.is_set()
    if failed:
        log.error("the HTTP server stopped unexpectedly")
    stopped.cancel()
    log.info("shutting down")
    await state.begin_shutdown()
    server.signal_handler_interrupt()  # type: ignore[no-untyped-call]
    with contextlib.suppress(Exception):
        await asyncio.wait_for(server_task, 10)
    maintenance.stop()
    router_worker.stop()
    await asyncio.to_thread(engine.close)  # final router drain, then the final snapshot
    log.info("stopped cleanly")
    return 1 if failed else 0


def _refuse(message: str, code: int) -> int:
    print(f"seglog: refusing to start: {message}", file=sys.stderr)
    return code


def _listen_error(host: str, port: int, e: OSError) -> str:
    reason = "address already in use" if e.errno == errno.EADDRINUSE else (e.strerror or str(e))
    return f"cannot listen on {format_address(host, port)}: {reason}"


def main(settings: Settings) -> int:
    """Run the server with `settings` (the body of `seglog serve`). Returns the exit code."""
    logging.basicConfig(
        level=getattr(logging, settings.log_level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    try:
        keyring = KeyRing.parse(settings.api_keys_raw)
        check_startup_guard(settings, keyring)
    except ConfigError as e:
        return _refuse(str(e), 2)
    try:
        locks = DirLocks.acquire(RealFs(), settings.data_dir, settings.cold_dir)
    except DataDirInUse as e:
        return _refuse(str(e), 1)
    except OSError as e:
        return _refuse(f"cannot take the directory locks: {e}", 1)
    try:
        try:
            sock = listen(settings.host, settings.port)
        except OSError as e:
            return _refuse(_listen_error(settings.host, settings.port, e), 1)
        with sock:
            return _run(serve(settings, keyring, locks, sock))
    finally:
        locks.release()  # only what the engine did not adopt (it releases its own)


def _run(coro: Coroutine[Any, Any, int]) -> int:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a declared dependency
        return asyncio.run(coro)
    return uvloop.run(coro)


def argument_parser() -> argparse.ArgumentParser:
    """The flags of `python -m seglog.server`: those of `seglog serve` (a test keeps the
    two equal). Parsed here with argparse because `seglog.cli` imports this module, and
    this module must not import the CLI back."""
    p = argparse.ArgumentParser(
        prog="python -m seglog.server",
        description="Run the seglog server (same flags as `seglog serve`).",
    )
    p.add_argument("--host", help="Bind host (SEGLOG_HOST); host:port accepted.")
    p.add_argument("--port", type=int, help="Bind port (SEGLOG_PORT); 0 = any free port.")
    p.add_argument("--port-file", type=Path, help="Write the bound host:port here.")
    p.add_argument("--data-dir", type=Path, help="Data directory (SEGLOG_DATA_DIR).")
    p.add_argument("--cold-dir", type=Path, help="Cold tier root (SEGLOG_COLD_DIR).")
    p.add_argument("--wal-shards", type=int, help="WAL shards (SEGLOG_WAL_SHARDS).")
    p.add_argument("--log-level", help="Log level (SEGLOG_LOG).")
    return p


def settings_from_argv(argv: Sequence[str]) -> Settings:
    """`SEGLOG_*` settings with the flags in `argv` applied (`--wal-shards 0` = default)."""
    flags = vars(argument_parser().parse_args(argv))
    flags["wal_shards"] = flags["wal_shards"] or None
    return Settings.from_env().with_overrides(**flags)


if __name__ == "__main__":
    sys.exit(main(settings_from_argv(sys.argv[1:])))
