"""The oldest slots of a topic's index, held as numpy columns instead of Python lists.

A slot whose payload lives only in a sealed segment (`data` and `meta` None in memory) needs
just `ts`, size, node and tag in memory. In the list columns that is six 8-byte pointers per
record plus a 32-byte `int` for many `ts` values — 53 B per record measured, the whole of a
server's memory at tens of millions of records. Here it is 4 + 4 + 1 + 1 bytes: `ts` as
an offset within its block (`TsColumn`), labels as codes into one table per topic (0 for
None; one byte each while the topic has at most 255 distinct labels). Recovery fills it
straight from a segment's decoded columns without making a Python object per record.

Owner: the `TopicState` that holds it, under that topic's lock. Indices are slot indices
(`seq - origin`); the frozen slots are always a prefix `[0, n)` of the topic's slots, so
they grow only at their end (`extend`, while the topic's list columns are empty past them,
or by moving the lists' head here) and shrink only at their front (`drop_prefix`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, cast

import numpy as np
import numpy.typing as npt

from seglog.core.native import int64_column, table_codes

Codes = npt.NDArray[np.unsignedinteger]
# A column of labels as a table and codes into it: code 0 is None, code k is table[k - 1].
CodedLabels = tuple[list[str], Codes]


class ColumnMemory(Protocol):
    """Where the large columns live: `HEAP` by default; the engine passes its scratch
    space (`storage.scratch`), which keeps them out of the process's own memory."""

    def empty(self, n: int, dtype: npt.DTypeLike) -> npt.NDArray[Any]: ...

    def grown(self, old: npt.NDArray[Any], used: int, n: int) -> npt.NDArray[Any]:
        """`old` with room for `n` values, its first `used` ones kept."""
        ...

    def release_resident(self) -> int:
        """Let the columns' pages leave the process's memory, where they can; bytes."""
        ...


class HeapMemory:
    """Columns in ordinary heap memory."""

    def empty(self, n: int, dtype: npt.DTypeLike) -> npt.NDArray[Any]:
        return np.empty(n, dtype)

    def grown(self, old: npt.NDArray[Any], used: int, n: int) -> npt.NDArray[Any]:
        out = np.empty(n, old.dtype)
        out[:used] = old[:used]
        return out

    def release_resident(self) -> int:
        return 0  # heap memory stays


HEAP = HeapMemory()

# Codes are as narrow as the table allows, widening as it grows past each limit.
_WIDTHS = ((0xFF, np.uint8), (0xFFFF, np.uint16), (0xFFFFFFFF, np.uint32))
_U32 = 0xFFFFFFFF
# How many `ts` values a prefix drop re-encodes at a time (~8 MB of temporaries).
REENCODE_CHUNK = 1 << 18


def _width(largest: int) -> type[np.unsignedinteger]:
    """The narrowest code type that holds `largest`."""
    return next(t for limit, t in _WIDTHS if largest <= limit)  # type: ignore[no-any-return]


def _grown(
    old: npt.NDArray[Any], n: int, need: int, mem: ColumnMemory, exact: bool = False
) -> npt.NDArray[Any]:
    """`old` (of which `n` are used) with room for `need`, doubling (to `need` exactly
    with `exact`)."""
    if need <= len(old):
        return old
    return mem.grown(old, n, need if exact else max(need, len(old) * 2, 1024))


def _copied(
    values: npt.NDArray[Any], mem: ColumnMemory, dtype: npt.DTypeLike | None = None
) -> npt.NDArray[Any]:
    """`values` in a new array of `mem` (converted to `dtype`)."""
    out = mem.empty(len(values), values.dtype if dtype is None else dtype)
    out[:] = values
    return out


def _offsets(
    values: npt.NDArray[np.int64], base: npt.NDArray[np.int64], a: int, bits: int
) -> npt.NDArray[np.int64]:
    """`values` (of slots `a`, `a + 1`, ...) minus their blocks' bases: one subtraction
    per block the slots span (a gather of one base per value cost ~10 ns per value)."""
    off = np.empty(len(values), np.int64)
    i, block = 0, a >> bits
    while i < len(values):
        j = min(((block + 1) << bits) - a, len(values))
        np.subtract(values[i:j], base[block], out=off[i:j])
        i, block = j, block + 1
    return off


