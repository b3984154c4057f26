"""The composition root: settings → keys → engine (recovery) → ASGI app → granian.

Only this module names the HTTP server. granian runs embedded in our own uvloop, one
process, `--http auto` (HTTP/1.1 and h2c prior knowledge on one port, API §0.1). The
listener opens while recovery replays in a worker thread, so `/v0/ready` can answer
`503 not_ready` with `replay_progress` until the engine is ready (API §10).

Shutdown on SIGTERM/SIGINT: stop accepting, signal open streams, drain in-flight requests
(bounded), stop maintenance, final snapshot, release the data-dir lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
import threading
from pathlib import Path

from seglog.config import ConfigError, Settings
from seglog.engine.engine import Engine, EngineOptions
from seglog.engine.maintenance import Maintenance
from seglog.http.app import ServerState, build_app
from seglog.http.auth import KeyRing, check_startup_guard

log = logging.getLogger("seglog.server")


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
        max_total_bytes=s.max_total_bytes,
    )


def _free_port(host: str) -> int:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _write_port_file(path: Path, host: str, port: int) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(f"{host}:{port}\n")
    os.replace(tmp, path)


async def _wait_listening(host: str, port: int, timeout_s: float = 20.0) -> bool:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while loop.time() < deadline:
        try:
            _r, w = await asyncio.open_connection(host, port)
            w.close()
            with contextlib.suppress(Exception):
                await w.wait_closed()
            return True
        except OSError:
            await asyncio.sleep(0.02)
    return False


async def serve(settings: Settings, keyring: KeyRing) -> int:
    from granian.constants import HTTPModes, Interfaces
    from granian.server.embed import Server

    engine = Engine(engine_options(settings))
    state = ServerState(engine=engine, settings=settings, keyring=keyring)
    app = build_app(state)
    host = settings.host
    port = settings.port or _free_port(host)
    server = Server(
        app,
        address=host,
        port=port,
        interface=Interfaces.ASGINL,
        http=HTTPModes.auto,
        websockets=True,
        log_enabled=settings.log_level.lower() == "debug",
        backlog=1024,
    )
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    server_task = asyncio.create_task(server.serve())
    if not await _wait_listening(host, port):
        log.error("server did not start listening on %s:%s", host, port)
        server.signal_handler_interrupt()  # type: ignore[no-untyped-call]
        await server_task
        return 1
    if settings.port_file is not None:
        _write_port_file(settings.port_file, host, port)
    log.info(
        "listening on http://%s:%s (HTTP/1.1 + h2c), data dir %s", host, port, settings.data_dir
    )

    recovery_error: list[BaseException] = []

    def recover() -> None:
        try:
            engine.open(on_progress=None)
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
    log.info("ready: %d topics recovered", len(engine.topics))
    stopped = asyncio.create_task(stop.wait())
    await asyncio.wait({stopped, server_task}, return_when=asyncio.FIRST_COMPLETED)
    log.info("shutting down")
    await state.begin_shutdown()
    server.signal_handler_interrupt()  # type: ignore[no-untyped-call]
    with contextlib.suppress(Exception):
        await asyncio.wait_for(server_task, 10)
    maintenance.stop()
    await asyncio.to_thread(engine.close)
    log.info("stopped cleanly")
    return 0


def main(settings: Settings) -> int:
    logging.basicConfig(
        level=getattr(logging, settings.log_level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    try:
        keyring = KeyRing.parse(settings.api_keys_raw)
        check_startup_guard(settings, keyring)
    except ConfigError as e:
        print(f"seglog: refusing to start: {e}", file=sys.stderr)
        return 2
    try:
        import uvloop

        return uvloop.run(serve(settings, keyring))
    except ImportError:  # pragma: no cover - uvloop is a declared dependency
        return asyncio.run(serve(settings, keyring))


if __name__ == "__main__":  # `python -m seglog.server [flags]` mirrors `seglog serve`
    from seglog.cli.main import app as cli_app

    cli_app(["serve", *sys.argv[1:]])
