"""Errors the connector raises. Messages lead with the actionable part: Spark shows the first
line of a Python exception above a long JVM stack."""

from __future__ import annotations


class SeglogDataLossError(RuntimeError):
    """Records in a planned range were lost (cap/TTL eviction, source trim, topic recreated or
    deleted) before the query read them, and `failOnDataLoss` is true."""


class SeglogCorruptionError(RuntimeError):
    """A segment frame failed its checksum in an offline read; never skipped silently."""


def data_loss_message(topic: str, gap_from: int, gap_to: int, reason: str) -> str:
    """One line naming the topic, the lost seqs and why, and how to continue anyway."""
    if reason == "recreated":
        what = f"topic {topic!r} was deleted and recreated; seqs from {gap_from} of the old topic are gone"
    elif reason == "deleted":
        what = f"topic {topic!r} was deleted; seqs {gap_from}..{gap_to} can no longer be read"
    else:
        n = gap_to - gap_from + 1
        what = (
            f"topic {topic!r}: seqs {gap_from}..{gap_to} ({n} records) were removed ({reason}) "
            "before they were read"
        )
    return (
        f"seglog data loss: {what}. Set option failOnDataLoss=false to log the gap and continue, "
        "or raise the topic's cap/TTL."
    )
