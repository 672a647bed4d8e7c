"""The contract every packer promises, as assertions shared by the kernel tests."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from packcli.plan.kernels.pack import PackedLengths, lower_bound_rows, martello_toth_l2


def rows_of(placement: PackedLengths, lengths) -> list[list[tuple[int, int, int]]]:
    """Per row, the (offset, length, index) of its sequences sorted by offset."""
    rows = [[] for _ in range(placement.n_rows)]
    for i, (r, o) in enumerate(zip(placement.row.tolist(), placement.offset.tolist())):
        rows[r].append((o, int(lengths[i]), i))
    return [sorted(r) for r in rows]


def assert_valid(placement: PackedLengths, lengths, capacity: int) -> None:
    """The contract every algorithm promises."""
    n = len(lengths)
    assert placement.row.dtype == np.int32 and placement.offset.dtype == np.int32
    assert placement.row.shape == (n,) and placement.offset.shape == (n,)
    if n == 0:
        assert placement.n_rows == 0
        return
    assert placement.row.min() == 0 and placement.row.max() == placement.n_rows - 1
    for row in rows_of(placement, lengths):
        assert row, "rows are numbered without gaps, so none is empty"
        position = 0
        for offset, length, _ in row:
            assert offset == position, "sequences sit back to back from offset 0"
            position += length
        assert position <= capacity
    assert placement.n_rows >= lower_bound_rows(lengths, capacity)
    assert placement.n_rows >= martello_toth_l2(lengths, capacity)


def fills_of(placement: PackedLengths, lengths) -> np.ndarray:
    return np.bincount(placement.row, weights=np.asarray(lengths, dtype=np.float64), minlength=placement.n_rows)


def as_tuple(placement: PackedLengths):
    return placement.row.tolist(), placement.offset.tolist(), placement.n_rows


lengths_and_capacity = st.integers(1, 40).flatmap(
    lambda capacity: st.tuples(st.lists(st.integers(1, capacity), max_size=60), st.just(capacity))
)
