"""The transport-free half of both clients: request building, response decoding, retry policy.

Every endpoint is a function returning a `Call`: the `RequestSpec` to send plus the parser for
its success body. `Client` and `AsyncClient` differ only in how they send a spec and sleep, so
each public method is one line over these builders and the behaviour cannot drift between them.

Retry rules (`RetryPolicy.delay`), pure given the injected RNG:
- `429 throttled`, `503 not_ready` / `shutting_down` are refusals before anything was applied,
  so they are retried for every request, waiting `Retry-After` (capped at `4 × max_backoff`).
- A transport failure may hit after the server applied the request; it is retried only for
  idempotent requests (GET/PUT/DELETE, diff, an append with an idempotency key).
- Otherwise the wait is full-jitter exponential: `uniform(0, min(max_backoff, backoff·2^n))`.
"""

from __future__ import annotations

import math
import ssl
from collections.abc import AsyncIterable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any, Generic, Protocol, TypeVar
from urllib.parse import quote

import httpx
import msgspec
import orjson

from seglog.client._h1 import env_proxied
from seglog.client.exceptions import (
    UNKNOWN_CODE,
    SeglogConnectionError,
    SeglogHTTPError,
    SeglogProtocolError,
    SeglogTimeoutError,
    http_error,
)
from seglog.client.types import (
    Appended,
    Claimed,
    Deleted,
    DiffResult,
    Health,
    Ready,
    Settled,
    StreamAppended,
    TopicDeleted,
    TopicPage,
    TopicPut,
    TopicState,
    decode_diff,
)
from seglog.errors import ErrorCode

T = TypeVar("T")

DEFAULT_URL = "http://127.0.0.1:4000"
JSON = "application/json"


def _user_agent() -> str:
    try:
        return f"seglog-python/{metadata.version('seglog')}"
    except metadata.PackageNotFoundError:
        return "seglog-python"


USER_AGENT = _user_agent()

_RETRY_CODES = frozenset(
    {ErrorCode.THROTTLED.value, ErrorCode.NOT_READY.value, ErrorCode.SHUTTING_DOWN.value}
)
# Transport errors after which a retry is worth it (the connection broke, or never opened).
# Read/write/pool timeouts are not retried: the server is alive but slow.
_RETRY_TRANSPORT: tuple[type[Exception], ...] = (
    httpx.NetworkError,
    httpx.RemoteProtocolError,
    httpx.ConnectTimeout,
)


class RandomSource(Protocol):
    """What the retry policy needs from an RNG (`random.Random` satisfies it)."""

    def random(self) -> float: ...


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """One HTTP request, before it is bound to a client.

    `idempotent`: safe to resend after a transport failure. `retry`: whether any retry applies
    (probes answer once). `extra_timeout`: seconds added to the client timeout (long-polls).
    """

    method: str
    path: str
    params: dict[str, str | int] = field(default_factory=dict)
    body: bytes | Iterable[bytes] | AsyncIterable[bytes] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    idempotent: bool = True
    retry: bool = True
    extra_timeout: float = 0.0


class HeaderLookup(Protocol):
    def get(self, key: str, default: Any = None) -> Any: ...


class Reply(Protocol):
    """A whole response as the parsers read it: an `httpx.Response`, or the lean paths'
    lighter `_h1_wire.WireResponse`."""

    @property
    def status_code(self) -> int: ...
    @property
    def content(self) -> bytes: ...
    @property
    def headers(self) -> HeaderLookup: ...
    @property
    def is_success(self) -> bool: ...
    @property
    def reason_phrase(self) -> str: ...
    @property
    def text(self) -> str: ...


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    spec: RequestSpec
    parse: Callable[[Reply], T]


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    retries: int = 5
    backoff: float = 0.05
    max_backoff: float = 2.0

    def wait(self, attempt: int, retry_after: float | None, rng: RandomSource) -> float:
        """Seconds to wait before retry number `attempt + 1` (also used by `wait_ready`)."""
        if retry_after is not None:
            return min(retry_after, self.max_backoff * 4)
        return rng.random() * min(self.max_backoff, self.backoff * 2.0 ** min(attempt, 64))

    def delay(
        self, spec: RequestSpec, attempt: int, failure: Exception, rng: RandomSource
    ) -> float | None:
        """How long to wait before resending `spec` after `failure`, or None to give up."""
        if not spec.retry or attempt >= self.retries:
            return None
        if isinstance(failure, SeglogHTTPError):
            return self.wait(attempt, failure.retry_after, rng) if retryable(failure) else None
        if spec.idempotent and isinstance(failure, _RETRY_TRANSPORT):
            return self.wait(attempt, None, rng)
        return None


