"""Options every client command shares and the one place a `Client` is built (tests replace
`make_client` to drive the CLI over a mock transport)."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import urlsplit

import typer

from seglog.cli.output import usage
from seglog.client import Client

DEFAULT_URL = "http://127.0.0.1:4000"

URL = Annotated[
    str,
    typer.Option("--url", envvar="SEGLOG_URL", help="Server base URL.", show_default=True),
]
KEY = Annotated[
    str | None,
    typer.Option(
        "--api-key", envvar="SEGLOG_API_KEY", help="Bearer API key (omit when auth is off)."
    ),
]
AS_JSON = Annotated[
    bool,
    typer.Option("--json", help="Print JSON (one value per line); the default when piped."),
]


def make_client(url: str, api_key: str | None) -> Client:
    return Client(url, api_key=api_key)


def check_url(url: str) -> None:
    """A malformed --url is a usage error (exit 2), not a connection failure or a traceback."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (raises ValueError on a bad port)
    except ValueError as e:
        usage(f"--url {url!r}: {e}; expected http://HOST:PORT")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        usage(f"--url {url!r}: expected http://HOST:PORT (or https://)")


def client(url: str, api_key: str | None) -> Client:
    """Looked up at call time so a test's replacement of `make_client` takes effect."""
    check_url(url)
    return make_client(url, api_key)
