"""API keys, bearer parsing and the startup guard (API §1)."""

from __future__ import annotations

import hashlib
import hmac
import socket
from typing import Any

import pytest

from seglog.config import ConfigError, Settings
from seglog.http.auth import (
    FULL_ACCESS,
    KeyRing,
    Principal,
    Scope,
    bearer_token,
    check_startup_guard,
    is_loopback_host,
)

ALL = frozenset(Scope)
_real_getaddrinfo = socket.getaddrinfo


@pytest.fixture(autouse=True)
def no_dns_for_invalid(monkeypatch: pytest.MonkeyPatch) -> None:
    """`.invalid` names fail like NXDOMAIN without waiting on a resolver."""

    def fake(host: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(host, str) and host.endswith(".invalid"):
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return _real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", fake)


def only(raw: str) -> Principal:
    ring = KeyRing.parse(raw)
    assert len(ring) == 1
    token = raw.strip().split(":", 1)[0].strip()
    p = ring.authenticate(token)
    assert p is not None
    return p


@pytest.mark.parametrize(
    ("entry", "scopes", "prefixes"),
    [
        ("k1", ALL, ()),
        ("k1:r", {Scope.READ}, ()),
        ("k1:read+WRITE", {Scope.READ, Scope.WRITE}, ()),
        ("k1:rw", {Scope.READ, Scope.WRITE}, ()),
        ("k1:del", {Scope.DELETE}, ()),
        ("k1:d+a", {Scope.DELETE, Scope.ADMIN}, ()),
        ("k1:Delete+Admin+w", {Scope.DELETE, Scope.ADMIN, Scope.WRITE}, ()),
        ("k1:", ALL, ()),
        ("k1::", ALL, ()),
        ("k1::jobs.", ALL, ("jobs.",)),
        ("k1:r:a|b", {Scope.READ}, ("a", "b")),
        ("k1:rw:tenant42:|shared.", {Scope.READ, Scope.WRITE}, ("tenant42:", "shared.")),
        ("k1:r: a: | |b:c:d ", {Scope.READ}, ("a:", "b:c:d")),
        ("k1:r:||", {Scope.READ}, ()),
    ],
)
def test_entry_forms(entry: str, scopes: set[Scope], prefixes: tuple[str, ...]) -> None:
    p = only(entry)
    assert p.scopes == frozenset(scopes)
    assert p.prefixes == prefixes


def test_entries_are_trimmed_and_empty_skipped() -> None:
    ring = KeyRing.parse(" a:r ,, ,b:w,\n c ")
    assert len(ring) == 3
    assert ring.authenticate("a") is not None and ring.authenticate("a").scopes == {Scope.READ}  # type: ignore[union-attr]
    assert ring.authenticate("b").scopes == {Scope.WRITE}  # type: ignore[union-attr]
    assert ring.authenticate("c").scopes == ALL  # type: ignore[union-attr]
    assert ring.authenticate("d") is None
    assert ring.authenticate("") is None
    assert ring.authenticate(None) is None


@pytest.mark.parametrize("entry", ["k:x", "k:read+bogus", "k:r++w", "k:+", "k:*", ":rw", "k:rw,:r"])
def test_bad_entries_refuse_to_start(entry: str) -> None:
    with pytest.raises(ConfigError):
        KeyRing.parse(entry)


def test_disabled_ring_is_full_access() -> None:
    for raw in (None, "", " , ,"):
        ring = KeyRing.parse(raw)
        assert not ring.enabled
        assert ring.authenticate(None) is FULL_ACCESS
        assert ring.authenticate("anything") is FULL_ACCESS
    assert FULL_ACCESS.scopes == ALL and FULL_ACCESS.prefixes == ()
    assert KeyRing.parse("").full_access is FULL_ACCESS


def test_keys_stored_as_digests_only() -> None:
    ring = KeyRing.parse("s3cret-key:rw:tenant")
    p = ring.authenticate("s3cret-key")
    assert p is not None
    digest = hashlib.sha256(b"s3cret-key").hexdigest()
    assert digest.startswith(p.key_id) and len(p.key_id) >= 12
    assert "s3cret-key" not in repr(p)
    assert "s3cret-key" not in repr(ring._entries)


def test_first_duplicate_wins_and_key_ids_differ() -> None:
    ring = KeyRing.parse("k:r,k:w,j")
    assert ring.authenticate("k").scopes == {Scope.READ}  # type: ignore[union-attr]
    assert ring.authenticate("k").key_id != ring.authenticate("j").key_id  # type: ignore[union-attr]


def test_compare_digest_is_used_over_every_digest(monkeypatch: pytest.MonkeyPatch) -> None:
    ring = KeyRing.parse(",".join(f"key{i}" for i in range(7)))
    calls: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a: Any, b: Any) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)
    for token in ("key0", "key6", "nope"):
        calls.clear()
        ring.authenticate(token)
        assert len(calls) == 7  # no early exit, whether the match is first, last or absent
        presented = hashlib.sha256(token.encode()).digest()
        assert all(b == presented for _, b in calls)
        assert len({a for a, _ in calls}) == 7


