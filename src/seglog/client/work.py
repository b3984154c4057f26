"""`Client.work()` / `AsyncClient.work()`: consume a queue topic through its push stream
(`GET /v0/topics/:q/work`, API §9.5) as an iterator of leased jobs.

    for job in client.work("jobs", node="worker-1", max=8):
        with job:                 # extends the lease while the block runs;
            handle(job.data)      # acks when it ends, nacks (and re-raises) on an exception

The server keeps up to `max` leases assigned to the stream and refills as jobs are settled,
so the iterator never polls. The lease heartbeat (an `extend` every third of the lease)
runs in a thread (sync) or a task (async) only while a `with job:` block is open. If the
stream breaks (a restart, a network failure) it is reopened after a backoff; leases of the
old stream are released by the server (or expire), so a job may be delivered again:
handlers must be idempotent (SEMANTICS §10.8). Leaving the iterator closes the stream, and
the server releases whatever it had leased to it and nobody settled.

Errors that retrying cannot fix (`TopicNotFound`, `NotAQueue`, `Forbidden`, ...) are raised.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import AsyncGenerator, Generator
from types import TracebackType
from typing import Any, Self, TypeVar

import httpx
import orjson

from seglog.client import _base
from seglog.client._base import RequestSpec, error_from_response, retryable, topic_path
from seglog.client._watch import check_event_stream
from seglog.client.exceptions import (
    SeglogClientError,
    SeglogConnectionError,
    SeglogHTTPError,
    in_band_error,
)
from seglog.client.sse import SSEDecoder, SSEEvent
from seglog.client.types import Job, Settled
from seglog.client.watch import _AsyncHost, _SyncHost  # the same host protocols

T = TypeVar("T")
log = logging.getLogger("seglog.client.work")

READ_TIMEOUT_S = 45.0  # the server sends a heartbeat after 15 s of idleness
MAX_RECONNECT_S = 5.0


def work_spec(topic: str, node: str, max_jobs: int, lease_ms: int | None) -> RequestSpec:
    params: dict[str, str | int] = {"node": node, "max": max_jobs}
    if lease_ms is not None:
        params["lease_ms"] = lease_ms
    return RequestSpec(
        "GET", topic_path(topic, "/work"), params, headers={"Accept": "text/event-stream"}
    )


def _request(
    http: httpx.Client | httpx.AsyncClient, spec: RequestSpec, timeout: float
) -> httpx.Request:
    return http.build_request(
        spec.method,
        spec.path,
        params=spec.params,
        headers=spec.headers,
        timeout=httpx.Timeout(timeout, read=READ_TIMEOUT_S),
    )


def job_of(item: SSEEvent, topic: str) -> Job | None:
    """A `job` frame's job; an `error` frame raises (shutdown: None, reconnect)."""
    if item.event == "job":
        return Job.from_json(orjson.loads(item.data), topic)
    if item.event == "error":
        obj = orjson.loads(item.data)
        code = obj.get("code")
        if code == "server_shutting_down":
            raise _Reconnect("server shutting down")
        if code == 409:
            raise in_band_error("not_a_queue", str(obj.get("error")), {"topic": topic})
        raise in_band_error(str(code), str(obj.get("error") or code), obj)
    return None


class _Reconnect(Exception):
    pass


def _give_up(exc: Exception) -> bool:
    """Whether a failed stream is for the caller rather than a reconnect."""
    if isinstance(exc, SeglogHTTPError):
        return not retryable(exc)
    return not isinstance(exc, (SeglogConnectionError, httpx.TransportError, _Reconnect))


def _backoff(attempt: int) -> float:
    return min(MAX_RECONNECT_S, 0.1 * 2.0 ** min(attempt, 16))


def _heartbeat_s(job: Job, lease_ms: int | None) -> float:
    """Extend every third of the lease (what is left of it when the job arrived, if the
    lease length was not given)."""
    lease = lease_ms if lease_ms is not None else job.deadline - int(time.time() * 1000)
    return max(lease, 300) / 3000.0


# --- sync -----------------------------------------------------------------------------------


