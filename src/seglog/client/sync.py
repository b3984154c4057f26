"""`Client`: the blocking client. Mirrors `AsyncClient` method for method (see `_base`).

A `Client` wraps one `httpx.Client` (a connection pool); it is safe to share between threads
as httpx's is, and should be closed (or used as a context manager) when done.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, Self, TypeVar

import httpx

from seglog.client import _arrow, _base, _watch, _ws
from seglog.client._arrow import ARROW_PAGE_BYTES, ARROW_PAGE_RECORDS, ArrowPage
from seglog.client._base import DEFAULT_URL, BaseClient, Call, RandomSource, RequestSpec
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
    Tombstone,
    TopicDeleted,
    TopicPage,
    TopicPut,
    TopicState,
    TopicSummary,
)
from seglog.client.watch import Watch
from seglog.client.websocket import WebSocket, ws_headers
from seglog.client.work import Work

T = TypeVar("T")


class Client(BaseClient):
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
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
        rng: RandomSource | None = None,
    ) -> None:
        super().__init__(
            url, timeout=timeout, retries=retries, backoff=backoff, max_backoff=max_backoff, rng=rng
        )
        if transport is None and _base.h2c_wanted(url, http2):
            transport = httpx.HTTPTransport(http1=False, http2=True)
        self._sleep = sleep
        self._http = httpx.Client(
            base_url=url,
            headers=_base.default_headers(api_key),
            timeout=timeout,
            http2=http2,
            transport=transport,
        )

    # --- plumbing ---------------------------------------------------------------------------

    def _send(self, spec: RequestSpec) -> httpx.Response:
        attempt = 0
        while True:
            try:
                resp = self._http.send(self._build(self._http, spec))
            except httpx.TransportError as exc:
                delay = self._failure(exc, spec, attempt)
            else:
                if resp.is_success:
                    return resp
                delay = self._rejected(resp, spec, attempt)
            self._sleep(delay)
            attempt += 1

    def _call(self, call: Call[T]) -> T:
        return call.parse(self._send(call.spec))

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # --- probes -----------------------------------------------------------------------------

    def health(self) -> Health:
        return self._call(_base.health())

    def ready(self) -> Ready:
        """One probe, no retries: raises `NotReady` (503) while the server recovers."""
        return self._call(_base.ready())

    def wait_ready(self, timeout: float = 30.0) -> Ready:
        """Poll `/v0/ready` through 503s and connection failures for up to `timeout` seconds;
        re-raises the last failure when time runs out."""
        start, slept, attempt = time.monotonic(), 0.0, 0
        while True:
            try:
                return self._call(_base.ready())
            except (SeglogHTTPError, SeglogConnectionError) as exc:
                if isinstance(exc, SeglogHTTPError) and exc.status != 503:
                    raise
                retry_after = exc.retry_after if isinstance(exc, SeglogHTTPError) else None
                # An injected sleep may not advance the clock: count what was slept as well.
                remaining = timeout - max(time.monotonic() - start, slept)
                if remaining <= 0:
                    raise
            delay = min(self.policy.wait(attempt, retry_after, self._rng), remaining)
            self._sleep(delay)
            slept += delay
            attempt += 1

    # --- topics -----------------------------------------------------------------------------

    def put_topic(self, topic: str, config: Mapping[str, Any] | None = None) -> TopicPut:
        return self._call(_base.put_topic(topic, config))

    def get_topic(self, topic: str, *, touch: bool = True) -> TopicState:
        return self._call(_base.get_topic(topic, touch))

    def list_topics(
        self, *, prefix: str | None = None, page_size: int | None = None, cursor: str | None = None
    ) -> TopicPage:
        return self._call(_base.list_topics(prefix, page_size, cursor))

    def iter_topics(
        self, *, prefix: str | None = None, page_size: int | None = None
    ) -> Iterator[TopicSummary]:
        """Every topic (optionally under `prefix`), following `next_cursor` page by page."""
        cursor: str | None = None
        while True:
            page = self.list_topics(prefix=prefix, page_size=page_size, cursor=cursor)
            yield from page.topics
            if page.next_cursor is None or page.next_cursor == cursor:
                return
            cursor = page.next_cursor

    def delete_topic(self, topic: str, *, if_empty: bool = False) -> TopicDeleted:
        return self._call(_base.delete_topic(topic, if_empty))

    # --- records ----------------------------------------------------------------------------

    def append(
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
        """Append atomically. Retried after a broken connection only with an idempotency key."""
        return self._call(
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

    def append_encoded(
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
        """`append` of records that are already one JSON array of API §3 record objects
        (e.g. built column by column from Arrow); the server validates them as usual."""
        return self._call(
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

    def append_one(
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
        rec = _base.record(data, tag=tag, node=node, meta=meta)
        return self.append(
            topic, [rec], idempotency_key=idempotency_key, create=create, config=config
        )

    def diff(
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
        return self._call(
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

    def diff_arrow(
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
        """One columnar diff (API §13.1): `.table` holds the page's records as a
        `pyarrow.Table` (`seq`, `ts`, `node`, [`tag`], `data` JSON text, [`meta`]) and
        `.fields` every other field of the diff (`next_from_seq`, `head_seq`, `caught_up`,
        `tombstone`, ...). For a cursor loop; `read_arrow` pages for you."""
        return self._call(
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

    def read_arrow(
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
        """The records after `from_seq` up to `until_seq` (default: the head when the call
        starts) as one `pyarrow.Table` (columns of API §13.1: `seq`, `ts`, `node`, [`tag`],
        `data` as JSON text, [`meta`]), read through the columnar diff page by page. Gaps
        are not rows: their tombstones are listed in the table's schema metadata `seglog`
        (JSON), with the cursor to resume from (`next_from_seq`). Pages default to the
        columnar form's largest (65,536 records, 32 MiB). For pandas:
        `.to_pandas()`; for polars: `polars.from_arrow(...)`."""
        opts: dict[str, Any] = {
            "limit": limit,
            "node": node,
            "include_tags": include_tags,
            "include_meta": include_meta,
            "max_batch_bytes": max_batch_bytes,
        }
        page = self.diff_arrow(topic, from_seq, **opts)
        pages, stop = [page], _arrow.stop_at(page, until_seq)
        while not _arrow.done(page, stop):
            cursor = int(page.fields["next_from_seq"])
            page = self.diff_arrow(topic, cursor, **opts)
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
    ) -> Reader:
        """Records after `from_seq` (up to `until_seq` inclusive), with tombstones in-band."""
        cursor = ReadCursor(
            from_seq, until_seq=until_seq, follow=follow, limit=limit, wait_ms=wait_ms
        )
        opts: dict[str, Any] = {
            "node": node,
            "include_tags": include_tags,
            "include_meta": include_meta,
            "max_batch_bytes": max_batch_bytes,
        }
        return Reader(self, topic, cursor, opts)

    def delete_records(
        self,
        topic: str,
        *,
        before_seq: int | None = None,
        match: str | Sequence[str] | None = None,
    ) -> Deleted:
        return self._call(_base.delete_records(topic, before_seq, match))

    # --- queues (API §9) ---------------------------------------------------------------------

    def claim(self, topic: str, node: str, *, max: int = 1, lease_ms: int | None = None) -> Claimed:
        """Lease up to `max` jobs (reclaimed work first) to `node`."""
        return self._call(_base.claim(topic, node, max, lease_ms))

    def ack(
        self, topic: str, node: str, seqs: Sequence[int], *, lease_ids: Sequence[str] | None = None
    ) -> Settled:
        """Acknowledge (permanently delete) jobs `node` holds; `lease_ids` fence each seq to
        one delivery ("" = no fence)."""
        return self._call(_base.settle("ack", topic, node, seqs, lease_ids))

    def nack(
        self,
        topic: str,
        node: str,
        seqs: Sequence[int],
        *,
        delay_ms: int = 0,
        lease_ids: Sequence[str] | None = None,
    ) -> Settled:
        """Give jobs back: claimable again at once, or after `delay_ms`."""
        return self._call(_base.settle("nack", topic, node, seqs, lease_ids, delay_ms=delay_ms))

    def extend(
        self,
        topic: str,
        node: str,
        seqs: Sequence[int],
        lease_ms: int,
        *,
        lease_ids: Sequence[str] | None = None,
    ) -> Settled:
        """Move the deadlines of held leases to now + `lease_ms` (a heartbeat)."""
        return self._call(_base.settle("extend", topic, node, seqs, lease_ids, lease_ms=lease_ms))

    def work(
        self,
        topic: str,
        node: str,
        *,
        max: int = 1,
        lease_ms: int | None = None,
        nack_delay_ms: int = 0,
    ) -> Work:
        """Leased jobs pushed by the server, as an iterator (see `seglog.client.work`):
        `with job:` keeps the lease alive while the block runs, then acks, or nacks (after
        `nack_delay_ms`) and re-raises on an exception."""
        return Work(self, topic, node, max, lease_ms, nack_delay_ms)

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
    ) -> Watch:
        """Live events of one or many topics over the multiplexed SSE watch (API.md §7).

        `topics`: a name or names (each starting after `from_seq`, or at the head with
        `tail=True`), or a mapping name → from_seq (None = the head). `last_event_id` from an
        earlier watch overrides the start of the topics it names. `node` drops records
        written by these node ids (loop prevention); `topic_nodes` adds ids per topic.

        Yields `WatchRecord`, `WatchTombstone`, `WatchCaughtUp` and `WatchTopicDeleted`;
        reconnects and resumes by itself (see `ReconnectPolicy`) without losing or repeating
        a record, and ends when every watched topic is deleted. Use it as a context manager,
        or `close()` it.
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
        return Watch(self, state)

    def websocket(self) -> WebSocket:
        """A WebSocket session on `/v0/ws` (API.md §8) with this client's URL, key and
        timeout; it connects on first use (or on entering it as a context manager)."""
        return WebSocket(_ws.ws_url(self.url), ws_headers(self._http.headers), self.timeout)

    # --- metrics ----------------------------------------------------------------------------

    def metrics(self) -> str:
        return self._call(_base.metrics())

    def metrics_json(self) -> dict[str, Any]:
        return self._call(_base.metrics_json())


