"""Paging state for `read()`: which diff to send next and what to yield from each page.

Pure (no I/O), shared by `Reader` and `AsyncReader`. `next_from_seq` is always a safe resume
point: it advances as each item is handed out, so a consumer that stops mid-page and resumes
from it neither skips nor repeats a record. A tombstone is handed out before the page's records
(its gap lies between the old cursor and the first record) and is never swallowed.
"""

from __future__ import annotations

from collections.abc import Iterator

from seglog.client.types import DiffResult, ReadRecord, Tombstone

RECREATED = "recreated"


class ReadCursor:
    def __init__(
        self, from_seq: int, *, until_seq: int | None, follow: bool, limit: int, wait_ms: int
    ) -> None:
        if from_seq < 0 or limit < 1 or (until_seq is not None and until_seq < 0):
            raise ValueError("from_seq and until_seq must be >= 0 and limit >= 1")
        self.next_from_seq = from_seq
        self.until_seq = until_seq
        self.follow = follow
        self.limit = limit
        self.wait_ms = max(wait_ms, 0) if follow else 0
        self.done = self._reached_end()
        self.stalls = 0
        """Consecutive follow-mode pages that moved nothing and were not a server long-poll."""

    def _reached_end(self) -> bool:
        return self.until_seq is not None and self.next_from_seq >= self.until_seq

    def page_limit(self) -> int:
        """`limit` for the next diff: never ask for more seqs than remain before `until_seq`."""
        if self.until_seq is None:
            return self.limit
        return max(1, min(self.limit, self.until_seq - self.next_from_seq))

    def _clip(self, seq: int) -> int:
        return seq if self.until_seq is None else min(seq, self.until_seq)

    def feed(self, page: DiffResult) -> Iterator[ReadRecord | Tombstone]:
        start = self.next_from_seq
        tomb = page.tombstone
        if tomb is not None:
            # After a recreate the seqs restart, so the cursor legitimately moves backwards.
            after = tomb.earliest_seq - 1 if tomb.reason == RECREATED else max(start, tomb.gap_to)
            self.next_from_seq = self._clip(max(after, 0))
            yield tomb
        for rec in page.records:
            if self.until_seq is not None and rec.seq > self.until_seq:
                break
            self.next_from_seq = rec.seq
            yield rec
        self.next_from_seq = self._clip(max(page.next_from_seq, self.next_from_seq))
        self._after_page(
            page, moved=bool(page.records) or tomb is not None or self.next_from_seq != start
        )

    def _after_page(self, page: DiffResult, *, moved: bool) -> None:
        if self._reached_end():
            self.done = True
        elif not self.follow:
            # `caught_up` is the server's "nothing more now"; a page that moved nothing also ends
            # the read instead of re-asking forever.
            self.done = page.caught_up or not moved
        elif moved or (page.caught_up and self.wait_ms > 0):
            self.stalls = 0
        else:
            self.stalls += 1

    def pause(self) -> int | None:
        """Backoff attempt number to sleep for before the next diff (follow mode only)."""
        return self.stalls - 1 if self.stalls else None
