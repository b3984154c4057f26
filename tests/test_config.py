"""`Settings.from_env` (STORAGE §8) and CLI overrides."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from seglog.config import Settings, default_wal_shards, split_host_port

CAPS = {
    "SEGLOG_MAX_TOPICS": ("max_topics", 100_000),
    "SEGLOG_MAX_ROUTERS": ("max_routers", 10_000),
    "SEGLOG_MAX_WATCH_SESSIONS": ("max_watch_sessions", 10_000),
    "SEGLOG_MAX_SSE_CONNECTIONS": ("max_sse_connections", 10_000),
    "SEGLOG_MAX_SSE_CONNECTIONS_PER_KEY": ("max_sse_connections_per_key", 1000),
    "SEGLOG_MAX_INFLIGHT_PER_KEY": ("max_inflight_per_key", 1000),
    "SEGLOG_MAX_TOTAL_BYTES": ("max_total_bytes", 0),
    "SEGLOG_MAX_BODY_BYTES": ("max_body_bytes", 67_108_864),
    "SEGLOG_SEGMENT_MAX_AGE_MS": ("segment_max_age_ms", 3_600_000),
    "SEGLOG_HOT_RETAIN_SEGMENTS": ("hot_retain_segments", 4),
    "SEGLOG_HOT_RETAIN_BYTES": ("hot_retain_bytes", 0),
}


def test_defaults() -> None:
    s = Settings.from_env({})
    assert (s.host, s.port) == ("127.0.0.1", 4000)
    assert s.port_file is None and s.cold_dir is None
    assert s.data_dir == Path("./seglog-data")
    assert s.api_keys_raw == "" and not s.auth_configured
    assert s.probe_auth is False and s.allow_insecure_no_auth is False
    assert s.wal_shards == min(os.cpu_count() or 1, 8) == default_wal_shards()
    assert s.segment_max_events == 10_000 and s.segment_max_bytes == 67_108_864
    assert s.test_min_heartbeat_ms is None
    assert s.log_level == "info"
    for attr, default in CAPS.values():
        assert getattr(s, attr) == default
    assert s == Settings()


def test_every_variable() -> None:
    env = {
        "SEGLOG_HOST": "0.0.0.0",
        "SEGLOG_PORT": "4100",
        "SEGLOG_PORT_FILE": "/tmp/port",
        "SEGLOG_DATA_DIR": "/var/seglog",
        "SEGLOG_COLD_DIR": "/mnt/cold",
        "SEGLOG_API_KEYS": " k1:rw ",
        "SEGLOG_PROBE_AUTH": "true",
        "SEGLOG_ALLOW_INSECURE_NO_AUTH": "1",
        "SEGLOG_WAL_SHARDS": "3",
        "SEGLOG_SEGMENT_MAX_EVENTS": "50",
        "SEGLOG_SEGMENT_MAX_BYTES": "4096",
        "SEGLOG_TEST_MIN_HEARTBEAT_MS": "20",
        "SEGLOG_LOG": "DEBUG",
        **{var: "7" for var in CAPS},
    }
    s = Settings.from_env(env)
    assert (s.host, s.port) == ("0.0.0.0", 4100)
    assert s.port_file == Path("/tmp/port")
    assert s.data_dir == Path("/var/seglog") and s.cold_dir == Path("/mnt/cold")
    assert s.api_keys_raw == "k1:rw" and s.auth_configured
    assert s.probe_auth and s.allow_insecure_no_auth
    assert s.wal_shards == 3
    assert s.segment_max_events == 50 and s.segment_max_bytes == 4096
    assert s.test_min_heartbeat_ms == 20
    assert s.log_level == "debug"
    for attr, _ in CAPS.values():
        assert getattr(s, attr) == 7


@pytest.mark.parametrize("value", ["abc", "-5", "1.5", "", " ", "0x10", "1e3", "½"])
def test_unparsable_numbers_fall_back(value: str) -> None:
    s = Settings.from_env({var: value for var in CAPS} | {"SEGLOG_PORT": value})
    assert s.port == 4000
    for attr, default in CAPS.values():
        assert getattr(s, attr) == default


def test_zero_disables_caps_and_whitespace_is_trimmed() -> None:
    s = Settings.from_env({"SEGLOG_MAX_TOPICS": "0", "SEGLOG_MAX_ROUTERS": " 12 "})
    assert s.max_topics == 0 and s.max_routers == 12


@pytest.mark.parametrize(
    ("value", "out"),
    [
        ("true", True),
        ("1", True),
        ("TRUE", True),
        (" true ", True),
        ("false", False),
        ("0", False),
        ("yes", False),
        ("", False),
        ("2", False),
    ],
)
def test_booleans(value: str, out: bool) -> None:
    s = Settings.from_env({"SEGLOG_PROBE_AUTH": value, "SEGLOG_ALLOW_INSECURE_NO_AUTH": value})
    assert s.probe_auth is out and s.allow_insecure_no_auth is out


@pytest.mark.parametrize(
    ("env", "host", "port"),
    [
        ({"SEGLOG_HOST": "0.0.0.0:8080"}, "0.0.0.0", 8080),
        ({"SEGLOG_HOST": "0.0.0.0:8080", "SEGLOG_PORT": "9"}, "0.0.0.0", 8080),
        ({"SEGLOG_HOST": "example.org", "SEGLOG_PORT": "9"}, "example.org", 9),
        ({"SEGLOG_PORT": "0"}, "127.0.0.1", 0),
        ({"SEGLOG_PORT": "70000"}, "127.0.0.1", 4000),
        ({"SEGLOG_HOST": "[::1]:4005"}, "::1", 4005),
        ({"SEGLOG_HOST": "[::]"}, "::", 4000),
        ({"SEGLOG_HOST": "::1"}, "::1", 4000),
        ({"SEGLOG_HOST": "::"}, "::", 4000),
        ({"SEGLOG_HOST": ":4006"}, "127.0.0.1", 4006),
        ({"SEGLOG_HOST": "localhost:bad"}, "localhost", 4000),
        ({"SEGLOG_HOST": ""}, "127.0.0.1", 4000),
    ],
)
def test_host_and_port(env: dict[str, str], host: str, port: int) -> None:
    s = Settings.from_env(env)
    assert (s.host, s.port) == (host, port)


def test_split_host_port_direct() -> None:
    assert split_host_port("h:1", 5) == ("h", 1)
    assert split_host_port("h", 5) == ("h", 5)


@pytest.mark.parametrize("value", ["0", "abc", "-1", ""])
def test_wal_shards_default(value: str) -> None:
    assert Settings.from_env({"SEGLOG_WAL_SHARDS": value}).wal_shards == default_wal_shards()
    assert 1 <= default_wal_shards() <= 8


def test_segment_minimums() -> None:
    s = Settings.from_env({"SEGLOG_SEGMENT_MAX_EVENTS": "0", "SEGLOG_SEGMENT_MAX_BYTES": "0"})
    assert s.segment_max_events == 1
    assert s.segment_max_bytes == 67_108_864


@pytest.mark.parametrize(
    ("value", "out"),
    [(None, None), ("", None), ("x", None), ("0", 1), ("1", 1), ("250", 250), ("5000", 1000)],
)
def test_heartbeat_floor(value: str | None, out: int | None) -> None:
    env = {} if value is None else {"SEGLOG_TEST_MIN_HEARTBEAT_MS": value}
    assert Settings.from_env(env).test_min_heartbeat_ms == out


@pytest.mark.parametrize(
    ("value", "out"), [("warn", "warning"), ("ERROR", "error"), ("loud", "info"), ("", "info")]
)
def test_log_level(value: str, out: str) -> None:
    assert Settings.from_env({"SEGLOG_LOG": value}).log_level == out


def test_empty_paths_are_unset() -> None:
    s = Settings.from_env({"SEGLOG_DATA_DIR": " ", "SEGLOG_COLD_DIR": "", "SEGLOG_PORT_FILE": ""})
    assert s.data_dir == Path("./seglog-data") and s.cold_dir is None and s.port_file is None


def test_from_env_defaults_to_os_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SEGLOG_MAX_ROUTERS", "42")
    assert Settings.from_env().max_routers == 42


def test_with_overrides() -> None:
    base = Settings.from_env({"SEGLOG_PORT": "4100"})
    s = base.with_overrides(data_dir="/d", port=None, max_topics=5, log_level="WARN")
    assert s.data_dir == Path("/d") and s.port == 4100 and s.max_topics == 5
    assert s.log_level == "warning"
    assert base.data_dir == Path("./seglog-data")  # frozen original untouched
    assert base.with_overrides(host="0.0.0.0:81").port == 81
    assert base.with_overrides(host="0.0.0.0:81", port=82).port == 82
    assert base.with_overrides(host="::1").host == "::1"
    with pytest.raises(TypeError):
        base.with_overrides(bogus=1)
    with pytest.raises(AttributeError):
        base.port = 1  # type: ignore[misc]
