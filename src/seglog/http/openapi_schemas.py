"""The component schemas of the OpenAPI document, generated from the request and response
types the codec uses (`wire_types`): an encoder that builds a body of another shape fails
the type checker, a parser that reads an undocumented field fails
`tests/http/test_wire_types.py`, and `tests/http/test_openapi_live.py` checks every answer
of the real server against these schemas. API.md stays normative.

The small schemas below are for query and path parameters, written by
`openapi_operations`.
"""

from __future__ import annotations

from typing import Any

import msgspec

from seglog.http.wire_types import DOCUMENTED

Schema = dict[str, Any]

U64: Schema = {"type": "integer", "minimum": 0}
U32: Schema = {"type": "integer", "minimum": 0, "maximum": 4294967295}
STR: Schema = {"type": "string"}
BOOL: Schema = {"type": "boolean"}
ROUTER_NAME: Schema = {"type": "string", "pattern": r"^[A-Za-z0-9][A-Za-z0-9._:>-]{0,254}$"}

_REF = "#/components/schemas/{name}"
# Objects the API closes (API §0.5: an error body is exactly this): a typed dict cannot say
# so itself.
_CLOSED = ("Error", "ErrorBody")


def ref(name: str) -> Schema:
    return {"$ref": _REF.format(name=name)}


# Components named after the model's value rather than its typed dict (which cannot take
# the model class's own name): the names the document has always used.
_RENAMED = {"TopicConfigFields": "TopicConfig", "TombstoneFields": "Tombstone"}


def _renamed(node: Any) -> Any:
    if isinstance(node, dict):
        out = {k: _renamed(v) for k, v in node.items()}
        target = out.get("$ref")
        if isinstance(target, str):
            name = target.rsplit("/", 1)[1]
            out["$ref"] = _REF.format(name=_RENAMED.get(name, name))
        if out.get("title") in _RENAMED:
            out["title"] = _RENAMED[out["title"]]
        return out
    if isinstance(node, list):
        return [_renamed(v) for v in node]
    return node


def _generate() -> dict[str, Schema]:
    _, components = msgspec.json.schema_components(DOCUMENTED, ref_template=_REF)
    for name in _CLOSED:
        components[name]["additionalProperties"] = False
    return {_RENAMED.get(k, k): _renamed(v) for k, v in components.items()}


SCHEMAS: dict[str, Schema] = _generate()
