"""Rows as patterns: a layout of placed lengths (back to back from offset 0) with a repeat count.

bfd and the histogram packers decide from the counts of each length alone; what they
decide is a list of runs (kernels/runs.py). Here the runs become row patterns, in plan
row order; consecutive patterns of the same layout are one. The repair pass
(plan/repair.py) rewrites some of their rows, and a plan from counts (plan/patterns.py)
joins every group's patterns and fills their slots by its rule.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from packcli.core.errors import PackcliError
from packcli.core.jit import kernel, njit


@dataclass
class Patterns:
    """Rows as patterns: pattern p is rows [row_start[p], row_start[p + 1]), each laid out
    as slots slot_offsets[p]..slot_offsets[p + 1] (placed length, position in the row)."""

    row_start: np.ndarray  # int64 [P + 1]
    slot_offsets: np.ndarray  # int64 [P + 1]
    slot_len: np.ndarray  # int64 [slots]
    slot_pos: np.ndarray  # int64 [slots]

    @property
    def n_rows(self) -> int:
        return int(self.row_start[-1])

    @property
    def repeat(self) -> np.ndarray:
        return np.diff(self.row_start)

    def slot_pattern(self) -> np.ndarray:
        return np.repeat(np.arange(len(self.row_start) - 1), np.diff(self.slot_offsets))


def runs_from_counts(
    counts: np.ndarray, capacity: int, algorithm: str, cap: int = 0, first_row: int = 0
) -> tuple[np.ndarray, int]:
    """The packer's runs, one per row: (length, first_row, step, rows, offset, copies), and
    its row count. `first_row`: where its rows start (the rows of the groups before it)."""
    counts = np.ascontiguousarray(counts, dtype=np.int64)
    n = int(counts.sum())
    if n == 0:
        return np.zeros((0, 6), dtype=np.int64), 0
    if algorithm == "bfd":
        from packcli.plan.kernels.fit import _bfd_plan

        run_begin, run_end, runs, n_rows = kernel(_bfd_plan, n + capacity)(counts, capacity, n)
    else:
        from packcli.plan.kernels.histogram import _histogram_runs, _histogram_strategies
        from packcli.plan.kernels.runs import _first_table_size

        max_groups = _first_table_size(counts, capacity)
        while True:
            groups, n_groups, n_rows = _histogram_strategies(counts, capacity, algorithm == "lpfhp", cap, max_groups)
            if n_groups >= 0:
                break
            max_groups *= 4
        run_begin, run_end, runs = _histogram_runs(groups, n_groups, capacity)
    table = kernel(_run_table, len(runs) + capacity)(run_begin, run_end, runs, first_row)
    return table, int(n_rows)


@njit(cache=True)
def _run_table(run_begin, run_end, runs, first_row):
    """The runs of each length (runs[run_begin[L]:run_end[L]]: first_row, step, rows,
    offset, copies), lengths increasing, each length's in the packer's order, as rows of
    (length, first_row, step, rows, offset, copies), their rows after `first_row`."""
    n = 0
    for length in range(run_begin.shape[0]):
        n += run_end[length] - run_begin[length]
    table = np.empty((n, 6), dtype=np.int64)
    k = 0
    for length in range(run_begin.shape[0]):
        for r in range(run_begin[length], run_end[length]):
            table[k, 0] = length
            table[k, 1] = np.int64(runs[r, 0]) + first_row
            for c in range(1, 5):
                table[k, c + 1] = runs[r, c]
            k += 1
    return table


def patterns_from_runs(runs: np.ndarray, n_rows: int, part_starts: np.ndarray | None = None) -> Patterns:
    """The rows the runs make, as patterns: a sweep over the rows where some run starts or
    ends; between two such rows every row holds the same runs, so the same layout.
    `part_starts`: rows where a part begins (the runs of several groups, each group's rows
    after the ones before): no pattern spans or is joined across them, so each part's
    patterns are the ones its runs alone make."""
    runs = np.ascontiguousarray(runs, dtype=np.int64).reshape(-1, 6)
    length, first, step, rows, copies = runs[:, 0], runs[:, 1], runs[:, 2], runs[:, 3], runs[:, 5]
    lo = np.where(step >= 0, first, first - (rows - 1))
    hi = lo + rows
    starts = np.zeros(0, dtype=np.int64) if part_starts is None else np.asarray(part_starts, dtype=np.int64)
    if len(runs) and (lo.min() < 0 or hi.max() > n_rows or rows.min() < 1 or copies.min() < 1 or length.min() < 1):
        raise PackcliError(f"runs must lie in rows [0, {n_rows}), each of one row and one copy or more")
    if len(starts) and (starts.min() < 0 or starts.max() > n_rows):
        raise PackcliError(f"part starts must be rows in [0, {n_rows}]")
    bounds, a, b, is_start = _interval_bounds(lo, hi, starts, n_rows)
    n_slots = int(copies @ (b - a))
    row_start, slot_offsets, slot_len, slot_pos, used = kernel(_lay_out_runs, n_slots + len(runs) + len(bounds))(
        runs, a, b, bounds, is_start, n_slots
    )
    return with_used_slots(row_start, slot_offsets, slot_len, slot_pos, used)


# A kernel's slot arrays, allocated for every slot before layouts are joined, are copied to
# their used size only when that is below this share of them: a copy of a grouped plan's
# slots (few of them joined) costs more than the memory it would give back.
KEEP_USED = 0.9


def with_used_slots(
    row_start: np.ndarray, slot_offsets: np.ndarray, slot_len: np.ndarray, slot_pos: np.ndarray, used: int
) -> Patterns:
    """A kernel's patterns, of the first `used` slots of the slot arrays it allocated:
    copied to that size when it is below KEEP_USED of them, else views, a few joined slots
    unused past their end."""
    if used < len(slot_len) * KEEP_USED:
        slot_len, slot_pos = slot_len[:used].copy(), slot_pos[:used].copy()
    return Patterns(row_start, slot_offsets, slot_len[:used], slot_pos[:used])


# Bounds found by marking an array of n_rows + 1 flags while that is at most this many
# times the values marked (the grouped plans' small groups: a few runs per row); by
# sorting the values otherwise (one plan of a billion sequences: tens of millions of rows,
# a few thousand runs).
MARK_ROWS_PER_BOUND = 4


def _interval_bounds(
    lo: np.ndarray, hi: np.ndarray, starts: np.ndarray, n_rows: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The rows where a run or a part starts or a run ends, with 0 and n_rows, sorted and
    once each (`bounds`: interval i is rows [bounds[i], bounds[i + 1])); each run's first
    interval and end (indices into `bounds`); and whether a part starts at each bound."""
    values = len(lo) + len(hi) + len(starts) + 2
    if n_rows + 1 <= MARK_ROWS_PER_BOUND * values:
        mark = np.zeros(n_rows + 1, dtype=np.bool_)
        mark[lo] = True
        mark[hi] = True
        mark[starts] = True
        mark[0] = mark[n_rows] = True
        bounds = np.flatnonzero(mark)
        index = np.cumsum(mark) - 1
        a, b = index[lo], index[hi]
    else:
        bounds = np.sort(np.concatenate([lo, hi, starts, [0, n_rows]]))
        bounds = bounds[np.concatenate([[True], bounds[1:] != bounds[:-1]])]
        a, b = np.searchsorted(bounds, lo), np.searchsorted(bounds, hi)
    is_start = np.zeros(len(bounds), dtype=np.bool_)
    is_start[np.searchsorted(bounds, starts)] = True
    return bounds.astype(np.int64), a.astype(np.int64), b.astype(np.int64), is_start


