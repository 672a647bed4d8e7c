"""Bin mode's plan from the histogram (packcli/plan/patterns.py): the slot rule and the
slot map against tests/naive_slots.py, the plan from the histogram alone, on fixed and
Hypothesis inputs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from naive_slots import expand_rows, fill_slots, layouts

from packcli.core.jit import kernel
from packcli.plan import patterns
from packcli.plan.buckets import Buckets
from packcli.plan.kernels.pack import plan_lengths
from packcli.plan.patterns import pattern_plan

ALGORITHMS = ["bfd", "spfhp", "lpfhp"]


def placed_lengths(lengths, multiple):
    return [-(-n // multiple) * multiple for n in lengths]


@st.composite
def inputs(draw):
    seq_len = draw(st.integers(1, 64))
    multiple = draw(st.sampled_from([1, 1, 2, 4]))
    if seq_len % multiple:
        multiple = 1
    lengths = draw(st.lists(st.integers(1, seq_len), max_size=120))
    groups = draw(st.one_of(st.none(), st.lists(st.integers(0, 3), min_size=len(lengths), max_size=len(lengths))))
    return seq_len, multiple, lengths, groups


def dense(groups):
    seen: dict[int, int] = {}
    return [seen.setdefault(g, len(seen)) for g in groups]


@settings(max_examples=150, deadline=None)
@given(inputs(), st.sampled_from(ALGORITHMS), st.booleans(), st.sampled_from([None, 1, 2, 3]))
def test_the_slot_rule_and_the_rows(data, algorithm, shuffle, cap):
    seq_len, multiple, lengths, groups = data
    if algorithm == "bfd":
        cap = None  # capped bfd is not planned from counts
    group_ids = None if groups is None else np.array(dense(groups), dtype=np.int32)
    plan = pattern_plan(
        np.array(lengths, dtype=np.int64),
        seq_len,
        algorithm,
        multiple=multiple,
        cap=cap,
        groups=group_ids,
        shuffle=shuffle,
        seed=11,
        window=2,
    )
    placed = placed_lengths(lengths, multiple)
    per_group = [0] * len(lengths) if group_ids is None else group_ids.tolist()
    # rows: the packer's own count for each group, repaired as plan_lengths repairs them
    expected_rows = 0
    for g in sorted(set(per_group)):
        own = [n for n, h in zip(placed, per_group) if h == g]
        expected_rows += plan_lengths(np.array(own), seq_len, algorithm, max_sequences_per_row=cap).n_rows
    assert plan.n_rows == expected_rows
    # which sequence fills which slot, and where each row goes
    plan_groups = np.zeros(plan.n_rows, dtype=np.int64)
    if plan.row_group is not None:
        plan_groups = plan.row_group[plan.output_rows_of(np.arange(plan.n_rows))]
    expected = fill_slots(layouts(plan.patterns), plan_groups.tolist(), placed, per_group, shuffle, 11, 2)
    starts = np.cumsum(lengths) - np.array(lengths, dtype=np.int64) if lengths else np.zeros(0, np.int64)
    start, length, row, offset = plan.placed(np.arange(plan.n_rows, dtype=np.int64))
    got = sorted(zip(np.searchsorted(starts, start).tolist(), row.tolist(), offset.tolist()))
    assert got == expected
    np.testing.assert_array_equal(np.sort(length), np.sort(np.array(lengths, dtype=np.int64)))
    # rows are valid: slots back to back from 0 within seq_len, groups pure, the cap held
    for layout in layouts(plan.patterns):
        assert [o for o, _ in layout] == list(np.cumsum([0] + [n for _, n in layout])[:-1])
        assert sum(n for _, n in layout) <= seq_len
        assert cap is None or len(layout) <= cap
    if plan.row_group is not None:
        sources = np.searchsorted(starts, start)
        assert (plan.row_group[row] == group_ids[sources]).all()
    assert plan.placed_histogram().sum() == len(lengths)


@pytest.mark.compiled  # a million lengths, the point here, take the kernels run as Python many minutes
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_a_million_lengths_make_a_plan_of_kilobytes(algorithm):
    rng = np.random.default_rng(0)
    lengths = np.clip(rng.lognormal(np.log(300), 1.0, 1_000_000).astype(np.int64), 1, 2048)
    plan = pattern_plan(lengths, 2048, algorithm, shuffle=True)
    p = plan.patterns
    size = sum(a.nbytes for a in (p.row_start, p.slot_offsets, p.slot_len, p.slot_pos, plan.slot_base, plan.slot_step))
    assert size < 2_000_000
    assert plan.n_rows == plan_lengths(lengths, 2048, algorithm).n_rows
    assert plan.n_rows <= -(-int(lengths.sum()) // 2048) * 1.0001 + 1


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(1, 64), max_size=200), st.sampled_from([1, 2, 8]))
def test_the_slot_map_is_a_stable_sort_by_placed_length(lengths, multiple):
    from naive_slots import slot_map as naive_slot_map

    from packcli.plan.patterns import slot_map

    array = np.array(lengths, dtype=np.int64)
    counts = np.bincount(-(-array // multiple) * multiple, minlength=65)
    starts, real = slot_map(array, multiple, counts)
    expected_starts, expected_real = naive_slot_map(lengths, multiple)
    assert starts.tolist() == expected_starts
    assert (real is None) == (multiple == 1)
    if real is not None:
        assert real.tolist() == expected_real


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 64), st.integers(0, 4)), max_size=200), st.sampled_from([1, 2, 8]))
def test_the_grouped_slot_map_is_a_stable_sort_by_group_and_placed_length(pairs, multiple):
    from naive_slots import slot_map as naive_slot_map

    from packcli.plan.patterns import slot_map

    lengths = [n for n, _ in pairs]
    groups = [g for _, g in pairs]
    placed = -(-np.array(lengths, dtype=np.int64) // multiple) * multiple
    table = np.zeros((5, 65), dtype=np.int64)
    np.add.at(table, (np.array(groups, dtype=np.int64), placed), 1)
    starts, real = slot_map(np.array(lengths, dtype=np.int64), multiple, table, np.array(groups, dtype=np.int32))
    expected_starts, expected_real = naive_slot_map(lengths, multiple, groups)
    assert starts.tolist() == expected_starts
    assert (real is None) == (multiple == 1)
    if real is not None:
        assert real.tolist() == expected_real


def test_the_slot_map_refuses_counts_of_other_lengths():
    from packcli.core.errors import PackcliError
    from packcli.plan.patterns import slot_map

    with pytest.raises(PackcliError, match="counts hold 1 sequences, lengths 2"):
        slot_map(np.array([3, 4]), 1, np.array([0, 0, 0, 1, 0]))
    with pytest.raises(PackcliError, match=r"lengths must be in \[1, 4\] once placed"):
        slot_map(np.array([3, 5]), 1, np.array([0, 0, 0, 1, 1]))
    with pytest.raises(PackcliError, match=r"group ids must be one per sequence, in \[0, 2\)"):
        slot_map(np.array([3, 4]), 1, np.array([[0, 0, 0, 1, 0], [0, 0, 0, 0, 1]]), np.array([0, 2]))


def test_lengths_longer_than_a_row_are_refused_before_any_kernel_runs():
    from packcli.core.errors import PackcliError

    with pytest.raises(PackcliError, match="sequence 1 has length 70, more than the capacity 64"):
        pattern_plan(np.array([3, 70]), 64, "bfd")
    with pytest.raises(PackcliError, match="sequence 0 has length 57, more than the capacity 56"):
        pattern_plan(np.array([57]), 60, "bfd", multiple=8)  # its slot of 64 would not fit a row of 60


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(1, 64), max_size=300),
    st.sampled_from(["bfd", "spfhp", "lpfhp"]),
    st.booleans(),
    st.integers(0, 2**16),
)
def test_the_plan_from_the_histogram_alone_is_the_plan_by_bucket(lengths, algorithm, shuffle, seed):
    """What `pack` plans with the lengths left on disk is what pattern_plan plans from them."""
    from packcli.plan.patterns import histogram_plan

    array = np.array(lengths, dtype=np.int64)
    histogram = np.bincount(array) if len(array) else np.zeros(0, dtype=np.int64)
    a = pattern_plan(array, 64, algorithm, shuffle=shuffle, seed=seed, by_bucket=True)
    b = histogram_plan(histogram, 64, algorithm, shuffle=shuffle, seed=seed)
    assert b.n_rows == a.n_rows and isinstance(b.lookup, Buckets) and b.slot_real is None
    for name in ("row_start", "slot_offsets", "slot_len", "slot_pos"):
        assert getattr(a.patterns, name).tolist() == getattr(b.patterns, name).tolist()
    assert a.slot_base.tolist() == b.slot_base.tolist() and a.slot_step.tolist() == b.slot_step.tolist()
    assert isinstance(a.lookup, Buckets)
    assert a.lookup.key.tolist() == b.lookup.key.tolist() and a.lookup.token.tolist() == b.lookup.token.tolist()
    rows = np.arange(a.n_rows)
    assert all(x.tolist() == y.tolist() for x, y in zip(a.placed(rows), b.placed(rows)))


@settings(max_examples=100, deadline=None)
@given(
    shapes=st.lists(st.tuples(st.integers(0, 4), st.integers(1, 5)), min_size=1, max_size=8),
    picks=st.lists(st.integers(0, 10**6), max_size=30),
    in_order=st.booleans(),
)
def test_rows_expand_into_their_slots_as_the_naive_loop(shapes, picks, in_order):
    """Any plan rows (in order or not, repeated, patterns of no rows among them): each
    row's slots in offset order with the rank the slot rule gives."""
    repeat = [r for r, _ in shapes]
    sizes = [n for _, n in shapes]
    row_start = np.concatenate([[0], np.cumsum(repeat)]).astype(np.int64)
    slot_offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    rng = np.random.default_rng(len(picks))
    slot_base = rng.integers(0, 1000, int(slot_offsets[-1])).astype(np.int64)
    slot_step = rng.integers(1, 5, int(slot_offsets[-1])).astype(np.int64)
    n_rows = int(row_start[-1])
    rows = [k % n_rows for k in picks] if n_rows else []
    plan_rows = np.array(sorted(rows) if in_order else rows, dtype=np.int64)
    expand = kernel(patterns._expand_rows, len(plan_rows))
    slot, rank, owner = expand(plan_rows, row_start, slot_offsets, slot_base, slot_step)
    got = list(zip(slot.tolist(), rank.tolist(), owner.tolist()))
    want = expand_rows(
        plan_rows.tolist(), row_start.tolist(), slot_offsets.tolist(), slot_base.tolist(), slot_step.tolist()
    )
    assert got == want


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 4), st.lists(st.integers(1, 6), min_size=1, max_size=5)), max_size=10),
    st.data(),
)
def test_slot_ranks_count_each_length_of_each_part_row_by_row(shapes, data):
    """Patterns of any layouts (slots in offset order), in parts: each slot's rank in its
    pattern's first row (counted from any first rank per part and length) and its step,
    as the naive walk over every row counts them."""
    from naive_slots import slot_ranks

    row_start = np.concatenate([[0], np.cumsum([r for r, _ in shapes])]).astype(np.int64)
    slot_offsets = np.concatenate([[0], np.cumsum([len(lay) for _, lay in shapes])]).astype(np.int64)
    slot_len = np.array([n for _, lay in shapes for n in lay], dtype=np.int64)
    slot_pos = np.array([sum(lay[:i]) for _, lay in shapes for i in range(len(lay))], dtype=np.int64)
    steps = data.draw(st.lists(st.integers(0, 1), min_size=len(shapes), max_size=len(shapes)))
    part = np.cumsum(steps).astype(np.int64)
    p = patterns.Patterns(row_start, slot_offsets, slot_len, slot_pos)
    n_parts = int(part[-1]) + 1 if len(part) else 0
    first_rank = np.array(data.draw(st.lists(st.integers(0, 10**12), min_size=7 * n_parts, max_size=7 * n_parts)))
    base, step = patterns._slot_ranks(p, part, 7, first_rank.astype(np.int64))
    firsts = {(q, n): int(first_rank[q * 7 + n]) for q in range(n_parts) for n in range(7)}
    want_base, want_step = slot_ranks(
        row_start.tolist(), slot_offsets.tolist(), slot_len.tolist(), part.tolist(), firsts
    )
    assert base.tolist() == want_base and step.tolist() == want_step


