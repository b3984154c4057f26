"""`seglog queue claim|ack|nack|extend|stats|work`: jobs on a queue topic (API §9).

`work` runs a command per job with the job as JSON on its stdin (and `SEGLOG_TOPIC`,
`SEGLOG_JOB_SEQ`, `SEGLOG_JOB_DELIVERIES` in its environment): exit 0 acks the job, any other
exit nacks it. The lease is extended while the command runs (`Client.work()`'s `with job:`),
so a slow job is not handed to another worker.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
from typing import Annotated, Any

import orjson
import typer
from rich.table import Table

from seglog.cli import common
from seglog.cli.common import AS_JSON, DEFAULT_URL, KEY, URL
from seglog.cli.output import (
    client_errors,
    emit_json,
    fail,
    iso_ms,
    note,
    stdout_console,
    usage,
    want_json,
)
from seglog.client import Job, Settled

app = typer.Typer(help="Claim, settle and work jobs on queue topics.", no_args_is_help=True)

QUEUE = Annotated[
    str, typer.Argument(metavar="TOPIC", help="Queue topic (created with --type queue).")
]
NODE = Annotated[str, typer.Option("--node", help="This worker's id (leases are held per node).")]
SEQS = Annotated[list[int], typer.Argument(metavar="SEQ", help="Job seqs (as printed by claim).")]
LEASE_IDS = Annotated[
    list[str] | None,
    typer.Option(
        "--lease-id", help="Fence to one delivery: a lease id per seq, in order (repeatable)."
    ),
]


def job_json(job: Job) -> dict[str, Any]:
    """A job as the wire sends it (API §9.1)."""
    obj = {
        "topic": job.topic,
        "$seq": job.seq,
        "lease_id": job.lease_id,
        "deadline": job.deadline,
        "$ts": job.ts,
        "deliveries": job.deliveries,
        "data": job.data,
        "$tag": job.tag,
        "meta": job.meta,
    }
    return {k: v for k, v in obj.items() if v is not None or k == "data"}


@app.command("claim")
def claim(
    topic: QUEUE,
    node: NODE,
    max_jobs: Annotated[int, typer.Option("--max", help="Claim up to this many jobs.")] = 1,
    lease_ms: Annotated[
        int | None, typer.Option(help="Lease length (ms); default: the topic's lease_ms.")
    ] = None,
    url: URL = DEFAULT_URL,
    api_key: KEY = None,
    as_json: AS_JSON = False,
) -> None:
    """Lease jobs to --node and print them (JSON lines when piped).

    Settle each with `queue ack` or `queue nack` before its deadline, or it becomes
    claimable again."""
    if max_jobs < 1:
        usage("--max must be >= 1")
    with client_errors(url), common.client(url, api_key) as c:
        res = c.claim(topic, node, max=max_jobs, lease_ms=lease_ms)
    if want_json(as_json):
        for job in res.jobs:
            emit_json(job_json(job))
    else:
        table = Table("seq", "lease_id", "deliveries", "deadline", "tag", "data")
        for j in res.jobs:
            table.add_row(
                str(j.seq),
                j.lease_id,
                str(j.deliveries),
                iso_ms(j.deadline),
                j.tag or "",
                orjson.dumps(j.data).decode(),
            )
        stdout_console().print(table)
    note(f"{topic}: claimed {len(res.jobs)}; {res.ready} ready", style="green")


def _settled(verb: str, res: Settled, as_json: bool) -> None:
    if want_json(as_json):
        body = dataclasses.asdict(res)
        body.pop("performance", None)
        emit_json({"result": verb, **body})
        return
    line = f"{res.topic}: {verb} {res.done}"
    if res.skipped:
        line += f"; skipped {', '.join(map(str, res.skipped))} (not held by this node, or expired)"
    if res.ready is not None:
        line += f"; {res.ready} ready, {res.in_flight} in flight"
    stdout_console().print(line, markup=False)


@app.command("ack")
def ack(
    topic: QUEUE,
    seqs: SEQS,
    node: NODE,
    lease_id: LEASE_IDS = None,
    url: URL = DEFAULT_URL,
    api_key: KEY = None,
    as_json: AS_JSON = False,
) -> None:
    """Acknowledge jobs --node holds: they are done and deleted."""
    with client_errors(url), common.client(url, api_key) as c:
        res = c.ack(topic, node, seqs, lease_ids=lease_id or None)
    _settled("acked", res, as_json)


@app.command("nack")
def nack(
    topic: QUEUE,
    seqs: SEQS,
    node: NODE,
    delay_ms: Annotated[int, typer.Option(help="Claimable again after this many ms.")] = 0,
    lease_id: LEASE_IDS = None,
    url: URL = DEFAULT_URL,
    api_key: KEY = None,
    as_json: AS_JSON = False,
) -> None:
    """Give jobs back: claimable again at once, or after --delay-ms."""
    with client_errors(url), common.client(url, api_key) as c:
        res = c.nack(topic, node, seqs, delay_ms=delay_ms, lease_ids=lease_id or None)
    _settled("nacked", res, as_json)


@app.command("extend")
def extend(
    topic: QUEUE,
    seqs: SEQS,
    node: NODE,
    lease_ms: Annotated[int, typer.Option(help="New deadline: now + this many ms.")],
    lease_id: LEASE_IDS = None,
    url: URL = DEFAULT_URL,
    api_key: KEY = None,
    as_json: AS_JSON = False,
) -> None:
    """Extend the leases of jobs --node holds (a heartbeat for slow work)."""
    with client_errors(url), common.client(url, api_key) as c:
        res = c.extend(topic, node, seqs, lease_ms, lease_ids=lease_id or None)
    _settled("extended", res, as_json)


@app.command("stats")
def stats(
    topic: QUEUE, url: URL = DEFAULT_URL, api_key: KEY = None, as_json: AS_JSON = False
) -> None:
    """Jobs ready to claim, in flight (leased) and dead-lettered."""
    with client_errors(url), common.client(url, api_key) as c:
        st = c.get_topic(topic, touch=False)
    if st.queue is None:
        fail(
            f"{topic!r} is a {st.type} topic, not a queue; hint: create one with "
            f"'seglog topics create NAME --type queue'"
        )
    q = {k: st.queue.get(k, 0) for k in ("ready", "in_flight", "dead_lettered")}
    if want_json(as_json):
        emit_json({"topic": topic, **q})
    else:
        stdout_console().print(
            f"{topic}: {q['ready']} ready, {q['in_flight']} in flight, "
            f"{q['dead_lettered']} dead-lettered",
            markup=False,
        )


@app.command("work")
def work(
    topic: QUEUE,
    cmd: Annotated[
        list[str], typer.Argument(metavar="CMD", help="Command run per job (after --).")
    ],
    node: NODE,
    max_jobs: Annotated[
        int, typer.Option("--max", help="Jobs leased to this worker at a time (run in order).")
    ] = 1,
    lease_ms: Annotated[int | None, typer.Option(help="Lease length (ms).")] = None,
    nack_delay_ms: Annotated[
        int, typer.Option(help="After a failed job, claimable again after this many ms.")
    ] = 0,
    count: Annotated[
        int, typer.Option(help="Stop after this many jobs (0 = run until interrupted).")
    ] = 0,
    url: URL = DEFAULT_URL,
    api_key: KEY = None,
) -> None:
    """Run CMD once per job, the job JSON on its stdin: exit 0 acks, anything else nacks.

    Example: seglog queue work jobs --node w1 -- ./handle.sh"""
    if not cmd:
        usage("give the command to run after --")
    acked = nacked = 0
    with client_errors(url), common.client(url, api_key) as c:
        jobs = c.work(topic, node, max=max_jobs, lease_ms=lease_ms, nack_delay_ms=nack_delay_ms)
        try:
            for job in jobs:
                with job:
                    env = os.environ | {
                        "SEGLOG_TOPIC": topic,
                        "SEGLOG_JOB_SEQ": str(job.seq),
                        "SEGLOG_JOB_DELIVERIES": str(job.deliveries),
                    }
                    try:
                        rc = subprocess.run(
                            cmd, input=orjson.dumps(job_json(job.job)), env=env, check=False
                        ).returncode
                    except OSError as e:
                        job.nack(nack_delay_ms)
                        fail(f"cannot run {cmd[0]!r}: {e}")
                    if rc == 0:
                        job.ack()
                        acked += 1
                    else:
                        job.nack(nack_delay_ms)
                        nacked += 1
                        note(f"{topic}: job {job.seq} failed (exit {rc}); nacked")
                if count and acked + nacked >= count:
                    break
        finally:
            jobs.close()
            note(f"{topic}: {acked} acked, {nacked} nacked", style="green")
