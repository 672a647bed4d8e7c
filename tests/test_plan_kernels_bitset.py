"""Tests for packcli.plan.kernels.bitset: the room index behind bfd and the histogram packers."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from packcli.plan.kernels.bitset import _bitset_add, _bitset_new, _bitset_next, _bitset_prev, _bitset_remove


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 5000), st.data())
def test_bitset_finds_neighbours_like_a_sorted_set(n_bits, data):
    """The room index behind bfd and the histogram packers, against a Python set."""
    words, level_starts = _bitset_new(n_bits)
    present = set()
    for _ in range(30):
        bit = data.draw(st.integers(0, n_bits - 1))
        if data.draw(st.booleans()):
            _bitset_add(words, level_starts, bit)
            present.add(bit)
        elif bit in present:
            _bitset_remove(words, level_starts, bit)
            present.discard(bit)
        query = data.draw(st.integers(0, n_bits - 1))
        assert _bitset_next(words, level_starts, query) == min((b for b in present if b >= query), default=-1)
        assert _bitset_prev(words, level_starts, query) == max((b for b in present if b <= query), default=-1)
