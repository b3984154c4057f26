"""Topic and router names (API §0.8) as the routes check them (`seglog.core.names`)."""

from __future__ import annotations

import pytest

from seglog.core.names import valid_router_name, valid_topic_name


@pytest.mark.parametrize(
    ("name", "topic_ok", "router_ok"),
    [
        ("jobs", True, True),
        ("a", True, True),
        ("A.b_c:d-9", True, True),
        ("orders->audit", False, True),
        (">x", False, False),
        ("-x", False, False),
        ("", False, False),
        ("a b", False, False),
        ("a/b", False, False),
        ("é", False, False),
        ("a" * 255, True, True),
        ("a" * 256, False, False),
        ("ab\n", False, False),
    ],
)
def test_names(name: str, topic_ok: bool, router_ok: bool) -> None:
    assert valid_topic_name(name) is topic_ok
    assert valid_router_name(name) is router_ok