@njit(cache=True)
def _lay_out_runs(runs, run_first, run_end, bounds, is_start, n_slots):
    """The patterns of the intervals between bounds: run r (length, first_row, step, rows,
    offset, copies) holds intervals run_first[r] .. run_end[r] - 1, each row of them
    `copies` slots of `length` side by side from `offset`. An interval's runs are laid out
    by offset (the runs of a row never overlap, so that is the row's slots in offset
    order); an interval with the layout of the pattern before it joins that pattern, unless
    a part starts at its first row. n_slots: the slots of every interval, unmerged.
    Returns (row_start, slot_offsets, slot_len, slot_pos, slots used of the last two)."""
    n_runs = run_first.shape[0]
    n_intervals = bounds.shape[0] - 1
    # the runs of each interval, by a counting sort on the interval
    first_pair = np.zeros(n_intervals + 1, dtype=np.int64)
    for r in range(n_runs):
        for i in range(run_first[r], run_end[r]):
            first_pair[i + 1] += 1
    for i in range(n_intervals):
        first_pair[i + 1] += first_pair[i]
    pair_run = np.empty(first_pair[n_intervals], dtype=np.int64)
    cursor = first_pair[:-1].copy()
    for r in range(n_runs):
        for i in range(run_first[r], run_end[r]):
            pair_run[cursor[i]] = r
            cursor[i] += 1
    row_start = np.empty(n_intervals + 1, dtype=np.int64)
    slot_offsets = np.empty(n_intervals + 1, dtype=np.int64)
    slot_len = np.empty(n_slots, dtype=np.int64)
    slot_pos = np.empty(n_slots, dtype=np.int64)
    slot_offsets[0] = 0
    n_patterns = 0
    j = 0  # slots written
    for i in range(n_intervals):
        a, b = first_pair[i], first_pair[i + 1]
        for k in range(a + 1, b):  # insertion sort by offset: a row holds few runs
            r = pair_run[k]
            m = k
            while m > a and runs[pair_run[m - 1], 4] > runs[r, 4]:
                pair_run[m] = pair_run[m - 1]
                m -= 1
            pair_run[m] = r
        begin = j
        for k in range(a, b):
            r = pair_run[k]
            n = runs[r, 0]
            for c in range(runs[r, 5]):
                slot_len[j] = n
                slot_pos[j] = runs[r, 4] + c * n
                j += 1
        if (
            n_patterns > 0
            and not is_start[i]
            and _same_layout(slot_len, slot_pos, slot_offsets[n_patterns - 1], begin, j)
        ):
            j = begin  # the interval's rows join the pattern before it
            continue
        row_start[n_patterns] = bounds[i]
        n_patterns += 1
        slot_offsets[n_patterns] = j
    row_start[n_patterns] = bounds[n_intervals]
    return row_start[: n_patterns + 1].copy(), slot_offsets[: n_patterns + 1].copy(), slot_len, slot_pos, j