def _int64s(values: Sequence[int]) -> npt.NDArray[np.int64]:
    return int64_column(values) if isinstance(values, list) else np.asarray(values, np.int64)


class TsColumn:
    """Non-decreasing `ts` values in 4 bytes each: an offset from the first value of its
    block of `1 << block_bits` slots (one 8-byte base per block). A block spanning more
    than 2**32 ms (~50 days), or a value below its block's base, turns the column into
    plain 8-byte values until a prefix drop re-encodes what is left."""

    __slots__ = ("_base", "_bits", "_mem", "_off", "_wide", "n")

    def __init__(self, block_bits: int = 12, mem: ColumnMemory = HEAP) -> None:
        self.n = 0
        self._bits = block_bits
        self._mem = mem
        self._off = np.empty(0, np.uint32)
        self._base = np.empty(0, np.int64)  # base of block k at k
        self._wide: npt.NDArray[np.int64] | None = None

    def extend(self, values: npt.NDArray[np.int64]) -> None:
        a, b = self.n, self.n + len(values)
        if self._wide is not None:
            self._wide = _grown(self._wide, a, b, self._mem)
            self._wide[a:b] = values
            self.n = b
            return
        bits = self._bits
        blocks = ((b - 1) >> bits) + 1 if b else 0
        if blocks > len(self._base):  # new blocks start at their first slot's value
            starts = np.arange(len(self._base), blocks, dtype=np.int64) << bits
            self._base = np.concatenate((self._base, values[starts - a]))
        off = _offsets(values, self._base, a, bits)
        if len(off) and (off.min() < 0 or off.max() > _U32):
            wide = self._mem.empty(max(b, len(self._off)), np.int64)  # keeps any room reserved
            wide[:a] = self.values(0, a)
            wide[a:b] = values
            # fresh empty arrays: views of the old ones would keep their buffers alive
            self._wide = wide
            self._off, self._base = np.empty(0, np.uint32), np.empty(0, np.int64)
            self.n = b
            return
        self._off = _grown(self._off, a, b, self._mem)
        self._off[a:b] = off
        self.n = b

    def reserve(self, k: int) -> None:
        """Room for `k` more values without regrowing."""
        if self._wide is not None:
            self._wide = _grown(self._wide, self.n, self.n + k, self._mem, exact=True)
        else:
            self._off = _grown(self._off, self.n, self.n + k, self._mem, exact=True)

    def at(self, i: int) -> int:
        if self._wide is not None:
            return int(self._wide[i])
        return int(self._base[i >> self._bits]) + int(self._off[i])

    def values(self, a: int, b: int) -> npt.NDArray[np.int64]:
        if self._wide is not None:
            return self._wide[a:b].copy()
        base = self._base[np.arange(a, b) >> self._bits]
        return cast("npt.NDArray[np.int64]", base + self._off[a:b])

    def search(self, value: int, a: int, b: int, right: bool) -> int:
        """`bisect_left` (`bisect_right` with `right`) of `value` over `[a, b)`: a search
        over the blocks' bases, then within one block."""
        side: Any = "right" if right else "left"
        if self._wide is not None or a >= b:
            return a + int(
                np.searchsorted(self._wide[a:b] if self._wide is not None else [], value, side)
            )
        bits = self._bits
        first, last = a >> bits, (b - 1) >> bits
        # the first block whose base is past `value`: the answer is in the block before it
        k = first + int(np.searchsorted(self._base[first : last + 1], value, side))
        if k == first:
            return a
        lo, hi = max((k - 1) << bits, a), min(k << bits, b)
        return lo + int(np.searchsorted(self.values(lo, hi), value, side))

    def take(self, at: npt.NDArray[np.intp]) -> npt.NDArray[np.int64]:
        """The values at the slots `at`."""
        if self._wide is not None:
            return self._wide[at]
        return cast("npt.NDArray[np.int64]", self._base[at >> self._bits] + self._off[at])

    def drop_prefix(self, k: int, chunk: int = REENCODE_CHUNK) -> None:
        """Forget the first `k` values; the rest are encoded afresh (their blocks move), in
        4 bytes each again if they now fit. `chunk` values at a time: decoding and encoding
        take ~32 bytes of temporary heap per value, which for a whole column of millions
        was a spike of hundreds of MB at every compaction of a capped topic."""
        old = TsColumn(self._bits, self._mem)
        old.n, old._off, old._base, old._wide = self.n, self._off, self._base, self._wide
        self.n = 0
        self._wide = None
        self._off, self._base = np.empty(0, np.uint32), np.empty(0, np.int64)
        self.reserve(old.n - k)
        for a in range(k, old.n, chunk):
            self.extend(old.values(a, min(a + chunk, old.n)))

    @property
    def wide(self) -> bool:
        """Whether the values are held in 8 bytes each."""
        return self._wide is not None

    @property
    def nbytes(self) -> int:
        if self._wide is not None:
            return int(self._wide.nbytes)
        return int(self._off.nbytes + self._base.nbytes)


