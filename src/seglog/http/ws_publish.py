"""The WebSocket `publish` command (API §8): the HTTP write path, answered as an `ack`."""

from __future__ import annotations

from typing import Any

import orjson

from seglog.errors import ErrorCode, SeglogError
from seglog.http.app_state import ServerState
from seglog.http.auth import Principal, Scope
from seglog.http.body_fields import bool_field
from seglog.http.common import elapsed_ms, started
from seglog.http.json_body import check_integers
from seglog.http.topic_config import parse_config
from seglog.http.write_request import parse_write


async def publish(
    st: ServerState, who: Principal, name: str, cmd: dict[str, Any], rid: Any, text: str
) -> bytes:
    """Scope checks first (write; admin too when a `config` is given; the name), then the
    body rules of `POST /v0/topics/:topic` (`text`: the command as sent, checked for
    integers outside 64 bits as an HTTP body is: orjson read them as floats), then the
    write."""
    t0 = started()
    if not who.has(Scope.WRITE):
        raise SeglogError(ErrorCode.FORBIDDEN, "api key lacks write scope")
    if cmd.get("config") is not None and not who.has(Scope.ADMIN):
        raise SeglogError(
            ErrorCode.FORBIDDEN, "publish with a config needs the admin scope", {"topic": name}
        )
    if not who.allows(name):
        raise SeglogError(ErrorCode.FORBIDDEN, f"api key may not access {name!r}", {"topic": name})
    check_integers(text.encode())
    req = parse_write(cmd)
    st.check_write_pressure()
    return_seqs = bool_field(cmd, "return_seqs", True)
    config = parse_config(req.config) if req.config is not None else None
    res = await st.db.write(
        name,
        req.records,
        node=req.node,
        idempotency_key=req.idempotency_key,
        create=req.create,
        config=config,
    )
    return orjson.dumps(
        {
            "op": "ack",
            "request_id": rid,
            "topic": res.topic,
            "first_seq": res.first_seq,
            "last_seq": res.last_seq,
            "seqs": res.seqs if return_seqs else None,
            "head_seq": res.head_seq,
            "count": res.count,
            "created": res.created,
            "deduped": res.deduped,
            "performance": {
                "server_total_ms": elapsed_ms(t0),
                "wal_append_ms": float(res.wal_append_ms),
                "fsync_ms": float(res.fsync_ms),
            },
        }
    )
