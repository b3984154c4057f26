"""What each client hands httpx as `verify`: a cleartext URL gets an empty context (no CA
bundle loaded per client), anything else keeps httpx's default verification."""

from __future__ import annotations

import ssl

import pytest

from seglog.client import AsyncClient, Client, _base

PROXY_VARS = ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")


@pytest.fixture(autouse=True)
def _no_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PROXY_VARS:
        monkeypatch.delenv(name, raising=False)


def test_a_cleartext_url_gets_a_context_that_trusts_no_ca() -> None:
    ctx = _base.tls_verify("http://127.0.0.1:4000")
    assert isinstance(ctx, ssl.SSLContext)
    # Were TLS ever attempted with it, verification would fail: nothing is trusted.
    assert ctx.verify_mode is ssl.CERT_REQUIRED and ctx.check_hostname
    assert ctx.cert_store_stats()["x509_ca"] == 0


def test_tls_urls_keep_the_default_verification() -> None:
    assert _base.tls_verify("https://seglog.example:4000") is True


@pytest.mark.parametrize("name", ["HTTPS_PROXY", "http_proxy", "ALL_PROXY"])
def test_a_proxy_in_the_environment_keeps_the_default_verification(
    monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    monkeypatch.setenv(name, "https://proxy.example:3128")
    assert _base.tls_verify("http://127.0.0.1:4000") is True


@pytest.mark.parametrize("http2", [False, True])
async def test_both_clients_pass_it_to_httpx(monkeypatch: pytest.MonkeyPatch, http2: bool) -> None:
    seen: list[str] = []
    real = _base.tls_verify

    def spy(url: str) -> ssl.SSLContext | bool:
        seen.append(url)
        return real(url)

    monkeypatch.setattr(_base, "tls_verify", spy)
    Client("http://127.0.0.1:4000", http2=http2).close()
    await AsyncClient("http://127.0.0.1:4001", http2=http2).aclose()
    assert set(seen) == {"http://127.0.0.1:4000", "http://127.0.0.1:4001"}