def retryable(err: SeglogHTTPError) -> bool:
    """Refusals that applied nothing: throttling and not-ready/draining (also from a proxy
    that answers 429/503 without our envelope)."""
    if err.code == UNKNOWN_CODE:
        return err.status in (429, 503)
    return err.code in _RETRY_CODES


# --- decoding ---------------------------------------------------------------------------------


def parse_retry_after(value: str | None) -> float | None:
    """`Retry-After` in seconds; HTTP-dates and garbage are ignored (None)."""
    if value is None:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def error_from_response(resp: Reply) -> SeglogHTTPError:
    """Map a non-2xx response to its exception (API.md §0.5 envelope)."""
    retry_after = parse_retry_after(resp.headers.get("retry-after"))
    try:
        body = orjson.loads(resp.content)
    except orjson.JSONDecodeError:
        body = None
    err = body.get("error") if isinstance(body, dict) else None
    if not isinstance(err, dict):
        snippet = resp.content[:200].decode("utf-8", "replace").strip()
        message = f"HTTP {resp.status_code} {resp.reason_phrase}: {snippet}".rstrip(": ")
        return http_error(resp.status_code, None, message, None, retry_after)
    code = err.get("code")
    detail = err.get("detail")
    return http_error(
        resp.status_code,
        code if isinstance(code, str) else None,
        str(err.get("message") or ""),
        detail if isinstance(detail, dict) else None,
        retry_after,
    )


def transport_error(exc: httpx.TransportError, spec: RequestSpec) -> SeglogConnectionError:
    kind = SeglogTimeoutError if isinstance(exc, httpx.TimeoutException) else SeglogConnectionError
    return kind(f"{spec.method} {spec.path}: {type(exc).__name__}: {exc}")


def json_body(resp: Reply) -> Any:
    try:
        return orjson.loads(resp.content)
    except orjson.JSONDecodeError as exc:
        raise SeglogProtocolError(f"HTTP {resp.status_code}: body is not JSON: {exc}") from exc


def _parser(from_json: Callable[[Mapping[str, Any]], T]) -> Callable[[Reply], T]:
    def parse(resp: Reply) -> T:
        obj = json_body(resp)
        if not isinstance(obj, dict):
            raise SeglogProtocolError(f"HTTP {resp.status_code}: expected a JSON object")
        try:
            return from_json(obj)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise SeglogProtocolError(
                f"HTTP {resp.status_code}: unexpected response shape ({type(exc).__name__}: {exc})"
            ) from exc

    return parse


def _dict(obj: Mapping[str, Any]) -> dict[str, Any]:
    return dict(obj)


def _text(resp: Reply) -> str:
    return resp.text


# --- request building -------------------------------------------------------------------------


def segment(name: str) -> str:
    """One URL path segment: everything but unreserved characters is percent-encoded, and the
    dot-segments `.`/`..` are escaped so no name can climb out of its route."""
    if not name:
        raise ValueError("a topic name must be a non-empty string")
    if name in (".", ".."):
        return name.replace(".", "%2E")
    return quote(name, safe="")


def topic_path(topic: str, suffix: str = "") -> str:
    return f"/v0/topics/{segment(topic)}{suffix}"


def _json(body: Mapping[str, Any]) -> tuple[bytes, dict[str, str]]:
    return orjson.dumps(body), {"Content-Type": JSON}


def _post(path: str, body: Mapping[str, Any], **kw: Any) -> RequestSpec:
    content, headers = _json(body)
    return RequestSpec("POST", path, body=content, headers=headers, **kw)


def _nodes(node: str | Sequence[str]) -> str | list[str]:
    return node if isinstance(node, str) else list(node)


def health() -> Call[Health]:
    return Call(RequestSpec("GET", "/v0/health"), _parser(Health.from_json))


def ready(*, retry: bool = False) -> Call[Ready]:
    return Call(RequestSpec("GET", "/v0/ready", retry=retry), _parser(Ready.from_json))


