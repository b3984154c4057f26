"""The connector end to end: real seglog servers (subprocesses), one local SparkSession.

Each test uses its own topics on the shared server (or its own server where it must stop it).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.spark.conftest import ServerProc

pytestmark = pytest.mark.spark

Row = tuple[str, int, int, str | None, str | None, Any, Any]


def make_records(n: int, offset: int = 0) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i in range(offset, offset + n):
        rec: dict[str, Any] = {
            "data": {"i": i, "page": f"/p{i % 7}", "user": f"u{i % 5}"},
            "tag": f"tag{i % 3}",
        }
        if i % 2:
            rec["meta"] = {"trace": f"tr{i}"}
        if i % 4 == 0:
            rec["node"] = "node-a"
        out.append(rec)
    return out


def append(
    client: Any, topic: str, records: list[dict[str, Any]], config: dict[str, Any] | None = None
) -> None:
    for i in range(0, len(records), 5000):
        client.append(topic, records[i : i + 5000], config=config, return_seqs=False)


def http_rows(client: Any, topic: str) -> list[Row]:
    """Everything live in `topic`, straight from the diff API."""
    rows: list[Row] = []
    cursor = 0
    while True:
        res = client.diff(topic, cursor, limit=1000, include_tags=True, include_meta=True)
        rows += [(topic, r.seq, r.ts, r.tag, r.node, r.data, r.meta) for r in res.records]
        if res.caught_up or res.next_from_seq <= cursor:
            return rows
        cursor = res.next_from_seq


def spark_rows(df: Any) -> list[Row]:
    got = df.selectExpr(
        "topic", "seq", "unix_millis(ts) AS ts", "tag", "node", "data", "meta"
    ).collect()
    return sorted(
        (
            r.topic,
            r.seq,
            r.ts,
            r.tag,
            r.node,
            orjson.loads(r.data),
            None if r.meta is None else orjson.loads(r.meta),
        )
        for r in got
    )


def seglog_read(spark: Any, url: str, **opts: Any) -> Any:
    reader = spark.read.format("seglog").option("url", url)
    for k, v in opts.items():
        reader = reader.option(k, v)
    return reader.load()


def test_batch_read_equals_http_api(spark: Any, server: ServerProc) -> None:
    c = server.client()
    append(c, "br.a", make_records(2500))
    append(c, "br.b", make_records(700, offset=10_000))
    df = seglog_read(spark, server.url, topicPrefix="br.", maxRecordsPerPartition=1000)
    assert df.rdd.getNumPartitions() == 4  # 1000+1000+500 and 700
    assert spark_rows(df) == sorted(http_rows(c, "br.a") + http_rows(c, "br.b"))

    # explicit [start, end) seqs, minPartitions, a parsed data schema, and a timestamp start
    part = seglog_read(
        spark,
        server.url,
        topics="br.a",
        startingSeqs='{"br.a": 101}',
        endingSeqs='{"br.a": 201}',
        minPartitions=3,
        dataSchema="i int, page string",
    )
    assert part.rdd.getNumPartitions() == 3
    got = part.selectExpr("seq", "data.i AS i").orderBy("seq").collect()
    assert [r.seq for r in got] == list(range(101, 201))
    assert [r.i for r in got] == list(range(100, 200))
    ts_1500 = http_rows(c, "br.a")[1499][2]
    since = seglog_read(spark, server.url, topics="br.a", startingTimestamp=ts_1500)
    seqs = [r.seq for r in since.select("seq").collect()]
    assert min(seqs) <= 1500 and max(seqs) == 2500
    assert seglog_read(spark, server.url, topics="br.b", startingSeqs="latest").count() == 0

    # register() turns on pushdown: seq/topic filters shrink the plan to what they select
    from seglog.spark import register

    register(spark)
    tail = seglog_read(spark, server.url, topicPrefix="br.", maxRecordsPerPartition=1000).where(
        "seq > 2400 AND topic = 'br.a'"
    )
    assert tail.rdd.getNumPartitions() == 1
    assert [r.seq for r in tail.select("seq").collect()] == list(range(2401, 2501))

    # ts bounds become seq bounds by binary search (ts never decreases with seq)
    append(c, "br.ts", make_records(300))
    first_ts = http_rows(c, "br.ts")[0][2]
    while http_rows(c, "br.ts")[-1][2] == first_ts:  # until the server's clock moved on
        append(c, "br.ts", make_records(1, offset=500))
    append(c, "br.ts", make_records(300, offset=1000))
    rows = http_rows(c, "br.ts")
    later = [r for r in rows if r[2] > first_ts]
    whole = seglog_read(spark, server.url, topics="br.ts", maxRecordsPerPartition=100)
    recent = whole.where(f"ts > timestamp_millis({first_ts})")
    assert recent.rdd.getNumPartitions() == -(-(len(rows) - 300) // 100)  # seqs 301.. only
    assert [r.seq for r in recent.select("seq").collect()] == [r[1] for r in later]
    window = whole.where(
        f"ts >= timestamp_millis({first_ts}) AND ts <= timestamp_millis({first_ts})"
    )
    assert window.rdd.getNumPartitions() == 3  # seqs 1..300 only
    assert window.count() == 300


def _run_available_now(
    spark: Any, url: str, topic: str, ckpt: Path, sink: Callable[[Any, int], None], **opts: Any
) -> None:
    reader = spark.readStream.format("seglog").option("url", url).option("topics", topic)
    for k, v in opts.items():
        reader = reader.option(k, v)
    q = (
        reader.load()
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(ckpt))
        .trigger(availableNow=True)
        .start()
    )
    try:
        q.awaitTermination(120)
    finally:
        q.stop()


def test_stream_three_batches_with_restart(spark: Any, server: ServerProc, tmp_path: Path) -> None:
    c = server.client()
    append(c, "st.clicks", make_records(20))
    batches: list[tuple[int, list[int]]] = []

    def collect(df: Any, batch_id: int) -> None:
        batches.append((batch_id, sorted(r.seq for r in df.select("seq").collect())))

    ckpt = tmp_path / "ckpt"
    opts = {"startingSeqs": "earliest", "maxRecordsPerTrigger": 10}
    _run_available_now(spark, server.url, "st.clicks", ckpt, collect, **opts)
    assert batches == [(0, list(range(1, 11))), (1, list(range(11, 21)))]
    append(c, "st.clicks", make_records(10, offset=20))
    # a new query object on the same checkpoint = a restart; startingSeqs no longer applies
    _run_available_now(spark, server.url, "st.clicks", ckpt, collect, **opts)
    assert batches[2:] == [(2, list(range(21, 31)))]
    seqs = [s for _, b in batches for s in b]
    assert seqs == list(range(1, 31))


def test_data_loss_on_capped_topic(spark: Any, server: ServerProc, tmp_path: Path) -> None:
    c = server.client()
    topic = "dl.capped"
    c.put_topic(topic, config={"cap_records": 10})
    append(c, topic, make_records(10))
    seen: list[int] = []

    def collect(df: Any, batch_id: int) -> None:
        seen.extend(r.seq for r in df.select("seq").collect())

    ckpt = tmp_path / "ckpt"
    _run_available_now(spark, server.url, topic, ckpt, collect, startingSeqs="earliest")
    assert seen == list(range(1, 11))
    append(c, topic, make_records(25, offset=10))  # head 35, cap 10: seqs 11..25 evicted unread
    with pytest.raises(Exception, match=r"seqs 11\.\.25 \(15 records\) were removed \(cap\)"):
        _run_available_now(spark, server.url, topic, ckpt, collect)
    assert seen == list(range(1, 11))
    _run_available_now(spark, server.url, topic, ckpt, collect, failOnDataLoss="false")
    assert seen == list(range(1, 11)) + list(range(26, 36))

    with pytest.raises(Exception, match="seglog data loss"):
        seglog_read(spark, server.url, topics=topic, startingSeqs='{"dl.capped": 1}').collect()
    lenient = seglog_read(
        spark, server.url, topics=topic, startingSeqs='{"dl.capped": 1}', failOnDataLoss="false"
    )
    assert sorted(r.seq for r in lenient.select("seq").collect()) == list(range(26, 36))


def offline_read(spark: Any, srv: ServerProc, **opts: str) -> Any:
    reader = spark.read.format("seglog").option("path", str(srv.data_dir))
    for k, v in opts.items():
        reader = reader.option(k, v)
    return reader.load()


def test_offline_read_equals_online(spark: Any, server_factory: Callable[..., ServerProc]) -> None:
    srv = server_factory({"SEGLOG_SEGMENT_MAX_EVENTS": "100"})
    c = srv.client()
    c.put_topic("off.a", config={"cap_records": 700})
    append(c, "off.a", make_records(1000))
    append(c, "off.b", make_records(300, offset=5000))
    # one more record each completes the last full segment and starts an unsealed tail
    append(c, "off.a", make_records(1, offset=9999))
    append(c, "off.b", make_records(1, offset=9999))
    import httpx  # the tag delete flips del_flag in sealed segments (SEMANTICS §7)

    r = httpx.post(
        f"{srv.url}/v0/topics/off.a/delete", json={"match": ["tag", "Eq", "tag1"]}, timeout=30
    )
    assert r.status_code == 200 and r.json()["deleted"] > 200
    online = spark_rows(seglog_read(spark, srv.url, topicPrefix="off."))
    assert len(online) == 700 - 233 + 301  # cap 700 over head 1001 leaves 302..1001, less tag1
    time.sleep(0.5)  # the server seals full segments in the background
    srv.stop()
    assert srv.proc.returncode == 0

    sealed_segments = on_disk_segments(srv.data_dir)
    assert len(sealed_segments["off.a"]) >= 5  # segment partitions, not only the tail
    df = offline_read(spark, srv, topicPrefix="off.", maxRecordsPerPartition="1")
    assert spark_rows(df) == online  # nothing below the floors, nothing deleted, nothing missing
    live_segments = [
        (t, lo, hi)
        for t, ranges in sealed_segments.items()
        for lo, hi in ranges
        if any(r[0] == t and lo <= r[1] <= hi for r in online)
    ]
    # + one partition per topic with records in no sealed segment (its unsealed tail)
    tails = {
        r[0]
        for r in online
        if not any(lo <= r[1] <= hi for lo, hi in sealed_segments.get(r[0], []))
    }
    assert df.rdd.getNumPartitions() == len(live_segments) + len(tails)
    grouped = offline_read(spark, srv, topicPrefix="off.")  # whole segments, 250k records a task
    assert spark_rows(grouped) == online
    assert grouped.rdd.getNumPartitions() == len({t for t, _, _ in live_segments}) + len(tails)
    only_b = spark.read.format("seglog_files").option("topics", "off.b").load(str(srv.data_dir))
    assert spark_rows(only_b) == [r for r in online if r[0] == "off.b"]

    # register() pushes seq/topic (exact) and ts (as a seq span) filters into the plan
    from seglog.spark import register

    register(spark)
    b_rows = [r for r in online if r[0] == "off.b"]
    cut_ts = b_rows[150][2]
    pushed = offline_read(spark, srv, topicPrefix="off.").where(
        f"topic = 'off.b' AND seq > 20 AND ts >= timestamp_millis({cut_ts})"
    )
    assert spark_rows(pushed) == [r for r in b_rows if r[1] > 20 and r[2] >= cut_ts]
    assert pushed.rdd.getNumPartitions() <= 2  # off.a is not even replayed


@pytest.mark.parametrize("stop", ["sigterm", "sigkill"])
def test_offline_equals_online_after_restart(
    spark: Any, server_factory: Callable[..., ServerProc], tmp_path: Path, stop: str
) -> None:
    """Issue 11's report: a stopped server's data dir, read offline, returns exactly what
    the restarted server returns online — two topics, one created after the last snapshot,
    records only in the WAL, deletes, a cap and a cold tier."""
    import httpx

    cold = tmp_path / "cold"
    env = {
        "SEGLOG_SEGMENT_MAX_EVENTS": "1000",
        "SEGLOG_COLD_DIR": str(cold),
        "SEGLOG_HOT_RETAIN_SEGMENTS": "1",
    }
    srv = server_factory(env, name=f"restart-{stop}")
    c = srv.client()
    c.put_topic("rs.a", config={"cap_records": 9_000})
    append(c, "rs.a", make_records(10_000))
    r = httpx.post(
        f"{srv.url}/v0/topics/rs.a/delete", json={"match": ["tag", "Eq", "tag1"]}, timeout=30
    )
    assert r.status_code == 200
    deadline = time.monotonic() + 20  # the relocator runs every 5 s
    while not list(cold.rglob("*.data")):
        assert time.monotonic() < deadline, "no segment reached the cold tier"
        time.sleep(0.2)
    srv.restart()  # a clean stop: the snapshot holds everything so far
    c = srv.client()
    append(c, "rs.a", make_records(4_500, offset=10_000))  # the WAL (and new segments) only
    append(c, "rs.b", make_records(3_000, offset=50_000))  # a topic after the last snapshot
    r = httpx.post(f"{srv.url}/v0/topics/rs.b/delete", json={"before_seq": 11}, timeout=30)
    assert r.status_code == 200 and r.json()["deleted"] == 10
    r = httpx.post(  # flags in hot and cold segments, and a Delete frame only in the WAL
        f"{srv.url}/v0/topics/rs.a/delete", json={"match": ["tag", "Eq", "tag2"]}, timeout=30
    )
    assert r.status_code == 200 and r.json()["deleted"] > 1000
    if stop == "sigterm":
        assert srv.stop() == 0
    else:
        srv.kill()

    got = spark_rows(offline_read(spark, srv, topicPrefix="rs.", coldPath=str(cold)))
    srv.start()
    online = spark_rows(seglog_read(spark, srv.url, topicPrefix="rs."))
    assert got == online
    a = [r for r in got if r[0] == "rs.a"]
    b = [r for r in got if r[0] == "rs.b"]
    assert len(b) == 2_990 and b[0][1] == 11
    assert a[-1][1] == 14_500 and 5_000 < len(a) < 9_000  # capped, then tag2 deleted
    assert a[0][1] > 1_000  # the cap evicted the oldest live records
    assert not any(r[3] == "tag2" or (r[3] == "tag1" and r[1] <= 10_000) for r in a)


def test_offline_read_of_a_running_server_is_as_of_its_newest_snapshot(
    spark: Any, server_factory: Callable[..., ServerProc]
) -> None:
    """The lock a server process holds is detected (without writing): the WAL is not read
    and the read is the newest snapshot's state, as docs/spark.md states."""
    srv = server_factory({"SEGLOG_SEGMENT_MAX_EVENTS": "500"}, name="running")
    append(srv.client(), "run.a", make_records(1_200))
    srv.restart()  # the shutdown snapshot
    at_snapshot = spark_rows(seglog_read(spark, srv.url, topicPrefix="run."))
    c = srv.client()
    append(c, "run.a", make_records(700, offset=1_200))  # WAL and new segments only
    append(c, "run.b", make_records(100))  # a topic after the snapshot
    got = spark_rows(offline_read(spark, srv, topicPrefix="run."))
    assert got == at_snapshot and len(got) == 1_200
    with pytest.raises(Exception, match="requireStopped"):
        offline_read(spark, srv, topicPrefix="run.", requireStopped="true").collect()
    srv.stop()
    assert len(spark_rows(offline_read(spark, srv, topicPrefix="run."))) == 2_000


