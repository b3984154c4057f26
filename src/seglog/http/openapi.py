"""The OpenAPI 3.1 document of the `/v0` API, served at `/v0/openapi.json`.

Its paths are generated from the mounted route table (`routes.route_table`), in matching
order; each path's operations come from `openapi_operations.OPERATIONS` and its schemas from
`openapi_schemas.SCHEMAS`, both written from API.md (which stays normative). The pairing is
checked when the document is built, at import: a served route with no operations, operations
for a path nobody serves, or a route mounted with fixed methods documented with others is a
`DocumentDrift`, so the server cannot start with a document that lies about its paths. One
route is left out on purpose: the `{rest:path}` catch-all under a topic, which only answers
`404` after the scope check. Routes mounted with `ANY_METHOD`
dispatch on the method in the handler; `tests/http/test_openapi_routes.py` probes the real
app to check that their documented methods are served and every other method is `405`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import cache
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route, WebSocketRoute

from seglog.http.openapi_operations import ERROR_STATUSES, OPERATIONS, error_response_schema
from seglog.http.openapi_schemas import SCHEMAS
from seglog.http.routes import ANY_METHOD, route_table

HTTP_METHODS = ("get", "put", "post", "delete", "patch", "head", "options")
_CONVERTOR = re.compile(r"\{(\w+):\w+\}")


class DocumentDrift(RuntimeError):
    """The route table and the documented operations disagree."""


def doc_path(route_path: str) -> str:
    """A Starlette path template as an OpenAPI path (`{id:int}` becomes `{id}`)."""
    return _CONVERTOR.sub(r"{\1}", route_path)


def is_catch_all(route_path: str) -> bool:
    return ":path}" in route_path


def served_methods(routes: Sequence[BaseRoute]) -> dict[str, frozenset[str] | None]:
    """Documented path → the methods its routes fix, or None when a handler dispatches on
    the method itself (mounted with `ANY_METHOD`, or with no method check at all). A
    WebSocket route serves `get`."""
    out: dict[str, frozenset[str] | None] = {}
    for route in routes:
        methods: frozenset[str] | None
        if isinstance(route, WebSocketRoute):
            path, methods = route.path, frozenset({"get"})
        elif isinstance(route, Route):
            path = route.path
            given = None if route.methods is None else {m.lower() for m in route.methods}
            if given is None or given == {m.lower() for m in ANY_METHOD}:
                methods = None
            else:
                methods = frozenset(given - {"head"})
        else:
            raise DocumentDrift(f"cannot document a {type(route).__name__}")
        if is_catch_all(path):
            continue
        path = doc_path(path)
        before = out.get(path, frozenset())
        out[path] = None if methods is None or before is None else before | methods
    return out


def documented_methods(path: str) -> frozenset[str]:
    return frozenset(k for k in OPERATIONS.get(path, {}) if k in HTTP_METHODS)


def build_document(routes: Sequence[BaseRoute]) -> dict[str, Any]:
    served = served_methods(routes)
    problems = [f"served but undocumented: {p}" for p in served if p not in OPERATIONS]
    problems += [f"documented but not served: {p}" for p in OPERATIONS if p not in served]
    for path, fixed in served.items():
        if fixed is not None and path in OPERATIONS and fixed != documented_methods(path):
            problems.append(
                f"{path}: serves {sorted(fixed)}, documents {sorted(documented_methods(path))}"
            )
    if problems:
        raise DocumentDrift("; ".join(problems))
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "seglog",
            "version": "0.1.0",
            "description": "Persistent event log: the /v0 JSON HTTP API. API.md is normative.",
        },
        "servers": [{"url": "http://127.0.0.1:4000"}],
        "security": [{"bearer": []}, {}],
        "paths": {path: OPERATIONS[path] for path in served},
        "components": {
            "schemas": SCHEMAS,
            "responses": {
                f"E{code}": error_response_schema(d) for code, d in ERROR_STATUSES.items()
            },
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }


async def serve(_request: Request) -> Response:
    return Response(openapi_bytes(), media_type="application/json")


OPENAPI: dict[str, Any] = build_document(route_table(serve))


@cache
def openapi_bytes() -> bytes:
    return orjson.dumps(OPENAPI)
