"""Where the CLI's output goes and in what shape.

stdout carries data only: a rich table or panel when it is a terminal, JSON (one value per
line) when it is piped or `--json` is given, so `seglog topics ls | jq` never sees box
drawing. stderr carries everything meant for people (summaries, tombstone explanations,
errors), never hard-wrapped: a log file or CI capture keeps each message on one line.
Every client failure becomes one `seglog: error: ...` line naming the server's host:port and
a hint, with exit code 1 (typer's usage errors keep exit code 2)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NoReturn
from urllib.parse import urlsplit

import orjson
import typer
from rich.console import Console

from seglog.client import SeglogClientError, SeglogConnectionError, SeglogHTTPError

# soft_wrap: rich never inserts line breaks of its own; a terminal wraps long lines itself.
err = Console(stderr=True, soft_wrap=True, highlight=False)


def stdout_console() -> Console:
    """A console for tables; built per call so tests that swap `sys.stdout` are honoured."""
    return Console(file=sys.stdout, soft_wrap=True, highlight=False)


def want_json(as_json: bool) -> bool:
    """JSON when asked, or when stdout is not a terminal (a pipe, a file, a test runner)."""
    return as_json or not sys.stdout.isatty()


def emit_json(obj: Any) -> None:
    sys.stdout.write(orjson.dumps(obj, option=orjson.OPT_NON_STR_KEYS).decode() + "\n")


def note(text: str, style: str = "yellow") -> None:
    """One message for people on stderr, after the data already printed on stdout."""
    sys.stdout.flush()
    err.print(text, markup=False, style=style)


def address(url: str) -> str:
    """`host:port` of a base URL, with the scheme's default port filled in."""
    parts = urlsplit(url if "://" in url else f"http://{url}")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return f"{parts.hostname or '?'}:{port}"


_HINTS = {
    "unauthorized": "pass --api-key or set SEGLOG_API_KEY",
    "forbidden": "the API key lacks the scope or name prefix this needs",
    "topic_not_found": "list topics with 'seglog topics ls', or create it with 'seglog topics create'",
    "not_found": "check the name, or whether this server version has the route",
    "not_a_queue": "queue commands need a topic created with 'seglog topics create --type queue'",
    "topic_exists_incompatible": "a topic's type cannot change; delete and recreate it",
    "topic_not_empty": "drop --if-empty to delete it with its records",
    "batch_too_large": "send fewer records per write (--batch-size)",
    "record_too_large": "a record's data+meta must stay under 1 MiB",
    "payload_too_large": "send fewer records per write (--batch-size)",
    "topic_full": "the topic is at its cap with discard=reject; raise the cap or delete records",
    "throttled": "a server resource cap was hit; retry later",
    "not_ready": "the server is still recovering; retry shortly",
    "shutting_down": "the server is shutting down; retry once it is back",
    "invalid_request": "see 'seglog COMMAND --help' for the accepted values",
}


def describe_error(e: SeglogClientError, url: str) -> str:
    """The one line printed for a client failure: where, what, and what to do about it."""
    where = address(url)
    if isinstance(e, SeglogConnectionError):
        what = str(e).splitlines()[0] if str(e) else type(e).__name__
        return (
            f"cannot reach the seglog server at {where} ({what}); "
            "hint: is it running? set --url or SEGLOG_URL"
        )
    if isinstance(e, SeglogHTTPError):
        hint = _HINTS.get(e.code, "")
        code = e.wire_code or e.code
        text = f"{where}: {e.status} {code}: {e.message}"
        return f"{text}; hint: {hint}" if hint else text
    return f"{where}: {type(e).__name__}: {e}"


def fail(message: str, code: int = 1) -> NoReturn:
    """Print `seglog: error: message` on stderr and exit with `code`."""
    sys.stdout.flush()
    err.print(f"[red]seglog: error:[/red] {_escape(message)}")
    raise typer.Exit(code)


def usage(message: str) -> NoReturn:
    """A bad combination of options: exit code 2, as typer's own usage errors."""
    fail(message, 2)


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(" ".join(text.split("\n")))


@contextmanager
def client_errors(url: str) -> Iterator[None]:
    """Turn any client failure inside the block into one error line and exit code 1; Ctrl-C
    ends quietly (exit 130), as a pipeline stage should."""
    try:
        yield
    except SeglogClientError as e:
        fail(describe_error(e, url))
    except KeyboardInterrupt:
        sys.stdout.flush()
        raise typer.Exit(130) from None
    except BrokenPipeError:
        # Whoever read stdout is gone (`| head -1`): not a failure of ours. Stop as a Unix
        # tool stopped by SIGPIPE does (141), with nothing more sent to the closed pipe.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        raise typer.Exit(141) from None


def human_bytes(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"  # pragma: no cover


def iso_ms(ts: int | None) -> str:
    """Epoch milliseconds as a UTC ISO-8601 time with milliseconds ('-' for none)."""
    if ts is None:
        return "-"
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ts / 1000, UTC).isoformat(timespec="milliseconds")