@njit(cache=True)
def _same_layout(slot_len, slot_pos, prev, begin, end):
    """Whether slots begin..end - 1 (the layout just written) are the slots from `prev`
    up to `begin` (the pattern before it), length for length and position for position:
    the test by which a layout joins the pattern before it."""
    if begin - prev != end - begin:
        return False
    for s in range(end - begin):
        if slot_len[prev + s] != slot_len[begin + s] or slot_pos[prev + s] != slot_pos[begin + s]:
            return False
    return True


def within(sizes: np.ndarray) -> np.ndarray:
    """0, 1, ..., size - 1 for each size, concatenated."""
    sizes = np.asarray(sizes, dtype=np.int64)
    total = int(sizes.sum())
    return np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(sizes) - sizes, sizes)


def offsets_of(sizes: np.ndarray) -> np.ndarray:
    """0, then the running sums of `sizes`: where each of them starts, and their end."""
    out = np.zeros(len(sizes) + 1, dtype=np.int64)
    np.cumsum(sizes, out=out[1:])
    return out


def sliced(p: Patterns, first: int, last: int) -> Patterns:
    """Patterns first .. last - 1 on their own: rows and slots numbered from 0."""
    a, b = int(p.slot_offsets[first]), int(p.slot_offsets[last])
    return Patterns(
        p.row_start[first : last + 1] - p.row_start[first],
        p.slot_offsets[first : last + 1] - a,
        p.slot_len[a:b],
        p.slot_pos[a:b],
    )


def joined(parts: list[Patterns]) -> Patterns:
    """The patterns of several groups, one after another (rows and slots renumbered)."""
    if not parts:
        zero = np.zeros(1, dtype=np.int64)
        empty = np.zeros(0, dtype=np.int64)
        return Patterns(zero, zero.copy(), empty, empty.copy())
    row_start, slot_offsets, rows, slots = [np.zeros(1, dtype=np.int64)], [np.zeros(1, dtype=np.int64)], 0, 0
    for q in parts:
        row_start.append(q.row_start[1:] + rows)
        slot_offsets.append(q.slot_offsets[1:] + slots)
        rows += q.n_rows
        slots += len(q.slot_len)
    return Patterns(
        np.concatenate(row_start),
        np.concatenate(slot_offsets),
        np.concatenate([q.slot_len for q in parts]),
        np.concatenate([q.slot_pos for q in parts]),
    )
