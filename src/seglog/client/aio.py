"""`AsyncClient`: the asyncio twin of `Client`, method for method (see `_base`).

An `AsyncClient` sends its requests over lean keep-alive HTTP/1.1 (`_h1_aio`) where nothing
needs httpx, and wraps one `httpx.AsyncClient` for everything else (TLS, h2c, proxies,
streams, injected transports), bound to the event loop that first uses it; close it
(`await client.close()` or `async with`) when done.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import (
    AsyncGenerator,
    AsyncIterable,
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Mapping,
    Sequence,
)
from types import TracebackType
from typing import Any, Self, TypeVar

import httpx

from seglog.client import _arrow, _base, _h1, _watch, _ws
from seglog.client._arrow import ARROW_PAGE_BYTES, ARROW_PAGE_RECORDS, ArrowPage
from seglog.client._base import (
    DEFAULT_URL,
    BaseClient,
    Call,
    RandomSource,
    Reply,
    RequestSpec,
)
from seglog.client._h1_aio import AsyncH1Pool
from seglog.client._reader import ReadCursor
from seglog.client._watch import ReconnectPolicy
from seglog.client.exceptions import SeglogConnectionError, SeglogHTTPError
from seglog.client.types import (
    Appended,
    Claimed,
    Deleted,
    DiffResult,
    Health,
    ReadRecord,
    Ready,
    Settled,
    StreamAppended,
    Tombstone,
    TopicDeleted,
    TopicPage,
    TopicPut,
    TopicState,
    TopicSummary,
)
from seglog.client.watch import AsyncWatch
from seglog.client.websocket import ws_headers
from seglog.client.websocket_aio import AsyncWebSocket
from seglog.client.work import AsyncWork

T = TypeVar("T")


class AsyncClient(BaseClient):
    """The asyncio client of a seglog server's `/v0` HTTP API (docs/client.md).

    The twin of `Client`, method for method: the request methods are coroutines, and
    `read()`, `watch()` and `work()` return async iterators. It holds a pool of lean HTTP/1.1
    connections for plain `http://` URLs (each bound to the loop that opened it) and one
    `httpx.AsyncClient` for the rest (bound to the loop that first uses it);
    `await client.close()` it, or use
    `async with`. Arguments, retries and exceptions are those of `Client`: `SeglogHTTPError`
    (a subclass per wire code) for an error answer, `SeglogConnectionError` /
    `SeglogTimeoutError` when no answer came, `SeglogProtocolError` for a malformed answer,
    `ValueError` / `TypeError` for arguments that cannot be right.

        async with AsyncClient("http://127.0.0.1:4000") as client:
            await client.append("orders", [{"data": {"id": 1}}])
    """

    def __init__(
        self,
        url: str = DEFAULT_URL,
        *,
        api_key: str | None = None,
        timeout: float = 30.0,
        retries: int = 5,
        backoff: float = 0.05,
        max_backoff: float = 2.0,
        http2: bool = False,
        transport: httpx.AsyncBaseTransport | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rng: RandomSource | None = None,
    ) -> None:
        super().__init__(
            url, timeout=timeout, retries=retries, backoff=backoff, max_backoff=max_backoff, rng=rng
        )
        if transport is None and _base.h2c_wanted(url, http2):
            transport = httpx.AsyncHTTPTransport(
                http1=False, http2=True, verify=_base.tls_verify(url)
            )
        self._sleep = sleep
        # Requests go through the lean HTTP/1.1 pool where nothing needs httpx (see `_h1_aio`).
        self._h1 = (
            AsyncH1Pool(url, _base.default_headers(api_key))
            if _h1.usable(url, http2=http2, has_transport=transport is not None)
            else None
        )
        self._http = httpx.AsyncClient(
            base_url=url,
            headers=_base.default_headers(api_key),
            timeout=timeout,
            http2=http2,
            transport=transport,
            verify=_base.tls_verify(url),
        )

    # --- plumbing ---------------------------------------------------------------------------

    async def _request(self, spec: RequestSpec) -> Reply:
        body = spec.body
        if self._h1 is not None and (body is None or isinstance(body, bytes)):
            timeout = self.timeout + spec.extra_timeout
            return await self._h1.send(
                spec.method, spec.path, spec.params, body, spec.headers, timeout
            )
        return await self._http.send(self._build(self._http, spec))

    async def _send(self, spec: RequestSpec) -> Reply:
        attempt = 0
        while True:
            try:
                resp = await self._request(spec)
            except httpx.TransportError as exc:
                delay = self._failure(exc, spec, attempt)
            else:
                if resp.is_success:
                    return resp
                delay = self._rejected(resp, spec, attempt)
            await self._sleep(delay)
            attempt += 1

    async def _call(self, call: Call[T]) -> T:
        return call.parse(await self._send(call.spec))

    async def close(self) -> None:
        """Close the connection pools. The client cannot be used afterwards."""
        if self._h1 is not None:
            await self._h1.close()
        await self._http.aclose()

    async def aclose(self) -> None:
        """Same as `close()` (the name `contextlib.aclosing` expects)."""
        await self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # --- probes -----------------------------------------------------------------------------

    async def health(self) -> Health:
        """Liveness: `GET /v0/health`. Answers as soon as the process serves HTTP, even
        while it recovers (use `ready()` or `wait_ready()` to know it takes requests).

        Returns: `Health(status, version, uptime_ms)`.
        """
        return await self._call(_base.health())

    async def ready(self) -> Ready:
        """Readiness, one probe and no retries: `GET /v0/ready`.

        Returns: `Ready(status, wal_replay_complete, topics)`.
        Raises: `NotReady` (503) while the server replays its WAL (`.replay_progress`),
        `ShuttingDown` while it drains.
        """
        return await self._call(_base.ready())

    async def wait_ready(self, timeout: float = 30.0) -> Ready:
        """Poll `/v0/ready` through 503s and connection failures until the server
        is ready, for up to `timeout` seconds.

        Returns: the first `Ready` answer.
        Raises: the last failure (`NotReady`, `SeglogConnectionError`, ...) when time runs
        out; any other error answer at once.
        """
        start, slept, attempt = time.monotonic(), 0.0, 0
        while True:
            try:
                return await self._call(_base.ready())
            except (SeglogHTTPError, SeglogConnectionError) as exc:
                if isinstance(exc, SeglogHTTPError) and exc.status != 503:
                    raise
                retry_after = exc.retry_after if isinstance(exc, SeglogHTTPError) else None
                # An injected sleep may not advance the clock: count what was slept as well.
                remaining = timeout - max(time.monotonic() - start, slept)
                if remaining <= 0:
                    raise
            delay = min(self.policy.wait(attempt, retry_after, self._rng), remaining)
            await self._sleep(delay)
            slept += delay
            attempt += 1

    # --- topics -----------------------------------------------------------------------------

    async def put_topic(self, topic: str, config: Mapping[str, Any] | None = None) -> TopicPut:
        """Create a topic, or replace the config of an existing one: `PUT /v0/topics/:topic`.

        `config` is the whole config (API §0.11: `type`, `durability`, `ttl_ms`,
        `cap_records`, `cap_bytes`, `discard`, `priority`, queue fields, ...); omitted fields
        take their defaults, also on an existing topic. To change one field, read the config
        with `get_topic()` and write it back changed. A tightened cap or TTL may evict
        records at once.

        Returns: `TopicPut(topic, created, config)` with the stored, normalized config.
        Raises: `InvalidRequest` (bad name or config), `TopicExistsIncompatible` (e.g. another
        `type` than the existing topic's), `Forbidden` (key lacks admin scope).

            await client.put_topic("orders", {"durability": "fsync", "cap_records": 1_000_000})
        """
        return await self._call(_base.put_topic(topic, config))

    async def get_topic(self, topic: str, *, touch: bool = True) -> TopicState:
        """The state of one topic: `GET /v0/topics/:topic`.

        Args:
            touch: count this as a read (updates `last_read_ts` and the auto-priority
                recency); `False` for monitoring.

        Returns: `TopicState` (`head_seq`, `earliest_seq`, `next_seq`, `count`, `bytes`,
        `config`, `queue` counts for a queue topic, ...).
        Raises: `TopicNotFound`.
        """
        return await self._call(_base.get_topic(topic, touch))

    async def list_topics(
        self, *, prefix: str | None = None, page_size: int | None = None, cursor: str | None = None
    ) -> TopicPage:
        """One page of topics: `GET /v0/topics`.

        Args:
            prefix: only names starting with it.
            page_size: topics per page (the server caps it).
            cursor: `next_cursor` of the previous page.

        Returns: `TopicPage(topics, next_cursor)`; `next_cursor` is None on the last page.
        `iter_topics()` follows the cursors for you.
        """
        return await self._call(_base.list_topics(prefix, page_size, cursor))

    async def iter_topics(
        self, *, prefix: str | None = None, page_size: int | None = None
    ) -> AsyncIterator[TopicSummary]:
        """Every topic (optionally only names starting with `prefix`), as
        `TopicSummary` values, following `next_cursor` page by page.

            names = [t.topic async for t in client.iter_topics(prefix="orders.")]
        """
        cursor: str | None = None
        while True:
            page = await self.list_topics(prefix=prefix, page_size=page_size, cursor=cursor)
            for summary in page.topics:
                yield summary
            if page.next_cursor is None or page.next_cursor == cursor:
                return
            cursor = page.next_cursor

    async def delete_topic(self, topic: str, *, if_empty: bool = False) -> TopicDeleted:
        """Delete a topic with its records: `DELETE /v0/topics/:topic`.

        Args:
            if_empty: refuse (`TopicNotEmpty`, 409) when it still has records.

        Returns: `TopicDeleted(topic, deleted, routers_removed)`; routers from or to the
        topic are removed with it. A reader of a topic recreated under the same name gets a
        `recreated` tombstone.
        Raises: `TopicNotFound`, `TopicNotEmpty`.
        """
        return await self._call(_base.delete_topic(topic, if_empty))

    # --- records ----------------------------------------------------------------------------

    async def append(
        self,
        topic: str,
        records: Sequence[Mapping[str, Any]],
        *,
        node: str | None = None,
        idempotency_key: str | None = None,
        create: bool | None = None,
        config: Mapping[str, Any] | None = None,
        return_seqs: bool = True,
    ) -> Appended:
        """Append records atomically: `POST /v0/topics/:topic`.

        All records get consecutive seqs, or none is written.

        Args:
            records: 1..10,000 record dicts, each with `data` (any JSON value) and optional
                `tag` (str), `node` (str) and `meta` (JSON). Not a dict ⇒ `TypeError`
                naming the record, before anything is sent.
            node: the default `node` of records without one.
            idempotency_key: within the topic's `idempotency_window_ms`, a second append
                with the same key is not written again; it answers the first one's seqs with
                `deduped=True`. It also lets the client resend after a broken connection.
            create: create the topic if it is missing (default: its `auto_create`).
            config: the config of a topic this append creates (ignored otherwise).
            return_seqs: `False` leaves `Appended.seqs` None (smaller answers).

        Returns: `Appended(first_seq, last_seq, seqs, head_seq, count, created, deduped)`.
        Raises: `InvalidRequest` (no records, a record without `data`, a field too long),
        `BatchTooLarge`, `RecordTooLarge`, `PayloadTooLarge`, `TopicNotFound` (missing and
        not created), `TopicFull` (a `discard: "reject"` topic at its cap).

            await client.append("orders", [{"data": {"id": 1}, "tag": "eu"}], idempotency_key="o-1")
        """
        return await self._call(
            _base.append(
                topic,
                records,
                node=node,
                idempotency_key=idempotency_key,
                create=create,
                config=config,
                return_seqs=return_seqs,
            )
        )

    async def append_encoded(
        self,
        topic: str,
        records_json: bytes,
        *,
        node: str | None = None,
        idempotency_key: str | None = None,
        create: bool | None = None,
        config: Mapping[str, Any] | None = None,
        return_seqs: bool = True,
    ) -> Appended:
        """`append()` of records already encoded as one JSON array of API §3
        record objects (e.g. built column by column from Arrow): sent as is, validated by the
        server. Arguments, result and exceptions are those of `append()`.
        """
        return await self._call(
            _base.append_encoded(
                topic,
                records_json,
                node=node,
                idempotency_key=idempotency_key,
                create=create,
                config=config,
                return_seqs=return_seqs,
            )
        )

    async def append_stream(
        self,
        topic: str,
        records: Iterable[Any] | AsyncIterable[Any],
        *,
        node: str | None = None,
        create: bool | None = None,
        buffer_bytes: int = _base.NDJSON_BUFFER_BYTES,
    ) -> StreamAppended:
        """`Client.append_stream()`; `records` may also be an async iterable."""
        lines = _async_lines(records, buffer_bytes)
        return await self._call(_base.append_stream(topic, lines, node=node, create=create))

    async def append_one(
        self,
        topic: str,
        data: Any,
        *,
        tag: str | None = None,
        node: str | None = None,
        meta: Any = None,
        idempotency_key: str | None = None,
        create: bool | None = None,
        config: Mapping[str, Any] | None = None,
    ) -> Appended:
        """Append one record: `append(topic, [{"data": data, "tag": tag, ...}])`
        with the optional fields left out when None.

        Returns: `Appended` (its `seqs` is `[seq]`). Raises: as `append()`.

            await client.append_one("orders", {"id": 1}, tag="eu")
        """
        rec = _base.record(data, tag=tag, node=node, meta=meta)
        return await self.append(
            topic, [rec], idempotency_key=idempotency_key, create=create, config=config
        )

    async def diff(
        self,
        topic: str,
        from_seq: int = 0,
        *,
        limit: int | None = None,
        node: str | Sequence[str] | None = None,
        include_tags: bool = False,
        include_meta: bool = True,
        wait_ms: int = 0,
        max_batch_bytes: int = 0,
    ) -> DiffResult:
        """One page of records after the cursor `from_seq`: `POST /v0/topics/:topic/diff`.

        The single request under `read()`, for a consumer loop of your own: pass the
        answer's `next_from_seq` as the next `from_seq`.

        Args:
            from_seq: the cursor; records with `seq > from_seq` come back (0 = the start).
            limit: records per page (server default 256, at most 1000).
            node: drop records written by this node id or ids (loop prevention).
            include_tags, include_meta: include `tag` / `meta` in the records.
            wait_ms: long-poll: when nothing is there yet, wait up to this long (≤ 30,000)
                for an append.
            max_batch_bytes: byte budget of the page (0 = the server's default).

        Returns: `DiffResult(records, next_from_seq, head_seq, earliest_seq, caught_up,
        tombstone, lag)`; `tombstone` is set when seqs after the cursor were lost (cap,
        TTL, a recreated topic) and is never an exception.
        Raises: `TopicNotFound`, `InvalidRequest` (e.g. a negative `from_seq`).
        """
        return await self._call(
            _base.diff(
                topic,
                from_seq,
                limit=limit,
                node=node,
                include_tags=include_tags,
                include_meta=include_meta,
                wait_ms=wait_ms,
                max_batch_bytes=max_batch_bytes,
            )
        )

    async def diff_arrow(
        self,
        topic: str,
        from_seq: int = 0,
        *,
        limit: int = ARROW_PAGE_RECORDS,
        node: str | Sequence[str] | None = None,
        include_tags: bool = False,
        include_meta: bool = True,
        max_batch_bytes: int = ARROW_PAGE_BYTES,
    ) -> ArrowPage:
        """One columnar page after `from_seq` (the Arrow IPC form of `diff()`, API §13.1).

        Returns: `ArrowPage`: `.table` holds the page's records as a `pyarrow.Table`
        (`seq`, `ts`, `node`, [`tag`], `data` as JSON text, [`meta`]) and `.fields` every
        other field of the diff (`next_from_seq`, `head_seq`, `caught_up`, `tombstone`, ...).
        For a cursor loop; `read_arrow()` pages for you.
        Raises: as `diff()`.
        """
        return await self._call(
            _arrow.diff_arrow(
                topic,
                from_seq,
                limit=limit,
                node=node,
                include_tags=include_tags,
                include_meta=include_meta,
                max_batch_bytes=max_batch_bytes,
            )
        )

    async def read_arrow(
        self,
        topic: str,
        from_seq: int = 0,
        *,
        until_seq: int | None = None,
        limit: int = ARROW_PAGE_RECORDS,
        node: str | Sequence[str] | None = None,
        include_tags: bool = False,
        include_meta: bool = True,
        max_batch_bytes: int = ARROW_PAGE_BYTES,
    ) -> Any:
        """The records after `from_seq` up to `until_seq` as one `pyarrow.Table`.

        `until_seq` defaults to the head when the call starts. Columns as in `diff_arrow()`
        (`seq`, `ts`, `node`, [`tag`], `data` as JSON text, [`meta`]), read page by page
        (pages default to the columnar form's largest: 65,536 records, 32 MiB). Gaps are not
        rows: their tombstones are listed in the table's schema metadata `seglog` (JSON),
        with the cursor to resume from (`next_from_seq`). For pandas: `.to_pandas()`; for
        polars: `polars.from_arrow(table)`.

        Raises: as `diff()`.

            table = await client.read_arrow("orders")
        """
        opts: dict[str, Any] = {
            "limit": limit,
            "node": node,
            "include_tags": include_tags,
            "include_meta": include_meta,
            "max_batch_bytes": max_batch_bytes,
        }
        page = await self.diff_arrow(topic, from_seq, **opts)
        pages, stop = [page], _arrow.stop_at(page, until_seq)
        while not _arrow.done(page, stop):
            cursor = int(page.fields["next_from_seq"])
            page = await self.diff_arrow(topic, cursor, **opts)
            pages.append(page)
        return _arrow.join(topic, from_seq, pages, stop)

    def read(
        self,
        topic: str,
        from_seq: int = 0,
        *,
        until_seq: int | None = None,
        follow: bool = False,
        limit: int = 1000,
        wait_ms: int = 1000,
        node: str | Sequence[str] | None = None,
        include_tags: bool = True,
        include_meta: bool = True,
        max_batch_bytes: int = 0,
    ) -> AsyncReader:
        """Iterate over the records after `from_seq`, with tombstones in-band.

        Yields `ReadRecord` values and, where seqs were lost before they could be read
        (cap, TTL, a recreated topic), a `Tombstone` in their place; it pages through
        `diff()` for you.

        Args:
            from_seq: the cursor; the first record yielded has `seq > from_seq`.
            until_seq: stop after this seq (inclusive).
            follow: keep waiting for new records at the head (long-polls of `wait_ms`)
                instead of ending there.
            limit: records per request.
            node, include_tags, include_meta, max_batch_bytes: as in `diff()`.

        Returns: an `AsyncReader` (iterate with `async for`); its `next_from_seq` is where
        to resume, even when you stop in the middle of a page. Raises (while iterating): as
        `diff()`.

            async for rec in client.read("orders", from_seq=saved):
                handle(rec)
        """
        cursor = ReadCursor(
            from_seq, until_seq=until_seq, follow=follow, limit=limit, wait_ms=wait_ms
        )
        opts: dict[str, Any] = {
            "node": node,
            "include_tags": include_tags,
            "include_meta": include_meta,
            "max_batch_bytes": max_batch_bytes,
        }
        return AsyncReader(self, topic, cursor, opts)

    async def delete_records(
        self,
        topic: str,
        *,
        before_seq: int | None = None,
        match: str | Sequence[str] | None = None,
    ) -> Deleted:
        """Delete records for good: `POST /v0/topics/:topic/delete`.

        Args:
            before_seq: delete the live records with `seq < before_seq`.
            match: delete the records whose tag matches: a tag (`"order-7"`), a prefix
                ending in `*` (`"tenant42:*"`), or a predicate such as
                `["tag", "Glob", "chat-42:*"]`. With `before_seq` too, both must hold.

        Returns: `Deleted(deleted, earliest_seq, head_seq, count, bytes)`.
        Raises: `InvalidRequest` (neither given, a bad predicate), `TopicNotFound`.
        Not resent after a broken connection.
        """
        return await self._call(_base.delete_records(topic, before_seq, match))

    # --- queues (API §9) ---------------------------------------------------------------------

    async def claim(
        self, topic: str, node: str, *, max: int = 1, lease_ms: int | None = None
    ) -> Claimed:
        """Lease up to `max` jobs of a queue topic to `node`: `POST .../claim`.

        Reclaimed work (expired or nacked) comes first. Each `Job` carries a `lease_id` (pass
        it to `ack`/`nack`/`extend` to fence them to this delivery) and a `deadline`; a job
        not acked by then can be claimed again. `lease_ms` overrides the topic's lease time.

        Returns: `Claimed(jobs, ready)`; `jobs` may be empty.
        Raises: `NotAQueue`, `TopicNotFound`. Not resent after a broken connection.

            jobs = await client.claim("jobs", node="worker-1", max=10).jobs
        """
        return await self._call(_base.claim(topic, node, max, lease_ms))

    async def ack(
        self, topic: str, node: str, seqs: Sequence[int], *, lease_ids: Sequence[str] | None = None
    ) -> Settled:
        """Acknowledge jobs that `node` holds: they are deleted for good: `POST .../ack`.

        `lease_ids` fences each seq to one delivery (same order as `seqs`; "" = no fence).

        Returns: `Settled`: `done` counts the acked seqs, `skipped` lists the others (not
        leased to `node`, lease expired or fenced out, already acked).
        Raises: `NotAQueue`, `TopicNotFound`.
        """
        return await self._call(_base.settle("ack", topic, node, seqs, lease_ids))

    async def nack(
        self,
        topic: str,
        node: str,
        seqs: Sequence[int],
        *,
        delay_ms: int = 0,
        lease_ids: Sequence[str] | None = None,
    ) -> Settled:
        """Give jobs back: claimable again at once, or after `delay_ms`: `POST .../nack`.

        Returns: `Settled` (as `ack()`). Raises: `NotAQueue`, `TopicNotFound`.
        """
        return await self._call(
            _base.settle("nack", topic, node, seqs, lease_ids, delay_ms=delay_ms)
        )

    async def extend(
        self,
        topic: str,
        node: str,
        seqs: Sequence[int],
        lease_ms: int,
        *,
        lease_ids: Sequence[str] | None = None,
    ) -> Settled:
        """Move the deadlines of leases `node` holds to now + `lease_ms` (a heartbeat):
        `POST .../extend`.

        Returns: `Settled` with `deadlines` (seq → new deadline, epoch ms); a seq whose lease
        is gone is in `skipped`. Raises: `NotAQueue`, `TopicNotFound`.
        """
        return await self._call(
            _base.settle("extend", topic, node, seqs, lease_ids, lease_ms=lease_ms)
        )

    def work(
        self,
        topic: str,
        node: str,
        *,
        max: int = 1,
        lease_ms: int | None = None,
        nack_delay_ms: int = 0,
    ) -> AsyncWork:
        """Jobs of a queue topic pushed by the server (`GET .../work`), as an async iterator of
        `AsyncLeasedJob`s.

        The server keeps up to `max` leases assigned to the stream and pushes the next job as
        one is settled, so nothing polls. `async with job:` extends the lease while the block runs,
        then acks; on an exception it nacks (after `nack_delay_ms`) and re-raises. The stream
        reconnects by itself and never ends on its own: leave the loop and close it
        (`async with client.work(...) as jobs:`); the server then releases what it had leased and
        nobody settled. A job can be delivered twice (at least once): make handlers
        idempotent.

        Raises (while iterating): `NotAQueue`, `TopicNotFound`, `Forbidden`, ...; failures
        retrying can fix are retried.

            async with client.work("jobs", node="worker-1", max=8) as jobs:
                async for job in jobs:
                    async with job:
                        handle(job.data)
        """
        return AsyncWork(self, topic, node, max, lease_ms, nack_delay_ms)

    # --- live delivery ----------------------------------------------------------------------

    def watch(
        self,
        topics: str | Sequence[str] | Mapping[str, int | None],
        *,
        from_seq: int = 0,
        tail: bool = False,
        last_event_id: str | None = None,
        node: str | Sequence[str] | None = None,
        topic_nodes: Mapping[str, str | Sequence[str]] | None = None,
        limit: int | None = None,
        max_batch_bytes: int | None = None,
        heartbeat_ms: int | None = None,
        include_meta: bool = True,
        include_tags: bool = False,
        include_data: bool = True,
        lenient: bool = False,
        reconnect: ReconnectPolicy | None = None,
    ) -> AsyncWatch:
        """Follow one or many topics live over the multiplexed SSE watch (API.md §7).

        Args:
            topics: a name, names (each starting after `from_seq`, or at the head with
                `tail=True`), or a mapping name → from_seq (None = the head).
            last_event_id: `last_event_id` of an earlier watch: resume the topics it names.
            node: drop records written by these node ids (loop prevention); `topic_nodes`
                adds ids per topic.
            limit, max_batch_bytes, heartbeat_ms: per-push limits and the keep-alive period.
            include_meta, include_tags, include_data: what each record carries.
            lenient: skip missing topics instead of failing with `TopicNotFound`.
            reconnect: a `ReconnectPolicy` (backoff and give-up rules).

        Returns: a `AsyncWatch` yielding `WatchRecord`, `WatchTombstone` (a gap, never an
        exception), `WatchCaughtUp` (a topic reached its head) and `WatchTopicDeleted`. It
        reconnects and resumes by itself without losing or repeating a record and ends when
        every watched topic is deleted; use it as a context manager, or `close()` it.
        Raises (on opening or iterating): `TopicNotFound`, `Forbidden`, ...

            async with client.watch("orders", tail=True) as watch:
                async for event in watch:
                    print(event)
        """
        state = _watch.new_state(
            topics,
            self._rng,
            from_seq=from_seq,
            tail=tail,
            last_event_id=last_event_id,
            node=node,
            topic_nodes=topic_nodes,
            limit=limit,
            max_batch_bytes=max_batch_bytes,
            heartbeat_ms=heartbeat_ms,
            include_meta=include_meta,
            include_tags=include_tags,
            include_data=include_data,
            lenient=lenient,
            reconnect=reconnect,
        )
        return AsyncWatch(self, state)

    def websocket(self) -> AsyncWebSocket:
        """A WebSocket session on `/v0/ws` (API.md §8: subscribe, publish, ping) with
        this client's URL, key and timeout. It connects on first use or when entered as a
        context manager.
        """
        return AsyncWebSocket(_ws.ws_url(self.url), ws_headers(self._http.headers), self.timeout)

    # --- metrics ----------------------------------------------------------------------------

    async def metrics(self) -> str:
        """The server's metrics in the Prometheus text format: `GET /v0/metrics`."""
        return await self._call(_base.metrics())

    async def metrics_json(self) -> dict[str, Any]:
        """The server's metrics as a JSON snapshot (name → value): `GET /v0/metrics`."""
        return await self._call(_base.metrics_json())


class AsyncReader:
    """Async iterator over `ReadRecord | Tombstone` returned by `AsyncClient.read`.

    `next_from_seq` is the resume cursor: pass it as `from_seq` to continue after the last item
    this iterator handed out. `last_page` is the most recent diff response (head, lag, …).
    """

    def __init__(
        self, client: AsyncClient, topic: str, cursor: ReadCursor, opts: dict[str, Any]
    ) -> None:
        self.topic = topic
        self.last_page: DiffResult | None = None
        self._client, self._cursor, self._opts = client, cursor, opts
        self._items = self._pages()

    @property
    def next_from_seq(self) -> int:
        """The cursor after the last item handed out: pass it as `from_seq` to resume."""
        return self._cursor.next_from_seq

    async def _pages(self) -> AsyncGenerator[ReadRecord | Tombstone, None]:
        cur, client = self._cursor, self._client
        while not cur.done:
            pause = cur.pause()
            if pause is not None:
                await client._sleep(client._idle_delay(pause))
            page = await client.diff(
                self.topic,
                cur.next_from_seq,
                limit=cur.page_limit(),
                wait_ms=cur.wait_ms,
                **self._opts,
            )
            self.last_page = page
            for item in cur.feed(page):
                yield item

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> ReadRecord | Tombstone:
        return await anext(self._items)

    async def aclose(self) -> None:
        """Stop iterating (no request is in flight between items)."""
        await self._items.aclose()


async def _async_lines(
    records: Iterable[Any] | AsyncIterable[Any], buffer_bytes: int
) -> AsyncIterator[bytes]:
    """`_base.ndjson_lines` for the async client (httpx streams async bodies only)."""
    if not isinstance(records, AsyncIterable):
        for lines in _base.ndjson_lines(records, buffer_bytes):
            yield lines
        return
    piece = bytearray()
    i = 0
    async for rec in records:
        piece += _base.ndjson_line(i, rec)
        i += 1
        if len(piece) >= buffer_bytes:
            yield bytes(piece)
            piece.clear()
    if piece:
        yield bytes(piece)