def put_topic(topic: str, config: Mapping[str, Any] | None) -> Call[TopicPut]:
    content, headers = _json(dict(config or {}))
    spec = RequestSpec("PUT", topic_path(topic), body=content, headers=headers)
    return Call(spec, _parser(TopicPut.from_json))


def get_topic(topic: str, touch: bool) -> Call[TopicState]:
    params: dict[str, str | int] = {} if touch else {"touch": "false"}
    return Call(RequestSpec("GET", topic_path(topic), params), _parser(TopicState.from_json))


def list_topics(prefix: str | None, page_size: int | None, cursor: str | None) -> Call[TopicPage]:
    params: dict[str, str | int] = {}
    if prefix is not None:
        params["prefix"] = prefix
    if page_size is not None:
        params["page_size"] = page_size
    if cursor is not None:
        params["cursor"] = cursor
    return Call(RequestSpec("GET", "/v0/topics", params), _parser(TopicPage.from_json))


def delete_topic(topic: str, if_empty: bool) -> Call[TopicDeleted]:
    params: dict[str, str | int] = {"if_empty": "true"} if if_empty else {}
    spec = RequestSpec("DELETE", topic_path(topic), params)
    return Call(spec, _parser(TopicDeleted.from_json))


def _records_json(records: Sequence[Mapping[str, Any]]) -> bytes:
    """The records array as JSON. A list (or tuple) of plain dicts, the common case, is
    encoded as it is: the checks and copies below cost more than the encoding (~0.4 µs a
    record)."""
    if type(records) in (list, tuple) and all(type(r) is dict for r in records):
        return orjson.dumps(records)
    return orjson.dumps(_records_as_dicts(records))


