"""What each client hands httpx as `verify`: a cleartext URL gets an empty context (no CA
bundle loaded per client), anything else keeps httpx's default verification."""

from __future__ import annotations

import ssl
import urllib.request
from typing import Any

import pytest

from seglog.client import AsyncClient, Client, _base


@pytest.fixture(autouse=True)
def _no_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    # The environment's (or the OS's) proxy settings must not decide these tests.
    monkeypatch.setattr(urllib.request, "getproxies", lambda: {})


def test_a_cleartext_url_gets_a_context_that_trusts_no_ca() -> None:
    ctx = _base.tls_verify("http://127.0.0.1:4000")
    assert isinstance(ctx, ssl.SSLContext)
    # Were TLS ever attempted with it, verification would fail: nothing is trusted.
    assert ctx.verify_mode is ssl.CERT_REQUIRED and ctx.check_hostname
    assert ctx.cert_store_stats()["x509_ca"] == 0


def test_tls_urls_keep_the_default_verification() -> None:
    assert _base.tls_verify("https://seglog.example:4000") is True


@pytest.mark.parametrize("scheme", ["http", "https", "all"])
def test_a_proxy_in_the_environment_keeps_the_default_verification(
    monkeypatch: pytest.MonkeyPatch, scheme: str
) -> None:
    monkeypatch.setattr(urllib.request, "getproxies", lambda: {scheme: "https://proxy:3128"})
    assert _base.tls_verify("http://127.0.0.1:4000") is True


def test_no_proxy_alone_is_not_a_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(urllib.request, "getproxies", lambda: {"no": "localhost"})
    assert isinstance(_base.tls_verify("http://127.0.0.1:4000"), ssl.SSLContext)


def _pool_context(http: Any) -> ssl.SSLContext:
    return http._transport._pool._ssl_context  # type: ignore[no-any-return]


@pytest.mark.parametrize("http2", [False, True])
async def test_both_clients_hand_the_empty_context_to_their_connection_pool(
    http2: bool,
) -> None:
    sync = Client("http://127.0.0.1:4000", http2=http2)
    aio = AsyncClient("http://127.0.0.1:4001", http2=http2)
    try:
        for http in (sync._http, aio._http):
            assert _pool_context(http).cert_store_stats()["x509_ca"] == 0
    finally:
        sync.close()
        await aio.aclose()
    secure = Client("https://127.0.0.1:4002")
    try:
        assert _pool_context(secure._http).cert_store_stats()["x509_ca"] > 0
    finally:
        secure.close()
