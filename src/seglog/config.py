"""Server settings, parsed and validated once from the `SEGLOG_*` environment (STORAGE §8).

`Settings.from_env` never raises: an unparsable or out-of-range number falls back to its
default, a boolean is true only for `true`/`1` (case-insensitive, trimmed). Problems that
must stop the server (a bad API key scope, an insecure bind) are checked later by
`seglog.http.auth` and reported as `ConfigError`. CLI flags are layered on top with
`Settings.with_overrides`.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 4000
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")
_UINT = re.compile(r"[0-9]+")


class ConfigError(Exception):
    """A configuration the server must refuse to start with; the message is shown as is."""


def default_wal_shards() -> int:
    return max(1, min(os.cpu_count() or 1, 8))


@dataclass(frozen=True, slots=True)
class Settings:
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    port_file: Path | None = None
    data_dir: Path = Path("./seglog-data")
    cold_dir: Path | None = None
    api_keys_raw: str = ""
    probe_auth: bool = False
    allow_insecure_no_auth: bool = False
    max_body_bytes: int = 67_108_864
    wal_shards: int = field(default_factory=default_wal_shards)
    segment_max_events: int = 10_000
    segment_max_bytes: int = 67_108_864
    segment_max_age_ms: int = 3_600_000
    hot_retain_segments: int = 4
    hot_retain_bytes: int = 0
    max_topics: int = 100_000
    max_routers: int = 10_000
    max_watch_sessions: int = 10_000
    max_sse_connections: int = 10_000
    max_sse_connections_per_key: int = 1000
    max_inflight_per_key: int = 1000
    max_total_bytes: int = 0
    test_min_heartbeat_ms: int | None = None
    log_level: str = "info"

    @property
    def auth_configured(self) -> bool:
        """Whether `SEGLOG_API_KEYS` holds anything besides separators and blanks."""
        return any(part.strip() for part in self.api_keys_raw.split(","))

    @staticmethod
    def from_env(env: Mapping[str, str] | None = None) -> Settings:
        """Parse the `SEGLOG_*` variables of `env` (default `os.environ`)."""
        e = os.environ if env is None else env
        d = Settings()

        def num(name: str, default: int) -> int:
            return parse_uint(e.get(name), default)

        host, port = split_host_port(
            e.get("SEGLOG_HOST", ""), parse_port(e.get("SEGLOG_PORT"), DEFAULT_PORT)
        )
        shards = num("SEGLOG_WAL_SHARDS", 0)
        return Settings(
            host=host,
            port=port,
            port_file=_path(e.get("SEGLOG_PORT_FILE")),
            data_dir=_path(e.get("SEGLOG_DATA_DIR")) or d.data_dir,
            cold_dir=_path(e.get("SEGLOG_COLD_DIR")),
            api_keys_raw=e.get("SEGLOG_API_KEYS", "").strip(),
            probe_auth=parse_bool(e.get("SEGLOG_PROBE_AUTH")),
            allow_insecure_no_auth=parse_bool(e.get("SEGLOG_ALLOW_INSECURE_NO_AUTH")),
            max_body_bytes=num("SEGLOG_MAX_BODY_BYTES", d.max_body_bytes),
            wal_shards=shards or default_wal_shards(),
            segment_max_events=max(1, num("SEGLOG_SEGMENT_MAX_EVENTS", d.segment_max_events)),
            segment_max_bytes=num("SEGLOG_SEGMENT_MAX_BYTES", d.segment_max_bytes)
            or d.segment_max_bytes,
            segment_max_age_ms=num("SEGLOG_SEGMENT_MAX_AGE_MS", d.segment_max_age_ms),
            hot_retain_segments=num("SEGLOG_HOT_RETAIN_SEGMENTS", d.hot_retain_segments),
            hot_retain_bytes=num("SEGLOG_HOT_RETAIN_BYTES", d.hot_retain_bytes),
            max_topics=num("SEGLOG_MAX_TOPICS", d.max_topics),
            max_routers=num("SEGLOG_MAX_ROUTERS", d.max_routers),
            max_watch_sessions=num("SEGLOG_MAX_WATCH_SESSIONS", d.max_watch_sessions),
            max_sse_connections=num("SEGLOG_MAX_SSE_CONNECTIONS", d.max_sse_connections),
            max_sse_connections_per_key=num(
                "SEGLOG_MAX_SSE_CONNECTIONS_PER_KEY", d.max_sse_connections_per_key
            ),
            max_inflight_per_key=num("SEGLOG_MAX_INFLIGHT_PER_KEY", d.max_inflight_per_key),
            max_total_bytes=num("SEGLOG_MAX_TOTAL_BYTES", d.max_total_bytes),
            test_min_heartbeat_ms=parse_heartbeat_floor(e.get("SEGLOG_TEST_MIN_HEARTBEAT_MS")),
            log_level=parse_log_level(e.get("SEGLOG_LOG")),
        )

    def with_overrides(self, **overrides: Any) -> Settings:
        """A copy with CLI flags applied. `None` values mean "flag not given" and are
        skipped; `str` paths become `Path`; a `host` containing `:` carries its port
        (unless `port` is given too). Unknown names raise `TypeError`."""
        kw = {k: v for k, v in overrides.items() if v is not None}
        unknown = set(kw) - {f.name for f in dataclasses.fields(self)}
        if unknown:
            raise TypeError(f"unknown settings: {', '.join(sorted(unknown))}")
        for name in ("port_file", "data_dir", "cold_dir"):
            if isinstance(kw.get(name), str):
                kw[name] = Path(kw[name])
        if "host" in kw:
            host, port = split_host_port(str(kw["host"]), self.port)
            kw["host"] = host
            kw.setdefault("port", port)
        if "log_level" in kw:
            kw["log_level"] = parse_log_level(str(kw["log_level"]))
        return dataclasses.replace(self, **kw)


def parse_bool(value: str | None) -> bool:
    return value is not None and value.strip().lower() in ("true", "1")


def parse_uint(value: str | None, default: int) -> int:
    """A non-negative decimal integer, else `default`."""
    if value is None:
        return default
    s = value.strip()
    return int(s) if _UINT.fullmatch(s) else default


def parse_port(value: str | None, default: int) -> int:
    port = parse_uint(value, default)
    return port if port <= 65535 else default


def split_host_port(value: str, default_port: int) -> tuple[str, int]:
    """`SEGLOG_HOST`: a bare host, `host:port`, `[v6]`, `[v6]:port`, or a bare IPv6
    address (several `:` and no valid trailing port). Empty ⇒ the default host."""
    v = value.strip()
    if not v:
        return DEFAULT_HOST, default_port
    if v.startswith("["):
        inner, sep, rest = v[1:].partition("]")
        if sep:
            port = parse_port(rest[1:], default_port) if rest.startswith(":") else default_port
            return inner or DEFAULT_HOST, port
    if ":" not in v:
        return v, default_port
    host, _, port_s = v.rpartition(":")
    if _UINT.fullmatch(port_s) and int(port_s) <= 65535 and ":" not in host:
        return host or DEFAULT_HOST, int(port_s)
    if v.count(":") > 1:  # a bare IPv6 literal such as `::1` or `::`
        return v, default_port
    return host or DEFAULT_HOST, default_port


def parse_heartbeat_floor(value: str | None) -> int | None:
    """The test hook: unset/unparsable ⇒ None; otherwise clamped into `[1, 1000]`."""
    n = parse_uint(value, -1)
    return None if n < 0 else min(max(n, 1), 1000)


def parse_log_level(value: str | None) -> str:
    level = (value or "").strip().lower()
    if level == "warn":
        return "warning"
    return level if level in LOG_LEVELS else "info"


def _path(value: str | None) -> Path | None:
    if value is None or not value.strip():
        return None
    return Path(value.strip())