def python_calls(function) -> int:
    """Calls of Python functions and builtins while `function` runs, a kernel's body
    (compiled, or run as Python under NUMBA_DISABLE_JIT) counted as one call."""
    import sys

    from packcli.core import jit

    kernels = {k.py_func.__code__ for k in list(jit._kernels.values()) if getattr(k, "py_func", None) is not None}
    count, inside = 0, 0

    def profile(frame, event, arg):
        nonlocal count, inside
        if frame.f_code in kernels and event in ("call", "return"):
            count += event == "call" and not inside
            inside += 1 if event == "call" else -1
        elif not inside and event in ("call", "c_call"):
            count += 1

    sys.setprofile(profile)
    try:
        function()
    finally:
        sys.setprofile(None)
    return count


def test_a_grouped_plan_calls_python_per_group_not_per_pattern():
    """The grouped plan works out every group's patterns, repair choice and ranks in one
    pass each: its Python calls are a few per group (the packer's runs, a repaired group)
    and per plan, none per pattern, slot or length. 50 groups, then ten times the
    sequences (about ten times the patterns): about 90 calls per group both times, where
    a pipeline per group takes about 400 and a loop per pattern grows with them."""
    rng = np.random.default_rng(0)
    lengths = np.clip(rng.lognormal(np.log(60), 0.9, 200_000).astype(np.int64), 1, 2048)
    groups = (np.arange(len(lengths)) % 50).astype(np.int32)
    calls, n_patterns = [], []
    for n in (20_000, 200_000):
        pattern_plan(lengths[:n], 2048, "bfd", groups=groups[:n])  # kernels compiled or loaded first
        calls.append(python_calls(lambda n=n: pattern_plan(lengths[:n], 2048, "bfd", groups=groups[:n])))
        n_patterns.append(len(pattern_plan(lengths[:n], 2048, "bfd", groups=groups[:n]).patterns.slot_offsets) - 1)
    assert n_patterns[1] > 5 * n_patterns[0]
    assert max(calls) < 200 * 50 + 1000
    assert calls[1] - calls[0] < 20 * 50
