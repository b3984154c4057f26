"""API keys, principals and the startup guard (API §1).

Keys come from `SEGLOG_API_KEYS` and are kept only as SHA-256 digests. A presented token is
hashed once and compared with `hmac.compare_digest` against *every* stored digest, with no
early exit, so neither the match position nor the number of keys leaks through timing.
Tokens are never logged; a `Principal` is identified by `key_id`, a prefix of the digest.

Entry grammar (the secret is everything before the first `:`):

    key                      all scopes, any name
    key:scopes               listed scopes, any name
    key:scopes:prefixes      listed scopes, names restricted (prefixes may contain `:`)
    key::prefixes            all scopes, names restricted
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import socket
from dataclasses import dataclass
from enum import StrEnum

from seglog.config import ConfigError, Settings

__all__ = [
    "FULL_ACCESS",
    "ConfigError",
    "KeyRing",
    "Principal",
    "Scope",
    "bearer_token",
    "check_startup_guard",
    "is_loopback_host",
    "parse_scopes",
]

KEY_ID_HEX = 16


class Scope(StrEnum):
    READ = "read"
    WRITE = "write"
    DELETE = "delete"
    ADMIN = "admin"


ALL_SCOPES: frozenset[Scope] = frozenset(Scope)

_SCOPE_TOKENS: dict[str, frozenset[Scope]] = {
    "read": frozenset({Scope.READ}),
    "r": frozenset({Scope.READ}),
    "write": frozenset({Scope.WRITE}),
    "w": frozenset({Scope.WRITE}),
    "delete": frozenset({Scope.DELETE}),
    "del": frozenset({Scope.DELETE}),
    "d": frozenset({Scope.DELETE}),
    "admin": frozenset({Scope.ADMIN}),
    "a": frozenset({Scope.ADMIN}),
    "rw": frozenset({Scope.READ, Scope.WRITE}),
}


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a request acts as. `prefixes` empty = every name is allowed."""

    key_id: str
    scopes: frozenset[Scope]
    prefixes: tuple[str, ...] = ()

    def has(self, scope: Scope) -> bool:
        return scope in self.scopes

    def allows(self, name: str) -> bool:
        # str prefix == UTF-8 byte prefix: UTF-8 is prefix-free per code point.
        return not self.prefixes or any(name.startswith(p) for p in self.prefixes)


FULL_ACCESS = Principal(key_id="full-access", scopes=ALL_SCOPES, prefixes=())
"""The principal of every request when auth is disabled."""


def parse_scopes(field: str) -> frozenset[Scope]:
    """`+`-separated, case-insensitive scope tokens; an empty field means all scopes."""
    if not field.strip():
        return ALL_SCOPES
    scopes: set[Scope] = set()
    for raw in field.split("+"):
        token = raw.strip().lower()
        if token not in _SCOPE_TOKENS:
            raise ConfigError(
                f"SEGLOG_API_KEYS: unknown scope {raw.strip()!r} "
                "(expected read/r, write/w, delete/del/d, admin/a or rw, joined with '+')"
            )
        scopes |= _SCOPE_TOKENS[token]
    return frozenset(scopes)


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


@dataclass(frozen=True, slots=True)
class _Entry:
    digest: bytes
    principal: Principal


class KeyRing:
    """The configured keys. Immutable after `parse`; safe to share across threads."""

    __slots__ = ("_entries",)

    def __init__(self, entries: tuple[_Entry, ...] = ()) -> None:
        self._entries = entries

    @staticmethod
    def parse(raw: str | None) -> KeyRing:
        """Parse `SEGLOG_API_KEYS`; a bad entry raises `ConfigError` (refuse to start).
        When the same secret appears twice, the first entry wins."""
        entries: list[_Entry] = []
        for n, item in enumerate((raw or "").split(","), start=1):
            entry = item.strip()
            if not entry:
                continue
            secret, _, rest = entry.partition(":")
            secret = secret.strip()
            if not secret:
                raise ConfigError(f"SEGLOG_API_KEYS: entry {n} has an empty key")
            scopes_field, _, prefixes_field = rest.partition(":")
            prefixes = tuple(p.strip() for p in prefixes_field.split("|") if p.strip())
            digest = _digest(secret)
            principal = Principal(digest.hex()[:KEY_ID_HEX], parse_scopes(scopes_field), prefixes)
            entries.append(_Entry(digest, principal))
        return KeyRing(tuple(entries))

    @property
    def enabled(self) -> bool:
        return bool(self._entries)

    @property
    def full_access(self) -> Principal:
        return FULL_ACCESS

    def __len__(self) -> int:
        return len(self._entries)

    def authenticate(self, token: str | None) -> Principal | None:
        """The principal whose key is `token`, or None. With auth disabled every caller is
        `FULL_ACCESS`. The comparison visits every digest (constant time, no early exit)."""
        if not self._entries:
            return FULL_ACCESS
        if token is None:
            return None
        presented = _digest(token)
        found: Principal | None = None
        for entry in self._entries:
            if hmac.compare_digest(entry.digest, presented) and found is None:
                found = entry.principal
        return found


def bearer_token(authorization: str | None) -> str | None:
    """The key of an `Authorization: Bearer <key>` header (exact prefix, one space;
    the remainder trimmed). Anything else, or an empty remainder, is None."""
    if authorization is None or not authorization.startswith("Bearer "):
        return None
    token = authorization[len("Bearer ") :].strip()
    return token or None


def _ip_is_loopback(text: str) -> bool | None:
    """True/False for an IP literal (scope ids allowed), None when `text` is not one."""
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped.is_loopback
    return ip.is_loopback and not ip.is_unspecified


def is_loopback_host(host: str) -> bool:
    """Whether binding `host` exposes the server only to this machine. Wildcards
    (`0.0.0.0`, `::`, empty), non-loopback addresses and names that do not resolve are
    non-loopback; a name is loopback only if every address it resolves to is."""
    h = host.strip()
    if h.startswith("[") and h.endswith("]"):
        h = h[1:-1]
    if not h:
        return False
    literal = _ip_is_loopback(h)
    if literal is not None:
        return literal
    try:
        infos = socket.getaddrinfo(h, None, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError, ValueError):
        return False
    addrs = {str(info[4][0]).split("%", 1)[0] for info in infos}
    return bool(addrs) and all(_ip_is_loopback(a) is True for a in addrs)


def check_startup_guard(settings: Settings, keyring: KeyRing) -> None:
    """API §1.5: refuse a non-loopback bind without keys unless explicitly allowed."""
    if keyring.enabled or settings.allow_insecure_no_auth:
        return
    if not is_loopback_host(settings.host):
        raise ConfigError(
            f"bind address {settings.host!r} is not loopback and no API key is configured; "
            "set SEGLOG_API_KEYS, bind to 127.0.0.1, or set "
            "SEGLOG_ALLOW_INSECURE_NO_AUTH=true to serve without authentication"
        )
