"""A topic config object (API §0.11) from a request: the `PUT /v0/topics/:topic` body, or
the `config` member of an append that may create the topic."""

from __future__ import annotations

from typing import Any

from seglog.errors import SeglogError, invalid
from seglog.model import TopicConfig


def parse_config(obj: Any) -> TopicConfig:
    """A request's topic config object; type errors carry the API §0.2 message prefix."""
    try:
        return TopicConfig.from_dict(obj)
    except SeglogError as e:
        raise invalid(f"malformed JSON body: {e.message}", e.detail) from None
