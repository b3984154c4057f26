"""Field types of the wire shapes (typed dicts) that the renderers return and the OpenAPI
document's schemas are generated from (`seglog.http.openapi_schemas`): `Annotated`
constraints (`msgspec.Meta`) carry ranges and patterns into the schemas and cost nothing
at runtime.
"""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import Meta

U64 = Annotated[int, Meta(ge=0)]
U32 = Annotated[int, Meta(ge=0, le=4294967295)]
I32 = Annotated[int, Meta(ge=-(2**31), le=2**31 - 1)]
TopicName = Annotated[str, Meta(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,254}$")]
RouterName = Annotated[str, Meta(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:>-]{0,254}$")]
# API §5: a tag predicate, `"exact"`, `"prefix*"` or `["tag", "Eq"|"Glob", value]`.
TagPredicate = tuple[Literal["tag"], Literal["Eq", "Glob"], str]
Predicate = str | TagPredicate