class LeasedJob:
    """A job from `Client.work()`, settled with `ack()`/`nack()` or by a `with` block."""

    def __init__(
        self, client: _SyncHost, job: Job, node: str, lease_ms: int | None, nack_delay_ms: int
    ) -> None:
        self.job = job
        self._client, self._node, self._lease_ms = client, node, lease_ms
        self._nack_delay_ms = nack_delay_ms
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None
        self.settled = False

    def __getattr__(self, name: str) -> Any:  # job fields: seq, data, meta, tag, deliveries ...
        return getattr(self.job, name)

    def _settle(self, verb: str, **extra: int) -> Settled:
        j = self.job
        return self._client._call(
            _base.settle(verb, j.topic, self._node, [j.seq], [j.lease_id], **extra)
        )

    def ack(self) -> bool:
        """True if the job was acked; False if the lease was gone (it may be redelivered)."""
        self._end()
        return self._settle("ack").done == 1

    def nack(self, delay_ms: int = 0) -> bool:
        self._end()
        return self._settle("nack", delay_ms=delay_ms).done == 1

    def extend(self, lease_ms: int) -> bool:
        return self._settle("extend", lease_ms=lease_ms).done == 1

    def _end(self) -> None:
        self.settled = True
        self._stop.set()
        if self._beat is not None and self._beat is not threading.current_thread():
            self._beat.join()

    def _heartbeat(self) -> None:
        every = _heartbeat_s(self.job, self._lease_ms)
        lease = self._lease_ms if self._lease_ms is not None else int(every * 3000)
        while not self._stop.wait(every):
            try:
                if not self.extend(lease):
                    return  # the lease is gone: nothing left to keep alive
            except SeglogClientError as exc:
                log.warning("work: extending job %d failed: %s", self.job.seq, exc)

    def __enter__(self) -> Self:
        self._beat = threading.Thread(target=self._heartbeat, name="seglog-lease", daemon=True)
        self._beat.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.settled:
            self._end()
        elif exc_type is None:
            self.ack()
        else:
            self.nack(self._nack_delay_ms)


class Work:
    """Iterator of `LeasedJob`s from `Client.work()`; reconnects by itself."""

    def __init__(
        self,
        client: _SyncHost,
        topic: str,
        node: str,
        max_jobs: int,
        lease_ms: int | None,
        nack_delay_ms: int,
    ) -> None:
        self._client, self.topic, self.node = client, topic, node
        self._spec = work_spec(topic, node, max_jobs, lease_ms)
        self._lease_ms, self._nack_delay_ms = lease_ms, nack_delay_ms
        self._resp: httpx.Response | None = None
        self._items = self._run()

    def _run(self) -> Generator[LeasedJob, None, None]:
        attempt = 0
        while True:
            try:
                for job in self._stream():
                    attempt = 0
                    yield LeasedJob(
                        self._client, job, self.node, self._lease_ms, self._nack_delay_ms
                    )
            except Exception as exc:
                if _give_up(exc):
                    raise
                why: object = exc
            else:
                why = "stream ended"
            delay = _backoff(attempt)
            attempt += 1
            log.info("work: reconnecting in %.2fs (%s)", delay, why)
            self._client._sleep(delay)

    def _stream(self) -> Generator[Job, None, None]:
        c = self._client
        try:
            resp = c._http.send(_request(c._http, self._spec, c.timeout), stream=True)
        except httpx.TransportError as exc:
            raise SeglogConnectionError(f"work stream: {exc}") from exc
        self._resp = resp
        try:
            if not resp.is_success:
                resp.read()
                raise error_from_response(resp)
            check_event_stream(resp)
            decoder = SSEDecoder()
            for chunk in resp.iter_bytes():
                for item in decoder.feed(chunk):
                    if isinstance(item, SSEEvent):
                        job = job_of(item, self.topic)
                        if job is not None:
                            yield job
        finally:
            self._resp = None
            resp.close()

    def __iter__(self) -> Self:
        return self

    def __next__(self) -> LeasedJob:
        return next(self._items)

    def close(self) -> None:
        """Stop: the stream closes and the server releases its unsettled leases."""
        self._items.close()
        if self._resp is not None:
            self._resp.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --- async ----------------------------------------------------------------------------------


