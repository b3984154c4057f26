"""A small in-process model of `GET /v0/ws` (API.md §8) on a real loopback socket.

`FakeWsServer` runs a `websockets` sync server in a thread. It keeps topics in memory and
answers `subscribe` (reply, then the backlog as one `record` push and `caught_up`), `publish`
(pushes the new records to a subscribed socket *before* the `ack`, so a client must buffer
events while it waits for a reply), `unsubscribe`, `ping`, malformed and binary messages, and
two test-only ops: `_shutdown` (the server's shutdown error, then close) and `_close`.
"""

from __future__ import annotations

import threading
from typing import Any

import orjson
from websockets.datastructures import Headers
from websockets.http11 import Request, Response
from websockets.sync.server import Server, ServerConnection, serve


class FakeWsServer:
    def __init__(self, key: str | None = None) -> None:
        self.key = key
        self.topics: dict[str, list[dict[str, Any]]] = {}
        self.received: list[Any] = []
        self.upgrade_headers: list[Headers] = []
        self._server: Server = serve(
            self._handle, "127.0.0.1", 0, process_request=self._auth, compression=None
        )
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._server.socket.getsockname()[:2]
        return f"http://{host}:{port}"

    def close(self) -> None:
        self._server.shutdown()
        self._thread.join(10)

    def _auth(self, conn: ServerConnection, request: Request) -> Response | None:
        self.upgrade_headers.append(request.headers)
        if self.key is None or request.headers.get("Authorization") == f"Bearer {self.key}":
            return None
        body = orjson.dumps({"error": {"code": "unauthorized", "message": "missing or bad key"}})
        headers = Headers(
            [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
        )
        return Response(401, "Unauthorized", headers, body)

    def _handle(self, conn: ServerConnection) -> None:
        subs: dict[str, int] = {}
        for message in conn:
            if isinstance(message, bytes):
                self._send(
                    conn, {"op": "error", "code": "unsupported_message", "message": "binary"}
                )
                continue
            try:
                cmd = orjson.loads(message)
            except orjson.JSONDecodeError:
                self._send(conn, _error(None, "invalid_json", "unparseable command"))
                continue
            self.received.append(cmd)
            if not self._dispatch(conn, cmd, subs):
                return

    def _dispatch(self, conn: ServerConnection, cmd: dict[str, Any], subs: dict[str, int]) -> bool:
        op, rid = cmd.get("op"), cmd.get("request_id")
        if op == "ping":
            self._send(conn, {"op": "pong", "request_id": rid})
        elif op == "subscribe":
            self._subscribe(conn, cmd, subs)
        elif op == "unsubscribe":
            for t in cmd["topics"]:
                subs.pop(t, None)
            self._send(conn, {"op": "unsubscribed", "request_id": rid, "topics": cmd["topics"]})
        elif op == "publish":
            self._publish(conn, cmd, subs)
        elif op == "_shutdown":
            self._send(conn, {"op": "error", "code": "server_shutting_down", "message": "bye"})
            conn.close(1001)
            return False
        elif op == "_close":
            conn.close()
            return False
        return True

    def _subscribe(self, conn: ServerConnection, cmd: dict[str, Any], subs: dict[str, int]) -> None:
        rid = cmd.get("request_id")
        unknown = [t for t in cmd["topics"] if t not in self.topics]
        if unknown:
            self._send(conn, _error(rid, "topic_not_found", f"topic {unknown[0]!r} does not exist"))
            return
        starts = {}
        for t, spec in cmd["topics"].items():
            head = len(self.topics[t])
            subs[t] = head if spec.get("tail") else spec.get("from_seq", 0)
            starts[t] = {"from_seq": subs[t], "head_seq": head, "earliest_seq": 1}
        self._send(conn, {"op": "subscribed", "request_id": rid, "topics": starts})
        for t in cmd["topics"]:
            self._push(conn, t, subs)
            self._send(conn, {"op": "caught_up", "topic": t, "head_seq": len(self.topics[t])})

    def _publish(self, conn: ServerConnection, cmd: dict[str, Any], subs: dict[str, int]) -> None:
        t, rid = cmd["topic"], cmd.get("request_id")
        log = self.topics.setdefault(t, [])
        first = len(log) + 1
        for i, rec in enumerate(cmd["records"]):
            stored = {"$seq": first + i, "$ts": 1_780_420_000_000 + first + i, "data": rec["data"]}
            node = rec.get("node", cmd.get("node"))
            if node is not None:
                stored["$node"] = node
            log.append(stored)
        if t in subs:
            self._push(conn, t, subs)
        seqs = list(range(first, len(log) + 1))
        self._send(
            conn,
            {
                "op": "ack",
                "request_id": rid,
                "topic": t,
                "first_seq": first,
                "last_seq": len(log),
                "seqs": seqs if cmd.get("return_seqs", True) else None,
                "head_seq": len(log),
                "count": len(seqs),
                "created": first == 1,
                "deduped": False,
                "performance": {"server_total_ms": 0.1},
            },
        )

    def _push(self, conn: ServerConnection, t: str, subs: dict[str, int]) -> None:
        log, frm = self.topics[t], subs[t]
        if frm >= len(log):
            return
        recs = log[frm:]
        subs[t] = len(log)
        push = {"op": "record", "topic": t, "from_seq": frm, "to_seq": len(log)}
        self._send(conn, {**push, "head_seq": len(log), "records": recs})

    @staticmethod
    def _send(conn: ServerConnection, msg: dict[str, Any]) -> None:
        conn.send(orjson.dumps(msg).decode())


def _error(rid: Any, code: str, message: str) -> dict[str, Any]:
    return {"op": "error", "request_id": rid, "code": code, "message": message}
