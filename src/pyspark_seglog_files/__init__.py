"""Static registration of format "seglog_files" (offline segment files)."""

from seglog.spark.files import SeglogFilesDataSource as DefaultSource

__all__ = ["DefaultSource"]
