"""Property: whatever happens to the connections, a watch hands out every deliverable record
exactly once, in order, per topic.

`SimServer` is a small model of the server side of API.md §7: sessions with per-topic cursors
that advance *before* each frame is written (so a frame cut in transit is lost to the server's
cursor, and only `Last-Event-ID` gets it back), `Last-Event-ID` that rewinds only, skipped
(own-node) seqs that advance `to_seq` without a record, sessions that expire (404), shutdown
error frames, clean ends, and a server that sometimes rewinds further than asked. Hypothesis
draws the data and a plan of what each stream GET does; the final GET drains everything and
deletes the topics so the watch ends.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import httpx
from hypothesis import given, settings
from hypothesis import strategies as st

from seglog.client import AsyncClient, Client, WatchRecord, decode_cursor
from tests.client.conftest import BASE_URL, FixedRng, body_of, err, ok
from tests.client.watch_fakes import cursor_id, disconnect, frame, split, sse_response


@dataclass(frozen=True)
class Act:
    kind: str  # "cut" | "expire" | "shutdown" | "eof"
    frames: int  # frames written before the act
    cut: float  # where in the bytes a "cut" breaks the connection
    rewind: int  # how much further back than asked this GET restarts


@dataclass
class SimServer:
    deliverable: dict[str, list[int]]
    heads: dict[str, int]
    limit: int
    plan: list[Act]
    chunks: list[int]
    sessions: dict[str, dict[str, int]] = field(default_factory=dict)
    created: int = 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.method == "POST":
            self.created += 1
            wid = f"wid_{self.created}"
            topics = body_of(request)["topics"]
            self.sessions[wid] = {t: v["from_seq"] for t, v in topics.items()}
            starts = {
                t: {"from_seq": s, "head_seq": self.heads[t], "earliest_seq": 1}
                for t, s in self.sessions[wid].items()
            }
            return ok(
                {
                    "wid": wid,
                    "stream_url": f"/v0/watch/{wid}",
                    "session_ttl_ms": 1,
                    "topics": starts,
                }
            )
        wid = request.url.path.rsplit("/", 1)[1]
        if wid not in self.sessions:
            return err(404, "not_found", "unknown watch session")
        cursors = self.sessions[wid]
        lei = request.headers.get("last-event-id")
        for t, seq in (decode_cursor(lei) if lei else {}).items():
            if t in cursors:
                cursors[t] = min(cursors[t], seq)
        act = self.plan.pop(0) if self.plan else None
        if act is not None and act.kind == "expire":
            del self.sessions[wid]
            return err(404, "not_found", "unknown watch session")
        if act is not None:
            for t in cursors:
                cursors[t] = max(cursors[t] - act.rewind, 0)
        blob = b"retry: 2000\n\n" + self._frames(cursors, None if act is None else act.frames)
        if act is None:
            blob += b"".join(
                frame("topic-deleted", {"topic": t, "head_seq": self.heads[t]}) for t in cursors
            )
            return sse_response(split(blob, self.chunks))
        if act.kind == "cut":
            return sse_response(split(blob[: int(len(blob) * act.cut)], self.chunks), disconnect())
        if act.kind == "shutdown":
            blob += frame("error", {"code": "server_shutting_down", "message": "bye"})
        return sse_response(split(blob, self.chunks))

    def _frames(self, cursors: dict[str, int], budget: int | None) -> bytes:
        out: list[bytes] = []
        while budget is None or len(out) < budget:
            pending = [t for t in sorted(cursors) if cursors[t] < self.heads[t]]
            if not pending:
                break
            t = pending[len(out) % len(pending)]
            frm, to = cursors[t], min(cursors[t] + self.limit, self.heads[t])
            seqs = [s for s in self.deliverable[t] if frm < s <= to]
            cursors[t] = to  # the server advances before it writes the frame (SEMANTICS §9)
            recs = [{"$seq": s, "$ts": s, "data": {"t": t, "n": s}} for s in seqs]
            data = {"topic": t, "from_seq": frm, "head_seq": self.heads[t], "records": recs}
            out.append(frame("record", {**data, "to_seq": to}, cursor_id(cursors)))
        return b"".join(out)


ACT = st.builds(
    Act,
    kind=st.sampled_from(["cut", "cut", "expire", "shutdown", "eof"]),
    frames=st.integers(0, 4),
    cut=st.floats(0.0, 1.0),
    rewind=st.integers(0, 3) | st.just(0),
)


@st.composite
def scenarios(draw: st.DrawFn) -> SimServer:
    deliverable: dict[str, list[int]] = {}
    heads: dict[str, int] = {}
    for t in ("a", "b.x"):
        head = draw(st.integers(0, 25))
        skipped = draw(st.sets(st.integers(1, max(head, 1))))
        heads[t] = head
        deliverable[t] = [s for s in range(1, head + 1) if s not in skipped]
    return SimServer(
        deliverable,
        heads,
        limit=draw(st.integers(1, 5)),
        plan=draw(st.lists(ACT, max_size=8)),
        chunks=draw(st.lists(st.integers(1, 60), min_size=1, max_size=5)),
    )


def _check(server: SimServer, events: list[Any]) -> None:
    got: dict[str, list[int]] = {t: [] for t in server.deliverable}
    for ev in events:
        if isinstance(ev, WatchRecord):
            assert ev.data == {"t": ev.topic, "n": ev.seq}
            got[ev.topic].append(ev.seq)
    assert got == server.deliverable


@settings(max_examples=150, deadline=None)
@given(scenarios())
def test_sync_watch_delivers_every_record_exactly_once(server: SimServer) -> None:
    plan = list(server.plan)
    with Client(
        BASE_URL, transport=httpx.MockTransport(server), sleep=lambda s: None, rng=FixedRng()
    ) as client:
        events = list(client.watch({"a": 0, "b.x": 0}))
    _check(server, events)
    assert server.created == 1 + sum(a.kind == "expire" for a in plan)


@settings(max_examples=75, deadline=None)
@given(scenarios())
def test_async_watch_delivers_every_record_exactly_once(server: SimServer) -> None:
    async def nap(seconds: float) -> None:
        return None

    async def run() -> list[Any]:
        async with AsyncClient(
            BASE_URL, transport=httpx.MockTransport(server), sleep=nap, rng=FixedRng()
        ) as client:
            return [ev async for ev in client.watch({"a": 0, "b.x": 0})]

    _check(server, asyncio.run(run()))