def on_disk_segments(data_dir: Path) -> dict[str, list[tuple[int, int]]]:
    """Seq ranges of the sealed segment files per topic, via the storage read-only API."""
    from seglog.storage.fs import RealFs
    from seglog.storage.segment import list_topic_segments
    from seglog.storage.snapshot import load_latest_snapshot

    body = load_latest_snapshot(RealFs(), data_dir / "meta")
    assert body is not None
    return {
        t["name"]: [
            (s.first_seq, s.last_seq) for s in list_topic_segments(data_dir, int(t["topic_id"]))
        ]
        for t in body["topics"]
    }


def test_sink_idempotent_under_task_retry(spark: Any, server: ServerProc, tmp_path: Path) -> None:
    from pyspark.sql import functions as F

    c = server.client()
    marker = tmp_path / "attempt0-failed"
    url, dest = server.url, "sink.dest"

    def tag_or_die(i: int) -> str:
        """Partition 0, attempt 0, row 300: wait until the sink has appended a chunk of the
        rows before it, then die, so the retry re-sends chunks that already landed."""
        import httpx
        from pyspark import TaskContext

        ctx = TaskContext.get()
        if i == 300 and ctx is not None and ctx.partitionId() == 0 and ctx.attemptNumber() == 0:
            head, deadline = 0, time.monotonic() + 30
            while head < 100 and time.monotonic() < deadline:
                r = httpx.get(f"{url}/v0/topics/{dest}?touch=false", timeout=5)
                head = r.json()["head_seq"] if r.status_code == 200 else 0
                time.sleep(0.05)
            marker.write_text(str(head))
            raise RuntimeError("injected task failure after the first chunks were written")
        return f"k{i}"

    n = 1200
    tag = F.udf(tag_or_die, "string", useArrow=False)
    src = spark.range(0, n, numPartitions=3).select(
        F.to_json(F.struct(F.col("id").alias("id"))).alias("data"), tag(F.col("id")).alias("tag")
    )
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "200")
    try:
        src.write.format("seglog").option("url", url).option("topic", dest).option(
            "writeBatchSize", 100
        ).mode("append").save()
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    assert marker.exists(), "the first attempt of partition 0 did not fail as planned"
    assert int(marker.read_text()) >= 100, "the sink had appended nothing before the failure"
    rows = http_rows(c, dest)
    ids = [r[5]["id"] for r in rows]
    assert len(ids) == n and sorted(ids) == list(range(n)), (
        "a retried task duplicated or lost records"
    )
    assert c.get_topic(dest).head_seq == n

    bad = spark.createDataFrame([("{}", 1)], "data string, extra int")
    with pytest.raises(Exception, match="unknown column"):
        bad.write.format("seglog").option("url", url).option("topic", dest).mode("append").save()
    with pytest.raises(Exception, match="append-only"):
        src.write.format("seglog").option("url", url).option("topic", dest).mode("overwrite").save()
