"""Topic and router name rules (API §0.8). Names never reach the filesystem."""

from __future__ import annotations

import re

_TOPIC = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,254}")
_ROUTER = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:>-]{0,254}")


def valid_topic_name(name: object) -> bool:
    return isinstance(name, str) and name.isascii() and _TOPIC.fullmatch(name) is not None


def valid_router_name(name: object) -> bool:
    return isinstance(name, str) and name.isascii() and _ROUTER.fullmatch(name) is not None
