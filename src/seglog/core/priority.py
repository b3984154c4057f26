"""Effective priority (SEMANTICS §11). Pure."""

from __future__ import annotations


def effective_priority(
    priority: int | None,
    auto_priority: bool,
    last_consumed_ms: int | None,
    now_ms: int,
    waited_ms: int = 0,
) -> int:
    manual = 0 if priority is None else max(-1000, min(1000, priority))
    auto = 0.0
    if priority is None and auto_priority and last_consumed_ms is not None:
        idle = max(0, now_ms - last_consumed_ms)
        if idle < 300_000:
            auto = 500.0 * 2.0 ** (-idle / 30_000)
    age = 0.1 * min(max(waited_ms, 0), 10_000)
    return round(manual + auto + age)
