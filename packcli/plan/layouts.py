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

from packcli.core.jit import kernel


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


def runs_from_counts(counts: np.ndarray, capacity: int, algorithm: str, cap: int = 0) -> tuple[np.ndarray, int]:
    """The packer's runs, one per row: (length, first_row, step, rows, offset, copies), and
    its row count."""
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
    per_length = np.asarray(run_end) - np.asarray(run_begin)
    table = np.empty((int(per_length.sum()), 6), dtype=np.int64)
    k = 0
    for length in np.flatnonzero(per_length).tolist():
        b, e = int(run_begin[length]), int(run_end[length])
        table[k : k + e - b, 0] = length
        table[k : k + e - b, 1:] = runs[b:e]
        k += e - b
    return table, int(n_rows)


def patterns_from_runs(runs: np.ndarray, n_rows: int) -> Patterns:
    """The rows the runs make, as patterns: a sweep over the rows where some run starts or
    ends; between two such rows every row holds the same runs, so the same layout."""
    length, first, step, rows, offset, copies = (runs[:, i] for i in range(6))
    lo = np.where(step >= 0, first, first - (rows - 1))
    hi = lo + rows
    bounds = np.unique(np.concatenate([lo, hi, [0, n_rows]]))
    a = np.searchsorted(bounds, lo)
    b = np.searchsorted(bounds, hi)
    spans = b - a
    run_of_pair = np.repeat(np.arange(len(runs)), spans)
    interval = a[run_of_pair] + within(spans)
    slot_copies = copies[run_of_pair]
    slot_run = np.repeat(run_of_pair, slot_copies)
    slot_interval = np.repeat(interval, slot_copies)
    c = within(slot_copies)
    slot_len = length[slot_run]
    slot_pos = offset[slot_run] + c * slot_len
    order = np.lexsort((slot_pos, slot_interval))
    slot_interval, slot_len, slot_pos = slot_interval[order], slot_len[order], slot_pos[order]
    n_intervals = len(bounds) - 1
    per_interval = np.bincount(slot_interval, minlength=n_intervals)
    return merged(
        Patterns(
            bounds.astype(np.int64), offsets_of(per_interval), slot_len.astype(np.int64), slot_pos.astype(np.int64)
        )
    )


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


def merged(p: Patterns) -> Patterns:
    """The patterns with consecutive ones of the same layout joined into one."""
    n = len(p.row_start) - 1
    if n <= 1:
        return p
    sizes = np.diff(p.slot_offsets)
    same = sizes[1:] == sizes[:-1]
    candidates = np.flatnonzero(same)
    if candidates.size:
        keys = [_layout_key(p, i) for i in range(n)]
        same = np.array([keys[i] == keys[i + 1] for i in range(n - 1)])
    keep = np.concatenate([[True], ~same])
    starts = np.flatnonzero(keep)
    row_start = np.concatenate([p.row_start[starts], p.row_start[-1:]])
    slot_keep = np.repeat(keep, sizes)
    new_sizes = sizes[starts]
    return Patterns(row_start, offsets_of(new_sizes), p.slot_len[slot_keep], p.slot_pos[slot_keep])


def _layout_key(p: Patterns, i: int) -> bytes:
    a, b = int(p.slot_offsets[i]), int(p.slot_offsets[i + 1])
    return p.slot_len[a:b].tobytes() + p.slot_pos[a:b].tobytes()


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
