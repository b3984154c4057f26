"""A WAL group's frames as replay applies them: whole submissions only (STORAGE §3.5).

A submission is written with one write; every frame but its last carries `FLAG_MORE`. A
crash mid-write can leave a prefix of complete frames whose submission never finished (and
so was never acknowledged): replay must not apply them. Read-only over a `GroupScanner`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from seglog.core.frame_scanner import RawFrame
from seglog.core.frames import FLAG_MORE
from seglog.storage.walscan import GroupScanner


class Submissions:
    """A group's frames as replay must see them: whole submissions only. Frames flagged
    `more` are held until the frame that ends their submission arrives; a submission still
    open at the end of a file was cut short by a crash mid-write (never acknowledged), so
    it is dropped and remembered in `unfinished` (file idx → its start offset, frames)."""

    def __init__(self, scanner: GroupScanner, progress: Callable[[int], None]) -> None:
        self.scanner = scanner
        self.progress = progress
        self.unfinished: dict[int, tuple[int, int]] = {}

    def __iter__(self) -> Iterator[RawFrame]:
        for frames in self.chunks():
            yield from frames

    def chunks(self) -> Iterator[list[RawFrame]]:
        """The same frames, whole submissions a list at a time."""
        last_idx, last_end = self.scanner.start
        pending = 0
        held: list[RawFrame] = []
        held_start = 0
        for idx, frames in self.scanner.chunks():
            if idx != last_idx:
                if held:
                    self.unfinished[last_idx] = (held_start, len(held))
                    held = []
                last_idx, last_end = idx, 0
            # Everything up to the chunk's last frame without `more` ends a submission.
            k = len(frames) - 1
            while k >= 0 and frames[k][2] & FLAG_MORE:
                k -= 1
            if k < 0:
                if not held:
                    held_start = last_end
                held.extend(frames)
            else:
                done = frames if k == len(frames) - 1 else frames[: k + 1]
                if held:
                    done = held + done
                    held = []
                if k < len(frames) - 1:
                    held_start = frames[k][0]  # where the first frame after it starts
                    held = frames[k + 1 :]
                yield done
            end = frames[-1][0]
            pending += end - last_end
            last_end = end
            if pending >= 1 << 20:
                self.progress(pending)
                pending = 0
        if held:
            self.unfinished[last_idx] = (held_start, len(held))
        self.progress(pending)
