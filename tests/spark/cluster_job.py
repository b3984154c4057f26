"""The driver of the standalone-cluster test, run in its own process (one SparkContext per
process, and the suite's local session already holds one): batch read, streaming copy and
sink against `spark://...`, results printed as one JSON line for the test to check.

usage: python -m tests.spark.cluster_job MASTER_URL SERVER_URL WORK_DIR
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import orjson


def main(master: str, url: str, work: Path) -> None:
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master(master)
        .appName("seglog-cluster-test")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.executor.cores", "1")
        .config("spark.executor.memory", "512m")
        .config("spark.cores.max", "2")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.pyspark.python", sys.executable)
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        read = (
            spark.read.format("seglog")
            .option("url", url)
            .option("topics", "cl.src")
            .option("maxRecordsPerPartition", 250)
            .load()
        )
        partitions = read.rdd.getNumPartitions()
        batch = [
            [r.seq, r.tag, r.data]
            for r in read.select("seq", "tag", "data").orderBy("seq").collect()
        ]
        executors = sorted(
            {
                r.host
                for r in read.rdd.mapPartitions(
                    lambda _: [__import__("pyspark").sql.Row(host=str(os.getppid()))]
                ).collect()
            }
        )
        q = (
            spark.readStream.format("seglog")
            .option("url", url)
            .option("topics", "cl.src")
            .option("startingSeqs", "earliest")
            .option("maxRecordsPerPartition", 250)
            .load()
            .select("data", "tag")
            .writeStream.format("seglog")
            .option("url", url)
            .option("topic", "cl.copy")
            .option("checkpointLocation", str(work / "ckpt"))
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination(240)
        q.stop()
        rows = [(f'{{"k":{i}}}', f"t{i % 3}") for i in range(600)]
        spark.createDataFrame(rows, "data string, tag string").repartition(2).write.format(
            "seglog"
        ).option("url", url).option("topic", "cl.sink").mode("append").save()
        out = {
            "partitions": partitions,
            "batch": batch,
            "daemon_pids": executors,  # each executor forks its Python workers from one daemon
            "driver_pid": str(os.getpid()),
            "default_parallelism": spark.sparkContext.defaultParallelism,
        }
        print("RESULT " + orjson.dumps(out).decode(), flush=True)
    finally:
        spark.stop()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], Path(sys.argv[3]))