class Reader:
    """Iterator over `ReadRecord | Tombstone` returned by `Client.read`.

    `next_from_seq` is the resume cursor: pass it as `from_seq` to continue after the last item
    this iterator handed out. `last_page` is the most recent diff response (head, lag, …).
    """

    def __init__(
        self, client: Client, topic: str, cursor: ReadCursor, opts: dict[str, Any]
    ) -> None:
        self.topic = topic
        self.last_page: DiffResult | None = None
        self._client, self._cursor, self._opts = client, cursor, opts
        self._items = self._pages()

    @property
    def next_from_seq(self) -> int:
        return self._cursor.next_from_seq

    def _pages(self) -> Generator[ReadRecord | Tombstone, None, None]:
        cur, client = self._cursor, self._client
        while not cur.done:
            pause = cur.pause()
            if pause is not None:
                client._sleep(client._idle_delay(pause))
            page = client.diff(
                self.topic,
                cur.next_from_seq,
                limit=cur.page_limit(),
                wait_ms=cur.wait_ms,
                **self._opts,
            )
            self.last_page = page
            yield from cur.feed(page)

    def __iter__(self) -> Self:
        return self

    def __next__(self) -> ReadRecord | Tombstone:
        return next(self._items)

    def close(self) -> None:
        self._items.close()
