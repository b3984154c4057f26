"""Static registration of format "seglog" (Spark imports `pyspark_*` modules' DefaultSource)."""

from seglog.spark.source import SeglogDataSource as DefaultSource

__all__ = ["DefaultSource"]