_TRIM_LABELS = 256  # a table this large is trimmed to the labels in use when it halves
_PACKED_TABLE = 4096  # `packed` copies a table up to this size, else the labels used


class FrozenSlots:
    __slots__ = (
        "_code",
        "_labels",
        "_mem",
        "_node",
        "_size",
        "_table",
        "_table_n",
        "_tag",
        "_ts",
        "n",
    )

    def __init__(self, ts_block_bits: int = 12, mem: ColumnMemory = HEAP) -> None:
        self.n = 0
        self._mem = mem
        self._ts = TsColumn(ts_block_bits, mem)
        self._size = np.empty(0, np.uint32)
        self._node: Codes = np.empty(0, np.uint8)
        self._tag: Codes = np.empty(0, np.uint8)
        self._labels: list[str | None] = [None]
        self._code: dict[str | None, int] = {None: 0}
        # `_labels[:_table_n]` as an array (with room to grow), for decoding codes
        self._table: npt.NDArray[np.object_] | None = None
        self._table_n = 0

    @property
    def memory(self) -> ColumnMemory:
        """Where these columns live (and where the topic keeps its other slot arrays)."""
        return self._mem

    # ---- growth ---------------------------------------------------------------------------
    def extend(self, ts: npt.ArrayLike, size: npt.ArrayLike, node: Codes, tag: Codes) -> None:
        """Append slots whose labels are already codes of this table (`codes_of`/`recode`)."""
        k = len(node)
        self._reserve(k)
        a, b = self.n, self.n + k
        self._ts.extend(np.asarray(ts, np.int64))
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
            _int64s(ts), _int64s(size), self.codes_of(node), self.codes_of(tag),
        )  # fmt: skip

    def extend_holes(self, k: int, ts: int) -> None:
        zeros = np.zeros(k, np.uint8)
        self.extend(np.full(k, ts, np.int64), zeros, zeros, zeros)

    def codes_of(self, labels: Sequence[str | None]) -> Codes:
        """This table's codes for `labels` (new ones are added to it)."""
        listed = labels if isinstance(labels, list) else list(labels)
        out = np.empty(len(listed), np.uint32)
        miss = table_codes(listed, self._code, out)  # the dict maps None to 0 as well
        if miss >= 0:  # labels new to the table
            for x in listed[miss:]:
                if x not in self._code:
                    self._add(cast(str, x))
            table_codes(listed, self._code, out)
        return out

    def recode(self, coded: CodedLabels) -> Codes:
        """A segment's labels (its own table) as codes of this table."""
        table, codes = coded
        if not table:
            return codes
        mapping = np.empty(len(table) + 1, np.uint32)
        mapping[0] = 0
        same = True  # the segment's table is a prefix of this one, in its order
        for k, x in enumerate(table, 1):
            mapping[k] = c = self._code.get(x) or self._add(x)
            same = same and c == k
        return codes if same else mapping[codes]

    def _add(self, label: str) -> int:
        c = len(self._labels)
        self._labels.append(label)
        self._code[label] = c
        if c > np.iinfo(self._node.dtype).max:
            wide = _width(c)
            self._node = _copied(self._node, self._mem, wide)
            self._tag = _copied(self._tag, self._mem, wide)
        return c

    def reserve(self, k: int) -> None:
        """Room for `k` more slots in every column without regrowing (a restore that knows
        how many slots it will add: growth by doubling copies each column about twice,
        and may leave it up to twice as large as needed)."""
        self._ts.reserve(k)
        self._reserve(k, exact=True)

    def _reserve(self, k: int, exact: bool = False) -> None:
        for name in ("_size", "_node", "_tag"):
            old = getattr(self, name)
            setattr(self, name, _grown(old, self.n, self.n + k, self._mem, exact))

    def drop_prefix(self, k: int) -> None:
        """Forget the first `k` slots (the topic's index compaction)."""
        k = min(k, self.n)
        if k <= 0:
            return
        keep = self.n - k
        self._ts.drop_prefix(k)
        for name in ("_size", "_node", "_tag"):
            setattr(self, name, _copied(getattr(self, name)[k : self.n], self._mem))
        self.n = keep
        if len(self._labels) > _TRIM_LABELS:
            self._trim_labels()

    def _trim_labels(self) -> None:
        """Forget the labels no slot uses any more, when that is most of them (a topic
        whose tags are unique per record must not keep every tag it ever had)."""
        used = np.unique(np.concatenate((self._node[: self.n], self._tag[: self.n])))
        used = used[used != 0]
        if 2 * (len(used) + 1) > len(self._labels):
            return
        mapping = np.zeros(len(self._labels), np.uint32)
        mapping[used] = np.arange(1, len(used) + 1, dtype=np.uint32)
        width = _width(len(used))
        self._node = _copied(mapping[self._node[: self.n]], self._mem, width)
        self._tag = _copied(mapping[self._tag[: self.n]], self._mem, width)
        self._labels = [None, *(self._labels[c] for c in used.tolist())]
        self._code = {x: c for c, x in enumerate(self._labels)}
        self._table, self._table_n = None, 0

    # ---- reads ---------------------------------------------------------------------------
    def ts_at(self, i: int) -> int:
        return self._ts.at(i)

    def size_at(self, i: int) -> int:
        return int(self._size[i])

    def node_at(self, i: int) -> str | None:
        return self._labels[int(self._node[i])]

    def tag_at(self, i: int) -> str | None:
        return self._labels[int(self._tag[i])]

    def ts_list(self, a: int, b: int) -> list[int]:
        return self._ts.values(a, b).tolist()  # type: ignore[no-any-return]

    def size_list(self, a: int, b: int) -> list[int]:
        return self._size[a:b].tolist()  # type: ignore[no-any-return]

    def node_list(self, a: int, b: int) -> list[str | None]:
        return self._decode(self._node[a:b])

    def tag_list(self, a: int, b: int) -> list[str | None]:
        return self._decode(self._tag[a:b])

    def _decode(self, codes: Codes) -> list[str | None]:
        n = len(self._labels)
        if n == 1:
            return [None] * len(codes)
        table, filled = self._table, self._table_n
        if filled < n:
            # Extended in place (doubling) by the labels added since: a topic adding new
            # labels at every seal must not rebuild the whole table each time.
            if table is None or len(table) < n:
                grown = np.empty(max(2 * n, 64), object)
                grown[:filled] = self._labels[:filled]
                table = self._table = grown
            table[filled:n] = self._labels[filled:n]
            self._table_n = n
        assert table is not None
        return table[codes].tolist()  # type: ignore[no-any-return]

    def pick(
        self, at: npt.NDArray[np.intp]
    ) -> tuple[list[int], list[str | None], list[str | None], list[int]]:
        """`ts`, node, tag and size of the slots `at`."""
        return (
            self._ts.take(at).tolist(),
            self._decode(self._node[at]),
            self._decode(self._tag[at]),
            self._size[at].tolist(),
        )

    def packed(
        self, at: npt.NDArray[np.intp]
    ) -> tuple[npt.NDArray[np.int64], list[str | None], Codes, Codes]:
        """`ts`, a label table (code 0 is None) and the node and tag codes of the slots
        `at`, as arrays: `pick` without a Python object per slot. The table is the used
        labels' own when this table is large, so it never copies thousands of labels."""
        node, tag = self._node[at], self._tag[at]
        labels: list[str | None]
        if len(self._labels) <= _PACKED_TABLE:
            labels = list(self._labels)
        else:
            used, inverse = np.unique(np.concatenate((node, tag)), return_inverse=True)
            labels = [self._labels[c] for c in used.tolist()]
            if labels[0] is not None:  # code 0 (None) unused: keep it first all the same
                labels.insert(0, None)
                inverse = inverse + 1
            node, tag = inverse[: len(at)], inverse[len(at) :]
        return self._ts.take(at), labels, node, tag

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
        return self._ts.search(value, a, b, right)

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
        rest = (self._size, self._node, self._tag)
        return self._ts.nbytes + sum(int(x.nbytes) for x in rest)
