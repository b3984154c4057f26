"""Load-generator processes for `bench_live.py` (run as `python live_clients.py ROLE ...`).

Roles:

- `watch`  — N live readers of one topic in one asyncio (uvloop) process, either SSE
  (`POST /v0/watch` then `GET /v0/watch/:wid` on the same keep-alive connection) or
  WebSocket (`GET /v0/ws` + `subscribe`). Raw sockets (`asyncio.Protocol`), no HTTP or
  WebSocket library: a read is handled in a few C-level calls. Per read the reader takes
  one receive timestamp, finds every `"bt":<ns>` (the writer's send time, in `data`) with
  one regex and stores `receive − send`; readers not sampled for latency only count
  records (`bytes.count`). Talks to the parent over stdin/stdout, one JSON line each:
  prints `{"ready":…}` once every reader is attached, then obeys `snap` (print counters),
  `finish <json>` (wait until every reader has seen `last_seq`, save the latencies of
  records sent inside the window to an .npy file, print a summary, exit) and `quit`.
- `write`  — one writer: single-record HTTP/1.1 appends over keep-alive connections, paced
  at `rate` records/s by absolute deadlines, open loop: the connection used last while its
  ack is back (always, at low load), else another idle one of a pool of `conns` (8); nothing
  is skipped. Each record is `{"data":{"bt":<time.time_ns() just before the
  send>}}`. Prints one JSON line at the end.
- `fake`   — the generator-ceiling server: answers the same handshakes as seglog and then
  pushes pre-built SSE frames (HTTP/1.1 chunked, one chunk per delivery, exactly as
  granian frames seglog's stream) or WebSocket messages as fast as the client drains
  them; answers `POST /v0/topics/...` with a fixed 200 body (the writer's ceiling).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import resource
import select
import socket
import struct
import sys
import time
from array import array

try:
    import uvloop
except ImportError:  # pragma: no cover
    uvloop = None

BT_RE = re.compile(rb'"bt":(\d+)')
SEQ_MARK = b'"$seq"'
TO_SEQ = b'"to_seq":'
SSE_RECORD = b"event: record"
WS_RECORD = b'{"op":"record"'


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _last_to_seq(buf: bytes, end: int) -> int:
    i = buf.rfind(TO_SEQ, 0, end)
    if i < 0:
        return -1
    j = i + len(TO_SEQ)
    k = j
    n = len(buf)
    while k < n and 48 <= buf[k] <= 57:
        k += 1
    return int(buf[j:k])


# --------------------------------------------------------------------------------------
# readers


class Reader(asyncio.Protocol):
    """Shared state of one live reader. Subclasses turn raw reads into `_consume(part)`
    calls over whole messages/frames."""

    def __init__(self, sample: bool, lat: array, bts: array) -> None:
        self.sample = sample
        self.lat, self.bts = lat, bts
        self.records = 0
        self.frames = 0
        self.bytes = 0
        self.last_seq = 0
        self.ready = asyncio.get_running_loop().create_future()
        self.closed = asyncio.get_running_loop().create_future()
        self.transport: asyncio.Transport | None = None
        self.waiter: asyncio.Future[None] | None = None
        self.target = -1

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.start()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.ready.done():
            self.ready.set_exception(ConnectionError(f"closed before ready: {exc}"))
        if not self.closed.done():
            self.closed.set_result(None)
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    def start(self) -> None:
        raise NotImplementedError

    def _consume(self, part: bytes, now: int, frames: int) -> None:
        """Account for `part`, which holds only complete messages."""
        self.bytes += len(part)
        self.frames += frames
        if self.sample:
            found = BT_RE.findall(part)
            if found:
                self.records += len(found)
                self.lat.extend([now - int(x) for x in found])
                self.bts.extend([int(x) for x in found])
        else:
            self.records += part.count(SEQ_MARK)
        seq = _last_to_seq(part, len(part))
        if seq > self.last_seq:
            self.last_seq = seq
            if self.waiter is not None and seq >= self.target and not self.waiter.done():
                self.waiter.set_result(None)


class SseReader(Reader):
    def __init__(self, host: str, topic: str, sample: bool, lat: array, bts: array) -> None:
        super().__init__(sample, lat, bts)
        self.host, self.topic = host, topic
        self.buf = b""
        self.phase = 0  # 0: waiting for the create response, 1: stream headers, 2: stream

    def start(self) -> None:
        body = json.dumps({"topics": {self.topic: {"from_seq": 0}}}).encode()
        assert self.transport is not None
        self.transport.write(
            b"POST /v0/watch HTTP/1.1\r\nHost: %b\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%b" % (self.host.encode(), len(body), body)
        )

    def data_received(self, data: bytes) -> None:
        now = time.time_ns()
        if self.phase == 2:
            buf = self.buf + data if self.buf else data
            end = buf.rfind(b"\n\n")
            if end < 0:
                self.buf = buf
                return
            end += 2
            part = buf[:end]
            self.buf = buf[end:]
            self._consume(part, now, part.count(SSE_RECORD))
            if not self.ready.done() and b"event: caught-up" in part:
                self.ready.set_result(None)
            return
        self.buf += data
        head_end = self.buf.find(b"\r\n\r\n")
        if head_end < 0:
            return
        head = self.buf[:head_end]
        if self.phase == 0:
            m = re.search(rb"(?i)content-length:\s*(\d+)", head)
            if not head.startswith(b"HTTP/1.1 200") or m is None:
                raise RuntimeError(f"watch create failed: {self.buf[:300]!r}")
            total = head_end + 4 + int(m.group(1))
            if len(self.buf) < total:
                return
            wid = json.loads(self.buf[head_end + 4 : total])["wid"]
            self.buf = self.buf[total:]
            self.phase = 1
            assert self.transport is not None
            self.transport.write(
                b"GET /v0/watch/%b HTTP/1.1\r\nHost: %b\r\nAccept: text/event-stream\r\n\r\n"
                % (wid.encode(), self.host.encode())
            )
            if self.buf:
                self.data_received(b"")
            return
        if not head.startswith(b"HTTP/1.1 200"):
            raise RuntimeError(f"watch stream failed: {head[:300]!r}")
        self.phase = 2
        rest = self.buf[head_end + 4 :]
        self.buf = b""
        if rest:
            self.data_received(rest)


class WsReader(Reader):
    def __init__(self, host: str, topic: str, sample: bool, lat: array, bts: array) -> None:
        super().__init__(sample, lat, bts)
        self.host, self.topic = host, topic
        self.buf = b""
        self.upgraded = False

    def start(self) -> None:
        key = base64.b64encode(os.urandom(16))
        assert self.transport is not None
        self.transport.write(
            b"GET /v0/ws HTTP/1.1\r\nHost: %b\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Key: %b\r\nSec-WebSocket-Version: 13\r\n\r\n"
            % (self.host.encode(), key)
        )

    def send_text(self, payload: bytes) -> None:
        mask = os.urandom(4)
        n = len(payload)
        if n < 126:
            head = struct.pack("!BB", 0x81, 0x80 | n)
        else:
            head = struct.pack("!BBH", 0x81, 0x80 | 126, n)
        masked = bytes(b ^ mask[i & 3] for i, b in enumerate(payload))
        assert self.transport is not None
        self.transport.write(head + mask + masked)

    def data_received(self, data: bytes) -> None:
        now = time.time_ns()
        buf = self.buf + data if self.buf else data
        if not self.upgraded:
            head_end = buf.find(b"\r\n\r\n")
            if head_end < 0:
                self.buf = buf
                return
            if not buf.startswith(b"HTTP/1.1 101"):
                raise RuntimeError(f"ws upgrade failed: {buf[:300]!r}")
            self.upgraded = True
            buf = buf[head_end + 4 :]
            sub = {"op": "subscribe", "topic": self.topic, "from_seq": 0, "request_id": 1}
            self.send_text(json.dumps(sub).encode())
        # Walk whole frames; payloads of the complete ones are consumed in one slice.
        pos, n, msgs, records_msgs = 0, len(buf), 0, 0
        payloads: list[bytes] = []
        while n - pos >= 2:
            b0, b1 = buf[pos], buf[pos + 1]
            ln = b1 & 0x7F
            hl = 2
            if ln == 126:
                if n - pos < 4:
                    break
                ln = (buf[pos + 2] << 8) | buf[pos + 3]
                hl = 4
            elif ln == 127:
                if n - pos < 10:
                    break
                ln = struct.unpack_from("!Q", buf, pos + 2)[0]
                hl = 10
            if n - pos < hl + ln:
                break
            op = b0 & 0x0F
            payload = buf[pos + hl : pos + hl + ln]
            pos += hl + ln
            if op == 0x9:  # ping -> pong
                assert self.transport is not None
                mask = os.urandom(4)
                masked = bytes(b ^ mask[i & 3] for i, b in enumerate(payload))
                self.transport.write(struct.pack("!BB", 0x8A, 0x80 | len(payload)) + mask + masked)
                continue
            if op == 0x8:
                assert self.transport is not None
                self.transport.close()
                break
            msgs += 1
            if payload.startswith(WS_RECORD):
                records_msgs += 1
            elif not self.ready.done() and payload.startswith(b'{"op":"caught_up"'):
                self.ready.set_result(None)
            elif payload.startswith(b'{"op":"error"'):
                raise RuntimeError(f"ws error: {payload[:300]!r}")
            payloads.append(payload)
        self.buf = buf[pos:]
        if payloads:
            self._consume(b"\n".join(payloads), now, records_msgs)


async def attach(
    kind: str, host: str, port: int, topic: str, n: int, sample_every: int, conc: int
) -> tuple[list[Reader], array, array]:
    loop = asyncio.get_running_loop()
    lat, bts = array("q"), array("q")
    cls = SseReader if kind == "sse" else WsReader
    readers: list[Reader] = []
    sem = asyncio.Semaphore(conc)

    async def one(i: int) -> None:
        async with sem:
            for attempt in range(5):
                r = cls(host, topic, sample_every > 0 and i % sample_every == 0, lat, bts)
                try:
                    await loop.create_connection(lambda r=r: r, "127.0.0.1", port)
                    await asyncio.wait_for(r.ready, 30)
                    readers.append(r)
                    return
                except (OSError, TimeoutError, ConnectionError):
                    if r.transport is not None:
                        r.transport.close()
                    await asyncio.sleep(0.2 * (attempt + 1))
            raise RuntimeError("could not attach a reader")

    await asyncio.gather(*(one(i) for i in range(n)))
    return readers, lat, bts


def counters(readers: list[Reader]) -> dict[str, object]:
    recs = [r.records for r in readers]
    return {
        "records": sum(recs),
        "frames": sum(r.frames for r in readers),
        "bytes": sum(r.bytes for r in readers),
        "min_records": min(recs) if recs else 0,
        "max_records": max(recs) if recs else 0,
        "min_last_seq": min((r.last_seq for r in readers), default=0),
        "cpu_s": cpu_s(),
        "t": time.time(),
    }


async def watch_main(a: dict[str, str]) -> None:
    host = f"127.0.0.1:{a['port']}"
    n, sample_every = int(a["n"]), int(a.get("sample_every", "1"))
    readers, lat, bts = await attach(
        a["kind"], host, int(a["port"]), a["topic"], n, sample_every, int(a.get("conc", "32"))
    )
    emit({"ready": len(readers), "cpu_s": cpu_s()})
    loop = asyncio.get_running_loop()
    stdin = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdin), sys.stdin)
    while True:
        line = (await stdin.readline()).decode().strip()
        if not line or line == "quit":
            break
        if line == "snap":
            emit(counters(readers))
            continue
        if line.startswith("finish "):
            req = json.loads(line[7:])
            target = int(req["last_seq"])
            t_end = time.monotonic() + float(req["timeout"])
            for r in readers:
                if r.last_seq < target and not r.closed.done():
                    r.target = target
                    r.waiter = loop.create_future()
                    left = t_end - time.monotonic()
                    if left > 0:
                        try:
                            await asyncio.wait_for(asyncio.shield(r.waiter), left)
                        except TimeoutError:
                            pass
            out = counters(readers)
            out["complete"] = sum(1 for r in readers if r.last_seq >= target)
            out["sampled_readers"] = sum(1 for r in readers if r.sample)
            if req.get("npy"):
                import numpy as np

                la = np.frombuffer(lat, dtype=np.int64)
                ba = np.frombuffer(bts, dtype=np.int64)
                keep = (ba >= int(req["t0"])) & (ba < int(req["t1"]))
                np.save(req["npy"], la[keep])
                out["samples"] = int(keep.sum())
            emit(out)
            break
    for r in readers:
        if r.transport is not None:
            r.transport.close()
    await asyncio.sleep(0.05)


def emit(obj: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


# --------------------------------------------------------------------------------------
# writer


def _recv_response(sock: socket.socket, buf: bytearray) -> bytes:
    while True:
        i = buf.find(b"\r\n\r\n")
        if i >= 0:
            m = re.search(rb"(?i)content-length:\s*(\d+)", buf[:i])
            total = i + 4 + (int(m.group(1)) if m else 0)
            if len(buf) >= total:
                resp = bytes(buf[:total])
                del buf[:total]
                return resp
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("server closed the writer connection")
        buf += chunk


def _complete(buf: bytearray) -> int:
    """Length of the first complete HTTP response in `buf`, or 0."""
    i = buf.find(b"\r\n\r\n")
    if i < 0:
        return 0
    m = re.search(rb"(?i)content-length:\s*(\d+)", buf[:i])
    total = i + 4 + (int(m.group(1)) if m else 0)
    return total if len(buf) >= total else 0


def write_main(a: dict[str, str]) -> None:
    """Open-loop pacing: record k is due at start + k/rate. It goes out on the connection
    that was used last if that one is idle (always, while acks take < 1/rate), else on
    another idle one of a small pool (`conns`); only when all are busy does it wait."""
    port, topic = int(a["port"]), a["topic"]
    rate, warmup, duration = float(a["rate"]), float(a["warmup"]), float(a["duration"])
    pool = int(a.get("conns", "8"))
    socks = []
    for _ in range(pool):
        s = socket.create_connection(("127.0.0.1", port))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        socks.append(s)
    bufs = {s: bytearray() for s in socks}
    idle = list(reversed(socks))  # a stack: the last connection used is reused first
    inflight: dict[socket.socket, tuple[float, bool]] = {}
    head = (
        b"POST /v0/topics/%b?return_seqs=false HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: application/json\r\nContent-Length: %%d\r\n\r\n" % topic.encode()
    )
    step = 1.0 / rate
    acks: list[int] = []
    sent = 0
    last_seq = 0
    t_start = time.perf_counter()
    t_meas = t_start + warmup
    t_stop = t_meas + duration
    w0 = w1 = 0  # wall ns of the first / after the last send in the window
    n_window = 0
    due = t_start
    late_max = 0.0
    max_inflight = 0
    conns_used: set[int] = set()
    cpu0 = cpu_s()
    while True:
        now = time.perf_counter()
        sending = now < t_stop
        if not sending and not inflight:
            break
        if sending and now >= due and idle:
            late_max = max(late_max, now - due)
            s = idle.pop()
            bt = time.time_ns()
            body = b'{"records":[{"data":{"bt":%d}}]}' % bt
            p0 = time.perf_counter()
            s.sendall(head % len(body) + body)
            in_window = p0 >= t_meas
            inflight[s] = (p0, in_window)
            max_inflight = max(max_inflight, len(inflight))
            conns_used.add(s.fileno())
            sent += 1
            if in_window:
                if n_window == 0:
                    w0 = bt
                n_window += 1
                w1 = bt + 1
            due += step
            continue
        if not inflight:
            time.sleep(max(0.0, due - now))
            continue
        timeout = max(0.0, due - now) if (sending and idle) else 0.05
        ready, _, _ = select.select(list(inflight), [], [], timeout)
        for s in ready:
            chunk = s.recv(65536)
            if not chunk:
                raise ConnectionError("server closed a writer connection")
            buf = bufs[s]
            buf += chunk
            total = _complete(buf)
            if not total:
                continue
            resp = bytes(buf[:total])
            del buf[:total]
            p0, in_window = inflight.pop(s)
            idle.append(s)
            if not resp.startswith(b"HTTP/1.1 20"):
                raise RuntimeError(f"write failed: {resp[:400]!r}")
            m = re.search(rb'"last_seq":(\d+)', resp)
            if m:
                last_seq = max(last_seq, int(m.group(1)))
            if in_window:
                acks.append(int((time.perf_counter() - p0) * 1e6))
    elapsed_window = (w1 - w0) / 1e9 if n_window else 0.0
    acks.sort()
    emit(
        {
            "sent": sent,
            "window_records": n_window,
            "window_rate": n_window / elapsed_window if elapsed_window else 0.0,
            "t0": w0,
            "t1": w1,
            "last_seq": last_seq,
            "ack_p50_ms": acks[len(acks) // 2] / 1000 if acks else None,
            "ack_p99_ms": acks[int(len(acks) * 0.99)] / 1000 if acks else None,
            "max_late_ms": late_max * 1000,
            "max_in_flight": max_inflight,
            "connections_used": len(conns_used),
            "cpu_s": cpu_s() - cpu0,
        }
    )
    for s in socks:
        s.close()


def writer_ceiling(port: int, seconds: float) -> dict[str, float]:
    """Unpaced: the same writer loop against the fake server (requests/s)."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    head = (
        b"POST /v0/topics/x?return_seqs=false HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n"
    )
    buf = bytearray()
    n = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        body = b'{"records":[{"data":{"bt":%d}}]}' % time.time_ns()
        sock.sendall(head % len(body) + body)
        resp = _recv_response(sock, buf)
        re.search(rb'"last_seq":(\d+)', resp)
        n += 1
    sock.close()
    return {"req_per_s": n / (time.perf_counter() - t0)}


