"""PySpark data source for seglog: format `seglog` (online; offline with `path`) and
`seglog_files` (offline segment files). See docs/spark.md.

Both formats are also registered statically through the top-level modules `pyspark_seglog`
and `pyspark_seglog_files` (Spark imports every `pyspark_*` module's `DefaultSource`), so
they work without any call. `register(spark)` additionally enables filter pushdown (`seq`,
`topic`) for batch reads in that session, which Spark only allows when a session setting is on.
"""

from __future__ import annotations

from typing import Any

from seglog.spark.errors import SeglogCorruptionError, SeglogDataLossError
from seglog.spark.files import SeglogFilesDataSource
from seglog.spark.options import SeglogOptionError
from seglog.spark.source import SeglogDataSource

__all__ = [
    "SeglogCorruptionError",
    "SeglogDataLossError",
    "SeglogDataSource",
    "SeglogFilesDataSource",
    "SeglogOptionError",
    "register",
]


def register(spark: Any, *, pushdown: bool = True) -> None:
    """Register `seglog` and `seglog_files` on a SparkSession. With `pushdown` (default) this
    turns on `spark.sql.python.filterPushdown.enabled` for the session and registers the
    `seglog` variant that narrows batch reads by `seq` and `topic` filters."""
    if pushdown:
        from seglog.spark.pushdown import SeglogPushdownDataSource

        spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
        spark.dataSource.register(SeglogPushdownDataSource)
    else:
        spark.dataSource.register(SeglogDataSource)
    spark.dataSource.register(SeglogFilesDataSource)
