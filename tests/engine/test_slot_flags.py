"""A topic's dead flags in column memory (`engine.slot_flags`): they keep the values a
`bytearray` would through appends, extends, flips, prefix drops and reservations, on the heap and in
scratch memory (where growth maps the file anew and pages may leave the process)."""

from __future__ import annotations

import gc
import tracemalloc
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from seglog.engine.frozen_slots import HEAP, ColumnMemory
from seglog.engine.slot_flags import SlotFlags
from seglog.storage.scratch import MIN_BYTES, ScratchSpace

ops = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(0, 1)),
        st.tuples(
            st.just("extend"), st.binary(max_size=40_000).map(lambda b: bytes(x & 1 for x in b))
        ),
        st.tuples(st.just("flip"), st.integers(0, 1 << 20)),
        st.tuples(st.just("drop"), st.integers(0, 1 << 20)),
        st.tuples(st.just("reserve"), st.integers(0, 100_000)),
    ),
    max_size=30,
)


def replay(mem: ColumnMemory, steps: list[tuple[str, object]], release: object = None) -> None:
    flags, model = SlotFlags(mem), bytearray()
    for op, arg in steps:
        if op == "append":
            flags.append(int(arg))  # type: ignore[call-overload]
            model.append(int(arg))  # type: ignore[call-overload]
        elif op == "extend":
            flags.extend(arg)  # type: ignore[arg-type]
            model.extend(arg)  # type: ignore[arg-type]
        elif op == "flip" and model:
            i = int(arg) % len(model)  # type: ignore[call-overload]
            flags.view[i] = model[i] = 1 - model[i]
        elif op == "reserve":
            flags.reserve(int(arg))  # type: ignore[call-overload]
        elif op == "drop" and model:
            k = int(arg) % (len(model) + 1)  # type: ignore[call-overload]
            flags.drop_prefix(k)
            del model[:k]
        if callable(release):
            release()
        assert flags.n == len(flags.view) == len(model)
        assert bytes(flags.view) == bytes(model)


@given(ops)
def test_flags_on_the_heap_behave_like_a_bytearray(steps: list[tuple[str, object]]) -> None:
    replay(HEAP, steps)


@settings(max_examples=40)
@given(ops)
def test_flags_in_scratch_memory_behave_like_a_bytearray(
    tmp_path_factory: object, steps: list[tuple[str, object]]
) -> None:
    root = tmp_path_factory.mktemp("scratch")  # type: ignore[attr-defined]
    sp = ScratchSpace.create(Path(root))
    replay(sp, steps, release=sp.release_resident)


def test_large_flags_leave_the_heap_for_scratch(tmp_path: Path) -> None:
    sp = ScratchSpace.create(tmp_path)
    flags = SlotFlags(sp)
    flags.extend(bytes(MIN_BYTES - 1))
    assert sp.mapped_bytes == 0  # small: on the heap
    flags.extend(b"\x01" * 10)
    assert sp.mapped_bytes >= MIN_BYTES  # grown past the threshold: mapped
    view = flags.view
    sp.release_resident()
    assert bytes(view[-11:]) == b"\x00" + b"\x01" * 10


def test_dropping_most_flags_gives_their_room_back() -> None:
    tracemalloc.start()
    try:
        flags = SlotFlags(HEAP)
        flags.extend(bytes(1_000_000))
        held, _ = tracemalloc.get_traced_memory()
        flags.drop_prefix(999_000)
        gc.collect()
        current, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert bytes(flags.view) == bytes(1_000)
    assert held >= 1_000_000 and current < 100_000  # the large array is gone