# --------------------------------------------------------------------------------------
# fake server (generator ceiling)


def sse_chunk(records: int, seq: int) -> bytes:
    recs = b",".join(
        b'{"$seq":%d,"$ts":1795472856343,"data":{"bt":%d}}' % (seq + i, 1795472856343000000 + i)
        for i in range(1, records + 1)
    )
    data = b'{"topic":"t","from_seq":%d,"head_seq":%d,"records":[%b],"to_seq":%d}' % (
        seq,
        seq + records,
        recs,
        seq + records,
    )
    frames = (
        b"id: eyJ0IjoxfQ\nevent: record\ndata: %b\n\n"
        b'id: eyJ0IjoxfQ\nevent: caught-up\ndata: {"topic":"t","head_seq":%d}\n\n'
        % (data, seq + records)
    )
    return b"%X\r\n%b\r\n" % (len(frames), frames)


def ws_msg(payload: bytes) -> bytes:
    n = len(payload)
    if n < 126:
        return struct.pack("!BB", 0x81, n) + payload
    if n < 65536:
        return struct.pack("!BBH", 0x81, 126, n) + payload
    return struct.pack("!BBQ", 0x81, 127, n) + payload


def ws_chunk(records: int, seq: int) -> bytes:
    recs = b",".join(
        b'{"$seq":%d,"$ts":1795472856343,"data":{"bt":%d}}' % (seq + i, 1795472856343000000 + i)
        for i in range(1, records + 1)
    )
    rec = b'{"op":"record","topic":"t","from_seq":%d,"to_seq":%d,"head_seq":%d,"records":[%b]}' % (
        seq,
        seq + records,
        seq + records,
        recs,
    )
    cu = b'{"op":"caught_up","topic":"t","head_seq":%d}' % (seq + records)
    return ws_msg(rec) + ws_msg(cu)