def _records_as_dicts(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    # dict("str") fails with "dictionary update sequence element #0", which names neither
    # the record nor the fix; say which record is wrong and what a record must be.
    if isinstance(records, (str, bytes, Mapping)):
        raise TypeError(
            f"append() takes a sequence of records (JSON objects), got {type(records).__name__}"
        )
    out: list[dict[str, Any]] = []
    for i, r in enumerate(records):
        if not isinstance(r, Mapping):
            raise TypeError(
                f"record {i} is of type {type(r).__name__}, not a record object (a dict "
                f'with a "data" field); wrap plain values, e.g. {{"data": ...}}'
            )
        out.append(dict(r))
    return out


def append(
    topic: str,
    records: Sequence[Mapping[str, Any]],
    *,
    node: str | None,
    idempotency_key: str | None,
    create: bool | None,
    config: Mapping[str, Any] | None,
    return_seqs: bool,
) -> Call[Appended]:
    return append_encoded(
        topic,
        _records_json(records),
        node=node,
        idempotency_key=idempotency_key,
        create=create,
        config=config,
        return_seqs=return_seqs,
    )


def append_encoded(
    topic: str,
    records_json: bytes,
    *,
    node: str | None,
    idempotency_key: str | None,
    create: bool | None,
    config: Mapping[str, Any] | None,
    return_seqs: bool,
) -> Call[Appended]:
    """`append` of records already encoded as one JSON array (API §3 record objects)."""
    rest: dict[str, Any] = {}
    if node is not None:
        rest["node"] = node
    if idempotency_key is not None:
        rest["idempotency_key"] = idempotency_key
    if create is not None:
        rest["create"] = create
    if config is not None:
        rest["config"] = dict(config)
    tail = b"," + orjson.dumps(rest)[1:] if rest else b"}"
    params: dict[str, str | int] = {} if return_seqs else {"return_seqs": "false"}
    # Only a keyed append is safe to resend after a broken connection: a keyless one may
    # already be committed, and resending it would append the records twice.
    spec = RequestSpec(
        "POST",
        topic_path(topic),
        body=b'{"records":' + records_json + tail,
        headers={"Content-Type": JSON},
        params=params,
        idempotent=idempotency_key is not None,
    )
    return Call(spec, _parser(Appended.from_json))


NDJSON = "application/x-ndjson"
NDJSON_BUFFER_BYTES = 64 * 1024


def ndjson_line(i: int, rec: Any) -> bytes:
    """Record `i` (an API §3 record dict, or bytes already holding one as JSON) as one
    NDJSON line."""
    if isinstance(rec, bytes | bytearray | memoryview):
        line = bytes(rec)
        if b"\n" in line:
            raise ValueError(f"record {i}: an NDJSON record must be one line")
        return line + b"\n"
    return orjson.dumps(rec, option=orjson.OPT_APPEND_NEWLINE)


def ndjson_lines(records: Iterable[Any], buffer_bytes: int) -> Iterator[bytes]:
    """The records as NDJSON, sent in pieces of at least `buffer_bytes` (0: each record
    as it comes) as the iterable yields them; the rest when it ends."""
    lines: list[bytes] = []
    size = 0
    dumps, newline = orjson.dumps, orjson.OPT_APPEND_NEWLINE
    for i, rec in enumerate(records):
        # a plain dict (the common record) straight to orjson; anything else as it says
        line = dumps(rec, option=newline) if type(rec) is dict else ndjson_line(i, rec)
        lines.append(line)
        size += len(line)
        if size >= buffer_bytes:
            yield b"".join(lines)
            lines.clear()
            size = 0
    if lines:
        yield b"".join(lines)


def append_stream(
    topic: str,
    body: Iterable[bytes] | AsyncIterable[bytes],
    *,
    node: str | None,
    create: bool | None,
) -> Call[StreamAppended]:
    """The streaming append (API §13.2) of an NDJSON body. Never resent: chunks before a
    failure stay committed, and the body is consumed as it is sent."""
    params: dict[str, str | int] = {}
    if node is not None:
        params["node"] = node
    if create is not None:
        params["create"] = "true" if create else "false"
    spec = RequestSpec(
        "POST",
        topic_path(topic),
        body=body,
        headers={"Content-Type": NDJSON},
        params=params,
        idempotent=False,
        retry=False,
    )
    return Call(spec, _parse_stream_appended)


def _parse_stream_appended(resp: Reply) -> StreamAppended:
    return _parser(lambda obj: StreamAppended.from_response(obj, resp.status_code))(resp)


def record(
    data: Any, *, tag: str | None = None, node: str | None = None, meta: Any = None
) -> dict[str, Any]:
    """A write record (API.md §3): plain `tag`/`node` keys, optional ones omitted."""
    rec: dict[str, Any] = {"data": data}
    if tag is not None:
        rec["tag"] = tag
    if node is not None:
        rec["node"] = node
    if meta is not None:
        rec["meta"] = meta
    return rec


def diff_body(
    from_seq: int,
    limit: int | None,
    node: str | Sequence[str] | None,
    include_tags: bool,
    include_meta: bool,
    max_batch_bytes: int,
) -> dict[str, Any]:
    """The body of a diff request (API §4.1), shared by the JSON and the columnar form."""
    body: dict[str, Any] = {
        "from_seq": from_seq,
        "include_tags": include_tags,
        "include_meta": include_meta,
        "max_batch_bytes": max_batch_bytes,
    }
    if limit is not None:
        body["limit"] = limit
    if node is not None:
        body["node"] = _nodes(node)
    return body


def diff(
    topic: str,
    from_seq: int,
    *,
    limit: int | None,
    node: str | Sequence[str] | None,
    include_tags: bool,
    include_meta: bool,
    wait_ms: int,
    max_batch_bytes: int,
) -> Call[DiffResult]:
    body = diff_body(from_seq, limit, node, include_tags, include_meta, max_batch_bytes)
    body["wait_ms"] = wait_ms
    # The server may hold a long-poll for up to wait_ms (≤ 30 s) before it answers.
    spec = _post(topic_path(topic, "/diff"), body, extra_timeout=max(wait_ms, 0) / 1000)
    return Call(spec, _parse_diff)


def _parse_diff(resp: Reply) -> DiffResult:
    try:
        return decode_diff(resp.content)
    except msgspec.DecodeError as exc:  # ValidationError is a DecodeError
        raise SeglogProtocolError(
            f"HTTP {resp.status_code}: unexpected diff response ({type(exc).__name__}: {exc})"
        ) from exc
    except (KeyError, TypeError, ValueError) as exc:  # the tombstone's fields
        raise SeglogProtocolError(
            f"HTTP {resp.status_code}: unexpected response shape ({type(exc).__name__}: {exc})"
        ) from exc


def delete_records(
    topic: str, before_seq: int | None, match: str | Sequence[str] | None
) -> Call[Deleted]:
    body: dict[str, Any] = {}
    if before_seq is not None:
        body["before_seq"] = before_seq
    if match is not None:
        body["match"] = _nodes(match)
    spec = _post(topic_path(topic, "/delete"), body, idempotent=False)
    return Call(spec, _parser(Deleted.from_json))


def claim(topic: str, node: str, max_jobs: int, lease_ms: int | None) -> Call[Claimed]:
    body: dict[str, Any] = {"node": node, "max": max_jobs}
    if lease_ms is not None:
        body["lease_ms"] = lease_ms
    # Not resent after a transport failure: the first attempt may have leased jobs (they
    # would only expire, but a retry would lease more).
    spec = _post(topic_path(topic, "/claim"), body, idempotent=False)
    return Call(spec, _parser(Claimed.from_json))


def settle(
    verb: str,
    topic: str,
    node: str,
    seqs: Sequence[int],
    lease_ids: Sequence[str] | None,
    **extra: int,
) -> Call[Settled]:
    """ack / nack / extend. Resending is harmless (a second ack of a seq is skipped), so
    they count as idempotent for the retry policy."""
    body: dict[str, Any] = {"node": node, "seqs": list(seqs), **extra}
    if lease_ids:
        body["lease_ids"] = list(lease_ids)
    return Call(_post(topic_path(topic, f"/{verb}"), body), _parser(Settled.from_json))


def metrics() -> Call[str]:
    spec = RequestSpec("GET", "/v0/metrics", headers={"Accept": "text/plain"})
    return Call(spec, _text)


def metrics_json() -> Call[dict[str, Any]]:
    return Call(RequestSpec("GET", "/v0/metrics", headers={"Accept": JSON}), _parser(_dict))


# --- shared client state ----------------------------------------------------------------------


def default_headers(api_key: str | None) -> dict[str, str]:
    headers = {"Accept": JSON, "User-Agent": USER_AGENT}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return headers


def tls_verify(url: str) -> ssl.SSLContext | bool:
    """httpx's `verify` for a client of `url`. httpx's default (True) loads the CA bundle
    into a fresh SSL context for every client, ~17 ms: most of what a short-lived client (a
    CLI command, a Spark task) costs. A cleartext URL's client has no use for TLS — its
    requests go to paths under it and redirects are not followed — so it gets an empty
    context that trusts no CA: TLS, were it ever attempted (say, to an absolute `https://`
    stream URL a server handed out), fails verification rather than passing unchecked. With a proxy configured in the environment the default stays: a client
    whose traffic goes elsewhere is not one this reasoning covers."""
    if httpx.URL(url).scheme != "http" or env_proxied():
        return True
    return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)


