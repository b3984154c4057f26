"""`Submissions.chunks` (whole submissions only, a list of frames at a time) against the
frame-at-a-time rule it replaced: the same frames in the same order, the same unfinished
submissions per file, the same progress bytes — however the scanner's chunks cut the
files and wherever a submission starts or ends."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from seglog.core.frame_scanner import RawFrame
from seglog.core.frames import FLAG_MORE
from seglog.storage.wal_submissions import Submissions


@dataclass
class FakeScanner:
    """What `Submissions` reads of a `GroupScanner`: `start` and `chunks()`."""

    start: tuple[int, int]
    files: list[tuple[int, list[list[RawFrame]]]]

    def chunks(self) -> Iterator[tuple[int, list[RawFrame]]]:
        for idx, chunks in self.files:
            for frames in chunks:
                yield idx, frames


def frame(end: int, more: bool, n: int) -> RawFrame:
    return (end, 1, FLAG_MORE if more else 0, 1, n, 0, None, None, b"")


def reference(scanner: FakeScanner) -> tuple[list[RawFrame], dict[int, tuple[int, int]], int]:
    """The frame-at-a-time rule: hold `more` frames until their submission's last frame."""
    out: list[RawFrame] = []
    unfinished: dict[int, tuple[int, int]] = {}
    last_idx, last_end = scanner.start
    total = 0
    held: list[RawFrame] = []
    held_start = 0
    for idx, frames in scanner.chunks():
        for raw in frames:
            if idx != last_idx:
                if held:
                    unfinished[last_idx] = (held_start, len(held))
                    held = []
                last_idx, last_end = idx, 0
            start = last_end
            total += raw[0] - last_end
            last_end = raw[0]
            if raw[2] & FLAG_MORE:
                if not held:
                    held_start = start
                held.append(raw)
                continue
            out += held
            held = []
            out.append(raw)
    if held:
        unfinished[last_idx] = (held_start, len(held))
    return out, unfinished, total


FILES = st.lists(
    st.tuples(
        st.lists(st.booleans(), min_size=1, max_size=30),  # `more` flag of each frame
        st.lists(st.integers(1, 7), max_size=6),  # chunk lengths cutting the file
        st.integers(1, 40),  # frame size
    ),
    min_size=1,
    max_size=4,
)


@settings(max_examples=300, deadline=None)
@given(files=FILES, start_off=st.integers(0, 100))
def test_chunks_match_the_frame_at_a_time_rule(
    files: list[tuple[list[bool], list[int], int]], start_off: int
) -> None:
    layout: list[tuple[int, list[list[RawFrame]]]] = []
    n = 0
    for k, (mores, cuts, size) in enumerate(files):
        idx = 3 + k
        off = start_off if k == 0 else 0
        frames = []
        for more in mores:
            off += size
            n += 1
            frames.append(frame(off, more, n))
        chunks, i = [], 0
        for c in cuts:
            if i < len(frames):
                chunks.append(frames[i : i + c])
                i += c
        if i < len(frames):
            chunks.append(frames[i:])
        layout.append((idx, chunks))
    scanner = FakeScanner((3, start_off), layout)
    progress: list[int] = []
    subs = Submissions(scanner, progress.append)  # type: ignore[arg-type]
    got = [f for frames in subs.chunks() for f in frames]
    want, unfinished, total = reference(scanner)
    assert got == want
    assert subs.unfinished == unfinished
    assert sum(progress) == total