class FakeServer(asyncio.Protocol):
    per_frame = 1
    start_at = 0.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.t: asyncio.Transport = transport  # type: ignore[assignment]
        self.t.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        self.streaming = False
        self.paused = False
        self.block = b""
        self.stopped = False

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        self._pump()

    def connection_lost(self, exc: Exception | None) -> None:
        self.stopped = True

    def _start(self) -> None:
        """Push only from `start_at` on, so that every client connection is attached
        before any of them is flooded."""
        loop = asyncio.get_running_loop()
        loop.call_at(max(loop.time(), FakeServer.start_at), self._pump)

    def _pump(self) -> None:
        for _ in range(16):
            if self.paused or self.stopped:
                return
            self.t.write(self.block)
        asyncio.get_running_loop().call_soon(self._pump)

    def data_received(self, data: bytes) -> None:
        if self.streaming:
            return  # ws subscribe etc.
        self.buf += data
        while True:
            i = self.buf.find(b"\r\n\r\n")
            if i < 0:
                return
            head = self.buf[:i]
            m = re.search(rb"(?i)content-length:\s*(\d+)", head)
            total = i + 4 + (int(m.group(1)) if m else 0)
            if len(self.buf) < total:
                return
            self.buf = self.buf[total:]
            line = head.split(b"\r\n", 1)[0]
            if line.startswith(b"POST /v0/watch"):
                body = b'{"wid":"wid_fake","stream_url":"/v0/watch/wid_fake"}'
                self.t.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%b" % (len(body), body))
            elif line.startswith(b"POST "):
                body = b'{"topic":"x","first_seq":1,"last_seq":1,"head_seq":1,"count":1}'
                self.t.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%b" % (len(body), body))
            elif line.startswith(b"GET /v0/watch/"):
                self.t.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                    b"transfer-encoding: chunked\r\n\r\n"
                    b"D\r\nretry: 2000\n\n\r\n"
                )
                cu = b'event: caught-up\ndata: {"topic":"t","head_seq":0}\n\n'
                self.t.write(b"%X\r\n%b\r\n" % (len(cu), cu))
                self.block = b"".join(sse_chunk(self.per_frame, k * 1000) for k in range(1, 64))
                self.streaming = True
                self._start()
                return
            elif line.startswith(b"GET /v0/ws"):
                self.t.write(
                    b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                    b"Connection: Upgrade\r\nSec-WebSocket-Accept: x\r\n\r\n"
                    + ws_msg(b'{"op":"caught_up","topic":"t","head_seq":0}')
                )
                self.block = b"".join(ws_chunk(self.per_frame, k * 1000) for k in range(1, 64))
                self.streaming = True
                self._start()
                return


async def fake_main(a: dict[str, str]) -> None:
    FakeServer.per_frame = int(a.get("per_frame", "1"))
    loop = asyncio.get_running_loop()
    FakeServer.start_at = loop.time() + float(a.get("delay", "0"))
    srv = await loop.create_server(FakeServer, "127.0.0.1", int(a["port"]), backlog=4096)
    emit({"listening": int(a["port"])})
    async with srv:
        await srv.serve_forever()


def main() -> None:
    role = sys.argv[1]
    a = dict(arg.split("=", 1) for arg in sys.argv[2:])
    if role == "write":
        write_main(a)
    elif role == "write_ceiling":
        emit(writer_ceiling(int(a["port"]), float(a["seconds"])))
    elif role in ("watch", "fake"):
        fn = watch_main if role == "watch" else fake_main
        if uvloop is not None:
            uvloop.run(fn(a))
        else:
            asyncio.run(fn(a))
    else:
        sys.exit(f"unknown role {role}")


if __name__ == "__main__":
    main()