def test_principal_allows_and_has() -> None:
    p = Principal("id", frozenset({Scope.READ}), ("tenant42:", "shared."))
    assert p.has(Scope.READ) and not p.has(Scope.WRITE)
    assert p.allows("tenant42:jobs") and p.allows("shared.x") and p.allows("tenant42:")
    assert not p.allows("tenant4") and not p.allows("other") and not p.allows("Shared.x")
    assert Principal("id", frozenset(), ()).allows("anything")


@pytest.mark.parametrize(
    ("header", "token"),
    [
        ("Bearer abc", "abc"),
        ("Bearer   abc  ", "abc"),
        ("Bearer a b", "a b"),
        ("Bearer ", None),
        ("Bearer", None),
        ("bearer abc", None),
        ("BEARER abc", None),
        ("Basic abc", None),
        ("Bearerabc", None),
        (" Bearer abc", None),
        ("", None),
        (None, None),
    ],
)
def test_bearer_token(header: str | None, token: str | None) -> None:
    assert bearer_token(header) == token


# --------------------------------------------------------------------------- startup guard


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.0.0.5", True),
        ("::1", True),
        ("[::1]", True),
        ("::ffff:127.0.0.1", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("[::]", False),
        ("", False),
        ("10.1.2.3", False),
        ("192.168.0.10", False),
        ("2001:db8::1", False),
        ("no-such-host.invalid", False),
    ],
)
def test_is_loopback_host(host: str, loopback: bool) -> None:
    assert is_loopback_host(host) is loopback


def test_name_resolving_to_mixed_addresses_is_not_loopback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def fake(host: str, *_a: Any, **_k: Any) -> list[Any]:
        return [
            (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", 0)),
            (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.0.0.1", 0)),
        ]

    monkeypatch.setattr(socket, "getaddrinfo", fake)
    assert is_loopback_host("mixed.example") is False


def test_unresolvable_name_is_not_loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*_a: Any, **_k: Any) -> list[Any]:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", fail)
    assert is_loopback_host("localhost-ish") is False


@pytest.mark.parametrize(
    ("host", "keys", "insecure", "ok"),
    [
        ("127.0.0.1", "", False, True),
        ("127.0.0.5", "", False, True),
        ("localhost", "", False, True),
        ("::1", "", False, True),
        ("0.0.0.0", "", False, False),
        ("::", "", False, False),
        ("10.1.2.3", "", False, False),
        ("no-such-host.invalid", "", False, False),
        ("0.0.0.0", "k", False, True),
        ("::", "", True, True),
        ("no-such-host.invalid", "k:r", False, True),
    ],
)
def test_startup_guard(host: str, keys: str, insecure: bool, ok: bool) -> None:
    s = Settings(host=host, api_keys_raw=keys, allow_insecure_no_auth=insecure)
    ring = KeyRing.parse(keys)
    if ok:
        check_startup_guard(s, ring)
    else:
        with pytest.raises(ConfigError, match="SEGLOG_ALLOW_INSECURE_NO_AUTH"):
            check_startup_guard(s, ring)


def test_guard_from_env() -> None:
    s = Settings.from_env({"SEGLOG_HOST": "0.0.0.0:4001", "SEGLOG_ALLOW_INSECURE_NO_AUTH": "1"})
    check_startup_guard(s, KeyRing.parse(s.api_keys_raw))
    s = Settings.from_env({"SEGLOG_HOST": "0.0.0.0:4001"})
    with pytest.raises(ConfigError):
        check_startup_guard(s, KeyRing.parse(s.api_keys_raw))
