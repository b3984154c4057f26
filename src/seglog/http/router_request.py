"""The `PUT /v0/routers/:router` body (API §6.1) into a `RouterSpec`.

Types only: name validity and everything that needs state are the engine's checks, in the
order §6.1 gives them. `filter` uses the record-delete predicate grammar (§5); `null` or
absent means none.
"""

from __future__ import annotations

from typing import Any

from seglog.http.body_fields import bool_field, json_object, malformed
from seglog.model import Selector
from seglog.router_model import Guarantee, RouterSpec


def _required_str(body: dict[str, Any], key: str) -> str:
    if key not in body:
        raise malformed(f"{key} is required")
    v = body[key]
    if not isinstance(v, str):
        raise malformed(f"{key} must be a string")
    return v


def parse_router(name: str, obj: Any) -> RouterSpec:
    body = json_object(obj)
    source = _required_str(body, "source")
    dest = _required_str(body, "dest")
    raw_filter = body.get("filter")
    flt = None if raw_filter is None else Selector.parse(raw_filter)
    guarantee = body.get("guarantee", Guarantee.AT_LEAST_ONCE.value)
    if guarantee not in (Guarantee.AT_LEAST_ONCE.value, Guarantee.EXACTLY_ONCE.value):
        raise malformed('guarantee must be "at_least_once" or "exactly_once"')
    return RouterSpec(
        name=name,
        source=source,
        dest=dest,
        preserve_node=bool_field(body, "preserve_node", True),
        preserve_tag=bool_field(body, "preserve_tag", True),
        create_dest=bool_field(body, "create_dest", True),
        filter=flt,
        allow_cycle=bool_field(body, "allow_cycle", False),
        guarantee=Guarantee(guarantee),
    )
