"""The Arrow IPC diff of a packed read (sealed records as arrays and segment spans,
`PackedColumns`) is the stream the same page read as lists encodes to: every column, with
and without tags and meta, over pages spanning several segments and deletes."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from seglog.engine.maintenance import seal_topic
from seglog.http.arrow_diff import encode_arrow_diff
from seglog.model import PackedColumns, RecordIn, TopicConfig
from tests.engine.test_column_read import sealing_engine


@pytest.mark.parametrize("include_tags", [True, False])
@pytest.mark.parametrize("include_meta", [True, False])
def test_a_packed_page_encodes_to_the_stream_of_its_list_read(
    tmp_path: Path, include_tags: bool, include_meta: bool
) -> None:
    e = sealing_engine(tmp_path)
    try:
        e.put_topic("p", TopicConfig())
        for i in range(5):
            e.write("p", [
                RecordIn.of({"i": i, "j": j, "s": "é"}, node="n" if j % 3 else None,
                            tag=f"t{j % 4}" if j % 5 else None)
                for j in range(100)
            ])  # fmt: skip
        seal_topic(e, e.topics["p"], force=True)
        e.delete_records("p", seqs=[5, 150, 151, 420])
        for cursor, limit in ((0, 1000), (90, 250), (149, 3)):
            packed = e.read("p", cursor, limit, max_bytes=1 << 30, columnar=True, packed=True)
            lists = e.read("p", cursor, limit, max_bytes=1 << 30, columnar=True)
            assert isinstance(packed.columns, PackedColumns)
            assert not isinstance(lists.columns, PackedColumns)
            assert len(packed.columns.data) > 1 or limit == 3  # several segment runs
            streams = [
                encode_arrow_diff(r, include_tags, include_meta, b"{}") for r in (packed, lists)
            ]
            got, want = (pa.ipc.open_stream(s).read_all() for s in streams)
            assert got.equals(want) and got.num_rows == len(lists.columns)
    finally:
        e.close(snapshot=False)
