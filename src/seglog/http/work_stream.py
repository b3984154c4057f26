"""`GET /v0/topics/:q/work` (API §9.5, SEMANTICS §10.7): the push mode of a queue. The
server claims on the client's behalf and sends one `job` frame per lease, keeping up to
`max` un-expired leases assigned to this connection: it refills whenever that count drops
(ack, nack, expiry) or jobs arrive, re-checking on every append to the topic and at least
every 250 ms. When the connection ends, however it ends, every lease delivered on it is
released at once.

Each stream has its own connection id, so the leases it holds are told apart from the same
node's polling claims. Acks, nacks and extends arrive through the ordinary routes."""

from __future__ import annotations

import asyncio
import itertools

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from seglog.clock import Clock
from seglog.core.leases import Claimer
from seglog.core.sse import frame, heartbeat, retry_frame
from seglog.engine.queues import Job
from seglog.errors import ErrorCode, SeglogError
from seglog.http.app_state import RAW_SEND, ServerState, server_state
from seglog.http.auth import Scope as KeyScope
from seglog.http.common import principal, require
from seglog.http.queue_request import WorkQuery, parse_work_query
from seglog.http.queues import job_object
from seglog.http.topics import method_not_allowed
from seglog.http.watch import SSE_HEADERS, accepts_sse, until_disconnect
from seglog.http.watch_stream import SendBytes

RECHECK_S = 0.25
HEARTBEAT_MS = 15_000
_conn_ids = itertools.count(1)


async def open_work(request: Request) -> Response:
    if request.method != "GET":  # a HEAD would take leases for a client that reads none
        return method_not_allowed(request)
    name = request.path_params["topic"]
    require(request, (KeyScope.READ, KeyScope.WRITE), name)
    if not accepts_sse(request.headers.get("accept")):
        raise SeglogError(ErrorCode.NOT_ACCEPTABLE, "this stream is text/event-stream")
    q = parse_work_query(request.query_params)
    st = server_state(request)
    st.db.queue_topic(name)  # 404, then 409
    who = principal(request)
    key = who.key_id if st.keyring.enabled else None
    st.slots.acquire(key)
    return WorkResponse(st, name, q, key)


class WorkStream:
    def __init__(self, st: ServerState, topic: str, q: WorkQuery, clock: Clock) -> None:
        self.st = st
        self.topic = topic
        self.q = q
        self.clock = clock
        self.conn = next(_conn_ids)
        self._claiming: asyncio.Future[tuple[list[Job], int]] | None = None
        self._topic_json = orjson.dumps(topic)

    async def run(self, send: SendBytes) -> None:
        st, db, name = self.st, self.st.db, self.topic
        st.work_kick(name, self.conn)  # before the first lease: no settle may go unseen
        await send(retry_frame())
        last_sent = self.clock.monotonic()
        while True:
            if st.shutting_down:
                await send(
                    self._error("server_shutting_down", "server is shutting down; reconnect")
                )
                return
            try:
                db.queue_topic(name)
                deficit = self.q.max - db.held_by_conn(name, self.conn)
                jobs = await self._claim(deficit) if deficit > 0 else []
            except SeglogError as e:
                if e.code in (ErrorCode.TOPIC_NOT_FOUND, ErrorCode.NOT_A_QUEUE):
                    await send(self._error(409, "topic is no longer a queue"))
                    return
                raise
            if jobs:
                # One send for the claim's frames: each is a round trip to the server's
                # I/O thread (BENCHMARKS.md, "Queues: the request path").
                await send(
                    b"".join(
                        frame(
                            "job", orjson.dumps({"topic": name, **job_object(j)}), str(j.record.seq)
                        )
                        for j in jobs
                    )
                )
                last_sent = self.clock.monotonic()
            idle_ms = (self.clock.monotonic() - last_sent) * 1000.0
            if idle_ms >= HEARTBEAT_MS:
                await send(heartbeat(self.clock.now_ms()))
                last_sent = self.clock.monotonic()
            await self._wait(RECHECK_S)

    async def _wait(self, timeout_s: float) -> None:
        """Until an append to the topic, a settle that concerns this stream (its jobs acked,
        or jobs released for anyone), shutdown, or `timeout_s` (expiry is only seen by
        re-checking)."""
        kick = self.st.work_kick(self.topic, self.conn)
        try:
            # At once if settled while this stream was claiming or sending.
            await self.st.wait_for_append([self.topic], timeout_s, kick)
        finally:
            kick.clear()

    async def _claim(self, deficit: int) -> list[Job]:
        # Shielded: if the client goes away mid-claim, `close` still waits for the leases
        # it was given, so that they are released with the others instead of expiring.
        claimer = Claimer(self.q.node, deficit, self.conn)
        self._claiming = asyncio.ensure_future(
            self.st.db.claim(self.topic, claimer, self.q.lease_ms)
        )
        jobs, _ready = await asyncio.shield(self._claiming)
        return jobs

    async def close(self) -> None:
        self.st.drop_work_kick(self.topic, self.conn)
        pending = self._claiming
        if pending is not None and not pending.done():
            await asyncio.gather(pending, return_exceptions=True)
        if self.st.db.release_conn(self.topic, self.conn):
            self.st.queue_settled(self.topic)  # other streams may take them at once

    def _error(self, code: int | str, message: str) -> bytes:
        data = b'{"code":%b,"error":%b,"topic":%b}' % (
            orjson.dumps(code),
            orjson.dumps(message),
            self._topic_json,
        )
        return frame("error", data)


class WorkResponse(Response):
    """Streams one `/work` connection; owns one connection slot, released on every exit."""

    def __init__(self, st: ServerState, topic: str, q: WorkQuery, key: str | None) -> None:
        super().__init__(status_code=200)
        self._st = st
        self._stream = WorkStream(st, topic, q, st.engine.clock)
        self._key = key

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        raw_send: Send = scope.get(RAW_SEND, send)

        async def send_bytes(data: bytes) -> None:
            await raw_send({"type": "http.response.body", "body": data, "more_body": True})

        try:
            await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
            if await until_disconnect(self._stream.run(send_bytes), receive):
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            try:
                await self._stream.close()
            finally:
                self._st.slots.release(self._key)
