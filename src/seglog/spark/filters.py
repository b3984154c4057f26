"""Spark filters folded into read bounds (pure): which `seq`, `ts` and `topic` comparisons a
reader's planner can apply itself, and what they allow (`Pushed`). Shared by the online
(pushdown.py) and offline (files.py) readers.

Seq bounds and topic sets are applied exactly, so those filters are consumed. A `ts` bound
narrows the seqs read (`ts` never decreases with seq, SEMANTICS §2), and the filter is
still handed back for Spark to evaluate on the rows. Every other filter is handed back.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from pyspark.sql.datasource import (
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    LessThan,
    LessThanOrEqual,
)

from seglog.spark.options import MAX_SEQ


@dataclass(frozen=True, slots=True)
class Pushed:
    """What the pushed filters allow: seqs in [lo, hi]; topics in `topics` (None = any);
    record `ts` (ms) in [ts_lo, ts_hi] (None = unbounded)."""

    lo: int = 1
    hi: int = MAX_SEQ
    topics: frozenset[str] | None = None
    ts_lo: int | None = None
    ts_hi: int | None = None


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_COMPARISONS = (GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual, EqualTo)


def _int(v: object) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _micros(v: object) -> int | None:
    """Microseconds since the epoch of a timezone-aware datetime (Spark hands `timestamp`
    filter values over as such); a naive one is not pushed (its zone is unknown)."""
    if isinstance(v, dt.datetime) and v.tzinfo is not None:
        return (v - _EPOCH) // dt.timedelta(microseconds=1)
    return None


def _ts_bounds(f: Filter, lo: int | None, hi: int | None) -> tuple[int | None, int | None]:
    """Narrow the inclusive ms bounds [lo, hi] of `ts` by one comparison. A record's ts is
    whole ms, so `ts_ms * 1000 >= L` iff `ts_ms >= ceil(L / 1000)`, and `<= U` iff
    `ts_ms <= floor(U / 1000)`."""
    us = _micros(getattr(f, "value", None))
    if us is None:
        return lo, hi
    low = {GreaterThan: us + 1, GreaterThanOrEqual: us, EqualTo: us}.get(type(f))
    high = {LessThan: us - 1, LessThanOrEqual: us, EqualTo: us}.get(type(f))
    if low is not None:
        ms = -(-low // 1000)
        lo = ms if lo is None else max(lo, ms)
    if high is not None:
        ms = high // 1000
        hi = ms if hi is None else min(hi, ms)
    return lo, hi


def absorb(filters: Iterable[Filter]) -> tuple[Pushed, list[Filter]]:
    """Fold the filters the planner can apply exactly into `Pushed`; return the rest."""
    lo, hi, topics = 1, MAX_SEQ, None
    ts_lo: int | None = None
    ts_hi: int | None = None
    rest: list[Filter] = []
    for f in filters:
        attr = getattr(f, "attribute", None)
        if attr == ("ts",) and isinstance(f, _COMPARISONS):
            ts_lo, ts_hi = _ts_bounds(f, ts_lo, ts_hi)
            rest.append(f)
        elif attr == ("seq",) and isinstance(
            f, GreaterThan | GreaterThanOrEqual | LessThan | LessThanOrEqual | EqualTo
        ):
            v = _int(f.value)
            if v is None:
                rest.append(f)
            elif isinstance(f, GreaterThan):
                lo = max(lo, v + 1)
            elif isinstance(f, GreaterThanOrEqual):
                lo = max(lo, v)
            elif isinstance(f, LessThan):
                hi = min(hi, v - 1)
            elif isinstance(f, LessThanOrEqual):
                hi = min(hi, v)
            else:
                lo, hi = max(lo, v), min(hi, v)
        elif attr == ("topic",) and isinstance(f, EqualTo | In):
            values = (f.value,) if isinstance(f, EqualTo) else tuple(f.value)
            names = frozenset(v for v in values if isinstance(v, str))
            topics = names if topics is None else topics & names
        else:
            rest.append(f)
    return Pushed(lo, hi, topics, ts_lo, ts_hi), rest


@dataclass(frozen=True)
class TopicsIn:
    """A picklable topic predicate: `match` and, when given, membership in `names`."""

    match: Callable[[str], bool]
    names: frozenset[str] | None = None

    def __call__(self, name: str) -> bool:
        return (self.names is None or name in self.names) and self.match(name)