class AsyncLeasedJob:
    """A job from `AsyncClient.work()`: `async with job:` extends, then acks or nacks."""

    def __init__(
        self, client: _AsyncHost, job: Job, node: str, lease_ms: int | None, nack_delay_ms: int
    ) -> None:
        self.job = job
        self._client, self._node, self._lease_ms = client, node, lease_ms
        self._nack_delay_ms = nack_delay_ms
        self._beat: asyncio.Task[None] | None = None
        self.settled = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.job, name)

    async def _settle(self, verb: str, **extra: int) -> Settled:
        j = self.job
        return await self._client._call(
            _base.settle(verb, j.topic, self._node, [j.seq], [j.lease_id], **extra)
        )

    async def ack(self) -> bool:
        await self._end()
        return (await self._settle("ack")).done == 1

    async def nack(self, delay_ms: int = 0) -> bool:
        await self._end()
        return (await self._settle("nack", delay_ms=delay_ms)).done == 1

    async def extend(self, lease_ms: int) -> bool:
        return (await self._settle("extend", lease_ms=lease_ms)).done == 1

    async def _end(self) -> None:
        self.settled = True
        beat, self._beat = self._beat, None
        if beat is not None and beat is not asyncio.current_task():
            beat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beat

    async def _heartbeat(self) -> None:
        every = _heartbeat_s(self.job, self._lease_ms)
        lease = self._lease_ms if self._lease_ms is not None else int(every * 3000)
        while True:
            await asyncio.sleep(every)
            try:
                if not await self.extend(lease):
                    return
            except SeglogClientError as exc:
                log.warning("work: extending job %d failed: %s", self.job.seq, exc)

    async def __aenter__(self) -> Self:
        self._beat = asyncio.ensure_future(self._heartbeat())
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.settled:
            await self._end()
        elif exc_type is None:
            await self.ack()
        else:
            await self.nack(self._nack_delay_ms)


class AsyncWork:
    """Async iterator of `AsyncLeasedJob`s from `AsyncClient.work()`; the twin of `Work`."""

    def __init__(
        self,
        client: _AsyncHost,
        topic: str,
        node: str,
        max_jobs: int,
        lease_ms: int | None,
        nack_delay_ms: int,
    ) -> None:
        self._client, self.topic, self.node = client, topic, node
        self._spec = work_spec(topic, node, max_jobs, lease_ms)
        self._lease_ms, self._nack_delay_ms = lease_ms, nack_delay_ms
        self._resp: httpx.Response | None = None
        self._items = self._run()

    async def _run(self) -> AsyncGenerator[AsyncLeasedJob, None]:
        attempt = 0
        while True:
            try:
                async for job in self._stream():
                    attempt = 0
                    yield AsyncLeasedJob(
                        self._client, job, self.node, self._lease_ms, self._nack_delay_ms
                    )
            except Exception as exc:
                if _give_up(exc):
                    raise
                why: object = exc
            else:
                why = "stream ended"
            delay = _backoff(attempt)
            attempt += 1
            log.info("work: reconnecting in %.2fs (%s)", delay, why)
            await self._client._sleep(delay)

    async def _stream(self) -> AsyncGenerator[Job, None]:
        c = self._client
        try:
            resp = await c._http.send(_request(c._http, self._spec, c.timeout), stream=True)
        except httpx.TransportError as exc:
            raise SeglogConnectionError(f"work stream: {exc}") from exc
        self._resp = resp
        try:
            if not resp.is_success:
                await resp.aread()
                raise error_from_response(resp)
            check_event_stream(resp)
            decoder = SSEDecoder()
            async for chunk in resp.aiter_bytes():
                for item in decoder.feed(chunk):
                    if isinstance(item, SSEEvent):
                        job = job_of(item, self.topic)
                        if job is not None:
                            yield job
        finally:
            self._resp = None
            await resp.aclose()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> AsyncLeasedJob:
        return await self._items.__anext__()

    async def close(self) -> None:
        await self._items.aclose()
        if self._resp is not None:
            await self._resp.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
