"""The web console (API §13.3): static assets shipped in the `seglog.console` package.

`GET /console` is the page; `GET /console/{name}` its script and stylesheet. Only the files
named in `ASSETS` are served (no path walking, nothing else in the package leaks). The page
needs no key to load: it asks the user for one and calls `/v0` with it, so the guard lets
these GETs through unauthenticated (they carry no data). A strict Content-Security-Policy
(same-origin scripts and connections only, no inline script) is a second line behind the
console's rule of never putting record content into HTML.
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files

from starlette.requests import Request
from starlette.responses import Response

from seglog.errors import ErrorCode, SeglogError

PAGE = "index.html"
ASSETS = {
    PAGE: "text/html; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "style.css": "text/css; charset=utf-8",
}
HEADERS = {
    "Cache-Control": "no-cache",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
}


@cache
def _asset(name: str) -> bytes:
    return files("seglog.console").joinpath(name).read_bytes()


def _serve(name: str) -> Response:
    media_type = ASSETS.get(name)
    if media_type is None:
        raise SeglogError(ErrorCode.NOT_FOUND, "no such console asset")
    return Response(_asset(name), media_type=media_type, headers=HEADERS)


async def page(_request: Request) -> Response:
    return _serve(PAGE)


async def asset(request: Request) -> Response:
    return _serve(request.path_params["name"])
