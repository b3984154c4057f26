"""Router value objects shared by the engine and the HTTP layer (API §6, SEMANTICS §8).

`RouterSpec` is a router's definition as the client set it; the runtime state (cursor,
totals) is the engine's and only leaves it inside a `RouterInfo` value.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TypedDict

from seglog.model import Selector
from seglog.wire_fields import Predicate, RouterName, TopicName


class Guarantee(StrEnum):
    AT_LEAST_ONCE = "at_least_once"
    EXACTLY_ONCE = "exactly_once"


class RouterFields(TypedDict):
    """A router's definition on the wire, as API §6.1/§6.2 show it."""

    router: RouterName
    source: TopicName
    dest: TopicName
    preserve_node: bool
    preserve_tag: bool
    filter: Predicate | None
    allow_cycle: bool
    guarantee: Guarantee


@dataclass(frozen=True, slots=True)
class RouterSpec:
    """A router definition (API §6.1 field defaults)."""

    name: str
    source: str
    dest: str
    preserve_node: bool = True
    preserve_tag: bool = True
    create_dest: bool = True
    filter: Selector | None = None
    allow_cycle: bool = False
    guarantee: Guarantee = Guarantee.AT_LEAST_ONCE

    @property
    def exactly_once(self) -> bool:
        return self.guarantee is Guarantee.EXACTLY_ONCE

    def wire_fields(self) -> RouterFields:
        """The definition as API §6.1/§6.2 show it, in their key order."""
        return {
            "router": self.name,
            "source": self.source,
            "dest": self.dest,
            "preserve_node": self.preserve_node,
            "preserve_tag": self.preserve_tag,
            "filter": None if self.filter is None else self.filter.to_wire(),
            "allow_cycle": self.allow_cycle,
            "guarantee": self.guarantee,
        }


@dataclass(frozen=True, slots=True)
class RouterInfo:
    """A router's definition and its `forwarded_total` at one instant."""

    spec: RouterSpec
    forwarded_total: int


@dataclass(frozen=True, slots=True)
class PutRouterResult:
    spec: RouterSpec
    created: bool


@dataclass(frozen=True, slots=True)
class DropRouterResult:
    router: str
    deleted: bool
