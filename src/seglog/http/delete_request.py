"""The `POST /v0/topics/:topic/delete` body (API §5): permanent deletion of records before
a seq, matching a tag selector, or both."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from seglog.errors import invalid
from seglog.http.body_fields import json_object, u64_field
from seglog.model import Selector


@dataclass(frozen=True, slots=True)
class DeleteRequest:
    """`POST /v0/topics/:topic/delete`: at least one of the two is set (AND when both)."""

    before_seq: int | None
    match: Selector | None


def parse_delete(obj: Any) -> DeleteRequest:
    body = json_object(obj)
    before = u64_field(body, "before_seq", 0) if "before_seq" in body else None
    match = Selector.parse(body["match"]) if "match" in body else None
    if before is None and match is None:
        raise invalid("at least one of before_seq or match is required")
    return DeleteRequest(before, match)
