"""The oldest slots of a topic's index, held as numpy columns instead of Python lists.

A slot whose payload lives only in a sealed segment (`data` and `meta` None in memory) needs
just `ts`, size, node and tag in memory. In the list columns that is six 8-byte pointers per
record plus a 32-byte `int` for many `ts` values — 53 B per record measured, the whole of a
server's memory at tens of millions of records. Here it is 8 + 4 + 1 + 1 bytes (labels are
codes into one table per topic, 0 for None, one byte each while the topic has at most 255
distinct labels), and recovery fills it straight from a
segment's decoded columns without making a Python object per record.

Owner: the `TopicState` that holds it, under that topic's lock. Indices are slot indices
(`seq - origin`); the frozen slots are always a prefix `[0, n)` of the topic's slots, so
they grow only at their end (`extend`, while the topic's list columns are empty past them,
or by moving the lists' head here) and shrink only at their front (`drop_prefix`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import numpy as np
import numpy.typing as npt

Codes = npt.NDArray[np.unsignedinteger]
# A column of labels as a table and codes into it: code 0 is None, code k is table[k - 1].
CodedLabels = tuple[list[str], Codes]

# Codes are as narrow as the table allows, widening as it grows past each limit.
_WIDTHS = ((0xFF, np.uint8), (0xFFFF, np.uint16), (0xFFFFFFFF, np.uint32))


class FrozenSlots:
    __slots__ = ("_code", "_labels", "_node", "_size", "_table", "_tag", "_ts", "n")

    def __init__(self) -> None:
        self.n = 0
        self._ts = np.empty(0, np.int64)
        self._size = np.empty(0, np.uint32)
        self._node: Codes = np.empty(0, np.uint8)
        self._tag: Codes = np.empty(0, np.uint8)
        self._labels: list[str | None] = [None]
        self._code: dict[str | None, int] = {None: 0}
        self._table: npt.NDArray[np.object_] | None = None  # `_labels` as an array, cached

    # ---- growth ---------------------------------------------------------------------------
    def extend(self, ts: npt.ArrayLike, size: npt.ArrayLike, node: Codes, tag: Codes) -> None:
        """Append slots whose labels are already codes of this table (`codes_of`/`recode`)."""
        k = len(node)
        self._reserve(k)
        a, b = self.n, self.n + k
        self._ts[a:b] = ts
        self._size[a:b] = size
        self._node[a:b] = node
        self._tag[a:b] = tag
        self.n = b

    def extend_lists(
        self,
        ts: Sequence[int],
        size: Sequence[int],
        node: Sequence[str | None],
        tag: Sequence[str | None],
    ) -> None:
        self.extend(
            np.asarray(ts, np.int64), np.asarray(size, np.int64), self.codes_of(node),
            self.codes_of(tag),
        )  # fmt: skip

    def extend_holes(self, k: int, ts: int) -> None:
        zeros = np.zeros(k, np.uint8)
        self.extend(np.full(k, ts, np.int64), zeros, zeros, zeros)

    def codes_of(self, labels: Sequence[str | None]) -> Codes:
        """This table's codes for `labels` (new ones are added to it)."""
        if labels.count(None) == len(labels):
            return np.zeros(len(labels), np.uint8)
        got = list(map(self._code.get, labels))  # the dict maps None to 0 as well
        if None in got:  # labels new to the table
            for x in labels:
                if x not in self._code:
                    self._add(cast(str, x))
            got = list(map(self._code.get, labels))
        return np.array(got, np.uint32)

    def recode(self, coded: CodedLabels) -> Codes:
        """A segment's labels (its own table) as codes of this table."""
        table, codes = coded
        if not table:
            return codes
        mapping = np.empty(len(table) + 1, np.uint32)
        mapping[0] = 0
        for k, x in enumerate(table, 1):
            mapping[k] = self._code.get(x) or self._add(x)
        return mapping[codes]

    def _add(self, label: str) -> int:
        c = len(self._labels)
        self._labels.append(label)
        self._code[label] = c
        self._table = None
        if c > np.iinfo(self._node.dtype).max:
            wide = next(t for limit, t in _WIDTHS if c <= limit)
            self._node = self._node.astype(wide)
            self._tag = self._tag.astype(wide)
        return c

    def _reserve(self, k: int) -> None:
        need = self.n + k
        cap = len(self._ts)
        if need <= cap:
            return
        cap = max(need, cap * 2, 1024)
        for name in ("_ts", "_size", "_node", "_tag"):
            old = getattr(self, name)
            grown = np.empty(cap, old.dtype)
            grown[: self.n] = old[: self.n]
            setattr(self, name, grown)

    def drop_prefix(self, k: int) -> None:
        """Forget the first `k` slots (the topic's index compaction)."""
        k = min(k, self.n)
        if k <= 0:
            return
        keep = self.n - k
        for name in ("_ts", "_size", "_node", "_tag"):
            setattr(self, name, getattr(self, name)[k : self.n].copy())
        self.n = keep

    # ---- reads ---------------------------------------------------------------------------
    def ts_at(self, i: int) -> int:
        return int(self._ts[i])

    def size_at(self, i: int) -> int:
        return int(self._size[i])

    def node_at(self, i: int) -> str | None:
        return self._labels[int(self._node[i])]

    def tag_at(self, i: int) -> str | None:
        return self._labels[int(self._tag[i])]

    def ts_list(self, a: int, b: int) -> list[int]:
        return self._ts[a:b].tolist()  # type: ignore[no-any-return]

    def size_list(self, a: int, b: int) -> list[int]:
        return self._size[a:b].tolist()  # type: ignore[no-any-return]

    def node_list(self, a: int, b: int) -> list[str | None]:
        return self._decode(self._node[a:b])

    def tag_list(self, a: int, b: int) -> list[str | None]:
        return self._decode(self._tag[a:b])

    def _decode(self, codes: Codes) -> list[str | None]:
        if len(self._labels) == 1:
            return [None] * len(codes)
        table = self._table
        if table is None:
            table = self._table = np.empty(len(self._labels), object)
            table[:] = self._labels
        return table[codes].tolist()  # type: ignore[no-any-return]

    def sizes(self, a: int, b: int) -> npt.NDArray[np.uint32]:
        """A read-only view of the sizes of `[a, b)`."""
        v = self._size[a:b]
        v.flags.writeable = False
        return v

    def tag_codes(self, a: int, b: int) -> tuple[list[str | None], Codes]:
        """The label table and the tag codes of `[a, b)` (a view: use before any change)."""
        return self._labels, self._tag[a:b]

    def size_sum(self, a: int, b: int) -> int:
        return int(self._size[a:b].sum(dtype=np.int64))

    def ts_search(self, value: int, a: int, b: int, right: bool = False) -> int:
        """`bisect_left` (`bisect_right` with `right`) over the `ts` of `[a, b)`, which never
        decrease with the slot."""
        found = np.searchsorted(self._ts[a:b], value, "right" if right else "left")
        return a + int(found)

    def byte_cut(self, a: int, b: int, excess: int) -> int:
        """`watermarks.byte_cap_cut` over the sizes of `[a, b)`: the index after the slots
        whose bytes, from `a`, first cover `excess` (`b` if they never do)."""
        if excess <= 0 or a >= b:
            return a
        total = np.cumsum(self._size[a:b], dtype=np.int64)
        k = int(np.searchsorted(total, excess, "left"))
        return b if k >= b - a else a + k + 1

    # ---- changes -------------------------------------------------------------------------
    def zero_size(self, i: int) -> None:
        self._size[i] = 0

    def zero_sizes(self, a: int, b: int) -> None:
        self._size[a:b] = 0

    @property
    def nbytes(self) -> int:
        return sum(getattr(self, x).nbytes for x in ("_ts", "_size", "_node", "_tag"))
