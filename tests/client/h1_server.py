"""A scripted HTTP/1.1 server on a real socket for the lean client paths' tests
(`test_h1_pool`, `test_h1_aio_pool`): it records what arrives and answers from a script."""

from __future__ import annotations

import socket
import socketserver
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import orjson
import pytest

from seglog.client._h1_wire import MAX_HEAD

HEALTH = orjson.dumps({"status": "ok", "version": "0.1.0", "uptime_ms": 1})

# Answers both lean paths must refuse as a `RemoteProtocolError` (their ids below).
MALFORMED_ANSWERS = [
    b"SPDY/9 nonsense\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: x1\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * (MAX_HEAD + 10),
    b"HTTP/1.1 2000 OK\r\nContent-Length: 2\r\n\r\nok",
    b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 5\r\n\r\nhello",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0x5\r\nhello\r\n0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-2\r\nab\r\n0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabXY0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip\r\n\r\n0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: xchunkedx\r\n\r\n0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\nContent-Length: 2\r\n\r\nok",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n\r\n",
    b"HTTP/1.1 099 Odd\r\nContent-Length: 2\r\n\r\nok",
    b"HTTP/1.1 000 Odd\r\nContent-Length: 2\r\n\r\nok",
    b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n6\r\nhello\r\n3\r\nabc\r\n0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 2\r\n\r\nok",
    b"HTTP/1.1 200 OK\r\nContent Length: 2\r\n\r\nok",
]
MALFORMED_IDS = [
    "status-line", "content-length", "header-line", "chunk-size", "head-too-large",
    "four-digit-status", "conflicting-lengths", "chunk-size-0x", "negative-chunk-size",
    "chunk-without-crlf", "chunked-not-last", "coding-not-chunked", "coding-and-length",
    "two-codings", "status-099", "status-000", "switching-protocols", "chunk-size-off-by-one",
    "bad-gzip-body", "space-in-name",
]  # fmt: skip


@dataclass
class Seen:
    """What the scripted server received: one entry per request, and connections opened."""

    requests: list[tuple[str, dict[str, str], bytes]] = field(default_factory=list)
    connections: int = 0


# A script answers one request: the raw bytes to send back, or None to close the socket
# without answering; a list of parts is written one `write` each, a callable part is
# called between them. It sees the request number (0-based, across connections).
Script = Callable[[int, str], "bytes | list[bytes | Callable[[], object]] | None"]


def response(body: bytes, status: str = "200 OK", extra: str = "") -> bytes:
    head = f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n{extra}"
    return (head + f"Content-Length: {len(body)}\r\n\r\n").encode() + body


Start = Callable[[Script], tuple[str, Seen]]


class _Server(socketserver.ThreadingTCPServer):
    request_queue_size = 128  # the default 5 makes a burst of connects wait out SYN retries


@pytest.fixture
def scripted() -> Iterator[Start]:
    servers: list[socketserver.ThreadingTCPServer] = []

    def start(script: Script) -> tuple[str, Seen]:
        seen = Seen()
        lock = threading.Lock()

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                with lock:
                    seen.connections += 1
                while True:
                    line = self.rfile.readline()
                    if not line:
                        return
                    headers: dict[str, str] = {}
                    while (h := self.rfile.readline()) not in (b"\r\n", b""):
                        k, _, v = h.decode().partition(":")
                        headers[k.strip().lower()] = v.strip()
                    body = self.rfile.read(int(headers.get("content-length", "0")))
                    with lock:
                        n = len(seen.requests)
                        seen.requests.append((line.decode().strip(), headers, body))
                    out = script(n, line.decode())
                    if out is None:
                        return
                    for part in out if isinstance(out, list) else [out]:
                        if callable(part):
                            part()
                            continue
                        self.wfile.write(part)
                        self.wfile.flush()

        srv = _Server(("127.0.0.1", 0), Handler)
        srv.daemon_threads = True
        servers.append(srv)
        threading.Thread(target=srv.serve_forever, args=(0.05,), daemon=True).start()
        return f"http://127.0.0.1:{srv.server_address[1]}", seen

    yield start
    for srv in servers:
        srv.shutdown()
        srv.server_close()


DIFF = orjson.dumps(
    {"topic": "t", "records": [], "next_from_seq": 0, "head_seq": 0, "earliest_seq": 0,
     "caught_up": True, "tombstone": None, "lag": 0}
)  # fmt: skip


def raw_server(serve: Callable[[socket.socket], None]) -> tuple[str, threading.Thread]:
    """A listening socket whose accepted connections `serve` handles, one at a time."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()

    def loop() -> None:
        with srv:
            serve(srv)

    t = threading.Thread(target=loop, daemon=True)
    t.start()
    return f"http://127.0.0.1:{srv.getsockname()[1]}", t
