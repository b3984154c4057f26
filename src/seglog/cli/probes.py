"""`seglog health` and `seglog metrics`."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from seglog.cli import common
from seglog.cli.common import AS_JSON, DEFAULT_URL, KEY, URL
from seglog.cli.output import (
    address,
    client_errors,
    emit_json,
    note,
    stdout_console,
    want_json,
)
from seglog.client import NotReady


def _uptime(ms: int) -> str:
    s = ms // 1000
    d, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    parts = [f"{d}d"] * bool(d) + [f"{h}h"] * bool(h) + [f"{m}m"] * bool(m) + [f"{s}s"]
    return " ".join(parts)


def health(url: URL = DEFAULT_URL, api_key: KEY = None, as_json: AS_JSON = False) -> None:
    """Is the server up and ready? Exit code 0 when ready, 1 when not (or unreachable)."""
    with client_errors(url), common.client(url, api_key) as c:
        h = c.health()
        try:
            r = c.ready()
            ready: dict[str, object] = {
                "status": r.status,
                "wal_replay_complete": r.wal_replay_complete,
                "topics": r.topics,
            }
        except NotReady as e:
            ready = {"status": "not_ready", "replay_progress": e.replay_progress}
    ok = ready["status"] == "ready"
    if want_json(as_json):
        emit_json(
            {"status": h.status, "version": h.version, "uptime_ms": h.uptime_ms, "ready": ready}
        )
    else:
        where = address(url)
        line = f"{h.status}: seglog {h.version} at {where}, up {_uptime(h.uptime_ms)}; "
        if ok:
            line += f"ready, {ready['topics']} topics"
        else:
            progress = ready.get("replay_progress")
            line += "not ready" + (
                f" (recovery {float(progress) * 100:.0f}%)" if isinstance(progress, float) else ""
            )
        stdout_console().print(line, markup=False)
    if not ok:
        note("seglog: the server is not ready yet (recovering)")
        raise typer.Exit(1)


def metrics(
    url: URL = DEFAULT_URL,
    api_key: KEY = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="The JSON snapshot instead of Prometheus text.")
    ] = False,
) -> None:
    """The server's metrics: Prometheus text exposition, or a JSON snapshot with --json."""
    with client_errors(url), common.client(url, api_key) as c:
        if as_json:
            emit_json(c.metrics_json())
        else:
            text = c.metrics()
            sys.stdout.write(text if text.endswith("\n") else text + "\n")