def h2c_wanted(url: str, http2: bool) -> bool:
    """Cleartext HTTP/2 must be spoken with prior knowledge (httpx `http1=False`)."""
    return http2 and httpx.URL(url).scheme == "http"


class BaseClient:
    """Configuration shared by both clients; owns no I/O."""

    def __init__(
        self,
        url: str,
        *,
        timeout: float,
        retries: int,
        backoff: float,
        max_backoff: float,
        rng: RandomSource | None,
    ) -> None:
        if retries < 0 or backoff < 0 or max_backoff < 0 or timeout <= 0:
            raise ValueError("timeout must be > 0; retries, backoff, max_backoff >= 0")
        self.url = url
        self.timeout = timeout
        self.policy = RetryPolicy(retries, backoff, max_backoff)
        if rng is None:
            import random

            rng = random.Random()
        self._rng: RandomSource = rng

    def _build(self, http: httpx.Client | httpx.AsyncClient, spec: RequestSpec) -> httpx.Request:
        return http.build_request(
            spec.method,
            spec.path,
            params=spec.params or None,
            content=spec.body,
            headers=spec.headers or None,
            timeout=httpx.Timeout(self.timeout + spec.extra_timeout),
        )

    def _idle_delay(self, attempt: int) -> float:
        return self.policy.wait(attempt, None, self._rng)

    def _failure(self, exc: httpx.TransportError, spec: RequestSpec, attempt: int) -> float:
        """Delay before retrying a transport failure, or raise it as `SeglogConnectionError`."""
        delay = self.policy.delay(spec, attempt, exc, self._rng)
        if delay is None:
            raise transport_error(exc, spec) from exc
        return delay

    def _rejected(self, resp: Reply, spec: RequestSpec, attempt: int) -> float:
        """Delay before retrying an error response, or raise its typed exception."""
        err = error_from_response(resp)
        delay = self.policy.delay(spec, attempt, err, self._rng)
        if delay is None:
            raise err
        return delay

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"
