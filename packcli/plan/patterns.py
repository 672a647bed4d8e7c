"""Bin mode's plan from the length histogram: row patterns with repeat counts, and a slot rule.

bfd and the histogram packers decide from the counts of each length alone; their runs
become row patterns (plan/layouts.py: a layout of placed lengths, back to back from
offset 0, with a repeat count, in plan row order), and the repair pass (plan/repair.py)
rewrites the rows it can change. Which sequence fills which slot is a rule, not an
array:

    the k-th sequence of placed length L in input order (within its --group-by group)
    takes the k-th slot of length L in plan order (rows in order, slots by offset).

So a slot of length L at copy c (the c-th L of its pattern) in the i-th row of pattern p
has rank `base[slot] + i * copies[slot]`, where `copies` counts L in the pattern and
`base` adds the slots of L in the patterns before p and the group's first sequence of
length L in the slot map. The slot map lists the sequences' spill starts sorted by
(group, placed length), in input order inside each (8 bytes per sequence; their real
lengths beside them with --pad-to-multiple-of); a plan whose slots are found by bucket
needs no map (plan/buckets.py). docs/plan-from-counts.md has the design.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

import numpy as np

from packcli.core.errors import PackcliError
from packcli.core.jit import kernel, njit
from packcli.plan.buckets import BucketParts, Buckets
from packcli.plan.contract import Pieces, RowOrder
from packcli.plan.kernels.pack import checked_lengths
from packcli.plan.layouts import (
    Patterns,
    joined,
    offsets_of,
    patterns_from_runs,
    runs_from_counts,
    sliced,
)
from packcli.plan.permute import RowPermutation
from packcli.plan.repair import repair_rows, replace_rows

# Algorithms whose rows come from the histogram alone; the repair pass follows each of
# them, as kernels.pack's improve_rows follows them when they place lengths one by one.
PATTERN_ALGORITHMS = ("bfd", "spfhp", "lpfhp")


@dataclass(frozen=True, eq=False)
class SlotMap:
    """Slots found through the slot map: the first token in the spill of the sequence of
    each rank (sequences sorted by (group, placed length), input order inside each)."""

    start: np.ndarray  # int64 per rank


# Where a PatternPlan's slots are found, the rank of a slot made a place to read its
# sequence at: through the slot map (in the spill); by bucket in the spill's sorted copy
# (Buckets, its layout); or by bucket in parts (BucketParts: a spill's chunks written by
# length, or the Ray engine's sorted copies of its parts).
SlotLookup = SlotMap | Buckets | BucketParts


@dataclass
class PatternPlan:
    """The plan of one window: patterns (every group's, group 0 first) and the rule that
    fills their slots (see the module docstring), with where its slots are found
    (`lookup`)."""

    seq_len: int
    patterns: Patterns
    slot_base: np.ndarray  # int64 per slot: rank in the slot map of its row 0's sequence
    slot_step: np.ndarray  # int64 per slot: copies of its length in its pattern
    lookup: SlotLookup
    slot_real: np.ndarray | None = None  # int64 per rank: real lengths (--pad-to-multiple-of)
    shuffle: bool = False
    seed: int = 0
    window: int = 0
    row_group: np.ndarray | None = None  # int32 per output row (--group-by)
    remainder_tokens: int = 0

    @property
    def n_rows(self) -> int:
        return self.patterns.n_rows

    @property
    def buckets(self) -> Buckets | None:
        """The buckets the slots are found by (None: through a slot map)."""
        if isinstance(self.lookup, BucketParts):
            return self.lookup.buckets
        return self.lookup if isinstance(self.lookup, Buckets) else None

    @functools.cached_property
    def slot_bucket(self) -> np.ndarray:
        """The bucket of each pattern slot's ranks (found by bucket): every rank a slot takes,
        in all its rows, is of one (group, length), so its bucket is found once per slot
        here, not once per sequence per block."""
        buckets = self.buckets
        assert buckets is not None  # slots found by bucket
        found: np.ndarray = np.searchsorted(buckets.rank, self.slot_base, side="right") - 1
        return found

    def row_order(self) -> RowOrder:
        """Nothing to work out: a row's slots come from its pattern."""
        return None

    def plan_rows_of(self, output_rows: np.ndarray) -> np.ndarray:
        rows = np.asarray(output_rows, dtype=np.int64)
        if not self.shuffle or not len(rows):
            return rows.copy()
        return RowPermutation(self.n_rows, self.seed, self.window).inverse(rows)

    def output_rows_of(self, plan_rows: np.ndarray) -> np.ndarray:
        rows = np.asarray(plan_rows, dtype=np.int64)
        if not self.shuffle or not len(rows):
            return rows.copy()
        return RowPermutation(self.n_rows, self.seed, self.window).forward(rows)

    def pieces(self, first: int, last: int, order: RowOrder = None) -> Pieces:
        """The sequences of output rows [first, last), by row then offset, each starting
        where `lookup` places it (`order` is row_order()'s: None)."""
        start, length, row, offset = self.placed(np.arange(first, last, dtype=np.int64))
        return Pieces(start, length, row - first, offset)

    def slots(self, output_rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(rank in the slot map, placed length, output row, offset) of every slot of these
        output rows, by row then offset: the rows, from the plan alone."""
        slot, rank, row = self._slots_of(output_rows)
        p = self.patterns
        return rank, p.slot_len[slot], row, p.slot_pos[slot]

    def ranks(self, first: int, last: int) -> np.ndarray:
        """The slot-map rank of each piece of output rows [first, last), in the order
        `pieces` gives them: which sequence of its (group, placed length) each slot takes,
        whatever reader it is then read from."""
        _, rank, _ = self._slots_of(np.arange(first, last, dtype=np.int64))
        return rank

    def _slots_of(self, output_rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(pattern slot, rank, output row) of every slot of these output rows."""
        p = self.patterns
        output_rows = np.asarray(output_rows, dtype=np.int64)
        plan_rows = self.plan_rows_of(output_rows)
        work = len(plan_rows) * int(np.diff(p.slot_offsets).max(initial=0)) + len(p.slot_len)  # at most
        slot, rank, owner = kernel(_expand_rows, work)(
            plan_rows, p.row_start, p.slot_offsets, self.slot_base, self.slot_step
        )
        return slot, rank, output_rows[owner]

    def placed(self, output_rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(start, real length, output row, offset) of every slot of these output rows. The
        start is where `lookup` places the slot's rank: in the spill (slot map), its sorted
        copy (buckets) or the parts' joined coordinates (buckets in parts)."""
        slot, rank, row = self._slots_of(output_rows)
        p = self.patterns
        length, offset = p.slot_len[slot], p.slot_pos[slot]
        real = length if self.slot_real is None else self.slot_real[rank]
        lookup = self.lookup
        if isinstance(lookup, SlotMap):
            return lookup.start[rank], real, row, offset
        b = self.slot_bucket[slot]
        if isinstance(lookup, BucketParts):
            return lookup.positions(b, rank - lookup.buckets.rank[b]), real, row, offset
        return lookup.token[b] + (rank - lookup.rank[b]) * lookup.length[b], real, row, offset

    def in_parts(self, parts: BucketParts) -> PatternPlan:
        """This plan with its buckets' sequences found in `parts` (a copy: a plan shipped
        to several readers keeps its own)."""
        assert parts.buckets is self.buckets
        return replace(self, lookup=parts)

    def placement(self, spill_starts: np.ndarray) -> dict[str, np.ndarray]:
        """Every sequence's place, in spill order (as plan.RowPlan lists them): `source`,
        `row` (output row), `offset`, `length`. `spill_starts`: each segment's first token
        (increasing). For the library, which returns it; O(sequences)."""
        start, length, row, offset = self.placed(np.arange(self.n_rows, dtype=np.int64))
        source = np.searchsorted(spill_starts, start)
        order = np.argsort(source, kind="stable")
        return {"source": source[order], "row": row[order], "offset": offset[order], "length": length[order]}

    def placed_histogram(self) -> np.ndarray:
        """Sequences per placed length 0..seq_len (what the report's window cost needs);
        the slots' lengths are placed lengths already."""
        p = self.patterns
        weights = p.repeat[p.slot_pattern()]
        return np.bincount(p.slot_len, weights=weights, minlength=self.seq_len + 1)[: self.seq_len + 1].astype(np.int64)


def pattern_plan(
    lengths: np.ndarray,
    seq_len: int,
    algorithm: str,
    *,
    multiple: int = 1,
    cap: int | None = None,
    groups: np.ndarray | None = None,
    shuffle: bool = False,
    seed: int = 0,
    window: int = 0,
    by_bucket: bool = False,
) -> PatternPlan:
    """The plan of one window of segments (`lengths`, real, in spill order) from its
    histogram per group, its slots found through the slot map; or, with `by_bucket`, by
    bucket in the spill's sorted copy (write/by_length.py): nothing per sequence then,
    but the real lengths with `multiple` > 1."""
    # every length in [1, seq_len] once placed (as pack_lengths checks them): the kernels
    # below index by placed length and trust it
    lengths = checked_lengths(lengths, seq_len // multiple * multiple)
    if groups is None:
        counts = kernel(_placed_counts, len(lengths) + seq_len)(lengths, multiple, seq_len)
        histograms = [(0, counts)] if len(lengths) else []
        plan = plan_from_counts(histograms, seq_len, algorithm, cap=cap, shuffle=shuffle, seed=seed, window=window)
        if by_bucket:
            _, plan.slot_real = slot_map(lengths, multiple, counts)
        else:
            starts, plan.slot_real = slot_map(lengths, multiple, counts)
            plan.lookup = SlotMap(starts)
        return plan
    from packcli.plan.grouping import group_length_table

    placed = lengths if multiple == 1 else (lengths + multiple - 1) // multiple * multiple
    table = group_length_table(groups, placed, seq_len)
    histograms = [(g, table[g]) for g in np.flatnonzero(table.any(axis=1)).tolist()]
    plan = plan_from_counts(
        histograms, seq_len, algorithm, cap=cap, shuffle=shuffle, seed=seed, window=window, grouped=True
    )
    if not by_bucket:
        starts, plan.slot_real = slot_map(lengths, multiple, table, groups)
        plan.lookup = SlotMap(starts)
    elif multiple > 1:
        _, plan.slot_real = slot_map(lengths, multiple, table, groups)
    return plan


def histogram_plan(
    histogram: np.ndarray,
    seq_len: int,
    algorithm: str,
    *,
    cap: int | None = None,
    shuffle: bool = False,
    seed: int = 0,
    window: int = 0,
) -> PatternPlan:
    """The plan of one window from its histogram alone (sequences per length, no
    --group-by, no --pad-to-multiple-of), its slots found by bucket in the spill's sorted
    copy: what pattern_plan makes with `by_bucket`, without the lengths."""
    counts = np.zeros(seq_len + 1, dtype=np.int64)
    histogram = np.asarray(histogram, dtype=np.int64)
    if len(histogram) > seq_len + 1 or (len(histogram) and histogram[0]):
        raise PackcliError(f"lengths must be in [1, {seq_len}]")
    counts[: len(histogram)] = histogram
    histograms = [(0, counts)] if counts.sum() else []
    return plan_from_counts(histograms, seq_len, algorithm, cap=cap, shuffle=shuffle, seed=seed, window=window)


def slot_map(
    lengths: np.ndarray, multiple: int, counts: np.ndarray, groups: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray | None]:
    """The slot map: the spill start of every sequence (starts are the running sums of
    `lengths`), sorted by placed length (`counts`: sequences per placed length), in input
    order inside each length; and beside it the real lengths when `multiple` > 1. With
    `groups` (a group id per sequence), sorted by (group, placed length), `counts` the
    sequences of each [group id, placed length]. A counting sort in one pass: nothing but
    the outputs is allocated."""
    lengths = np.ascontiguousarray(lengths, dtype=np.int64)
    counts = np.ascontiguousarray(counts, dtype=np.int64)
    width = counts.shape[-1]
    if len(lengths) and (lengths.min() < 1 or -(-int(lengths.max()) // multiple) * multiple >= width):
        raise PackcliError(f"lengths must be in [1, {width - 1}] once placed")
    if int(counts.sum()) != len(lengths):
        raise PackcliError(f"counts hold {int(counts.sum())} sequences, lengths {len(lengths)}")
    starts = np.empty(len(lengths), dtype=np.int64)
    real = np.empty(len(lengths) if multiple > 1 else 0, dtype=np.int64)
    work = len(lengths) + counts.size
    if groups is None:
        kernel(_slot_map, work)(lengths, multiple, counts.reshape(-1), starts, real)
    else:
        groups = np.asarray(groups)
        groups = np.ascontiguousarray(groups, dtype=np.int32 if groups.dtype == np.int32 else np.int64)
        if groups.shape != lengths.shape or (
            len(groups) and (groups.min() < 0 or groups.max() >= counts.size // width)
        ):
            raise PackcliError(f"group ids must be one per sequence, in [0, {counts.size // width})")
        kernel(_grouped_slot_map, work)(lengths, multiple, groups, width, counts.reshape(-1), starts, real)
    return starts, (real if multiple > 1 else None)


@njit(cache=True)
def _placed_counts(lengths, multiple, seq_len):
    counts = np.zeros(seq_len + 1, dtype=np.int64)
    for i in range(lengths.shape[0]):
        counts[(lengths[i] + multiple - 1) // multiple * multiple] += 1
    return counts


@njit(cache=True)
def _grouped_slot_map(lengths, multiple, groups, width, counts, starts, real):
    """_slot_map by (group, placed length): bucket groups[i] * width + placed."""
    cursor = np.empty(counts.shape[0], dtype=np.int64)
    total = 0
    for key in range(counts.shape[0]):
        cursor[key] = total
        total += counts[key]
    start = 0
    for i in range(lengths.shape[0]):
        n = lengths[i]
        key = groups[i] * width + (n + multiple - 1) // multiple * multiple
        k = cursor[key]
        starts[k] = start
        if multiple > 1:
            real[k] = n
        cursor[key] = k + 1
        start += n


@njit(cache=True)
def _slot_map(lengths, multiple, counts, starts, real):
    cursor = np.empty(counts.shape[0], dtype=np.int64)
    total = 0
    for length in range(counts.shape[0]):
        cursor[length] = total
        total += counts[length]
    start = 0
    for i in range(lengths.shape[0]):
        n = lengths[i]
        placed = (n + multiple - 1) // multiple * multiple
        k = cursor[placed]
        starts[k] = start
        if multiple > 1:
            real[k] = n
        cursor[placed] = k + 1
        start += n


def plan_from_counts(
    histograms: list[tuple[int, np.ndarray]],
    seq_len: int,
    algorithm: str,
    *,
    cap: int | None = None,
    shuffle: bool = False,
    seed: int = 0,
    window: int = 0,
    grouped: bool = False,
) -> PatternPlan:
    """The plan from the histograms alone: (group id, sequences per placed length
    0..seq_len) for each group, in id order. Its slots are found by bucket in the sorted
    copy (its `lookup`, the buckets of these histograms), which a caller with a slot map
    replaces; rows come out as ranks (PatternPlan.slots) either way. `grouped`: give the
    plan its `row_group` column (int32 per row).

    Each group is packed on its own (one packer call per group: its runs); the runs'
    patterns, the slot ranks and what the repair pass is given are worked out for all
    groups in one pass each, so that the work beyond the packer's grows with the slots,
    not with the groups times their patterns."""
    width = seq_len + 1
    ids, tables, all_runs, group_rows = [], [], [], []
    rows_before = 0
    for g, counts in histograms:
        counts = np.asarray(counts, dtype=np.int64)
        if counts.shape != (width,):
            raise PackcliError(f"a histogram of {counts.shape} counts for lengths 0..{seq_len}")
        if not counts.any():
            continue
        # the group's rows after the ones of the groups before it
        runs, n_rows = runs_from_counts(counts, seq_len, algorithm, cap or 0, rows_before)
        ids.append(g)
        tables.append(counts)
        all_runs.append(runs)
        group_rows.append(n_rows)
        rows_before += n_rows
    rows = np.array(group_rows, dtype=np.int64)
    if ids:
        table = np.stack(tables)
        pats = patterns_from_runs(np.concatenate(all_runs), rows_before, offsets_of(rows)[:-1])
        if algorithm in PATTERN_ALGORITHMS and cap is None:
            pats, rows = _repaired(pats, rows, table, seq_len)
        part = np.repeat(np.arange(len(rows)), np.diff(np.searchsorted(pats.row_start, offsets_of(rows))))
        # a group's ranks follow the sequences of the groups before it; in it, a length's
        # ranks follow the shorter lengths'
        slot_base, slot_step = _slot_ranks(pats, part, width, offsets_of(table.ravel()))
    else:
        pats, slot_base, slot_step = joined([]), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    plan = PatternPlan(
        seq_len=seq_len,
        patterns=pats,
        slot_base=slot_base,
        slot_step=slot_step,
        lookup=Buckets.from_histograms([counts for _, counts in histograms], seq_len),
        shuffle=shuffle,
        seed=seed,
        window=window,
    )
    if grouped:
        in_plan_order = np.repeat(np.array(ids, dtype=np.int32), rows)
        plan.row_group = np.empty_like(in_plan_order)
        plan.row_group[plan.output_rows_of(np.arange(plan.n_rows))] = in_plan_order
    return plan


def _repaired(pats: Patterns, rows: np.ndarray, table: np.ndarray, seq_len: int) -> tuple[Patterns, np.ndarray]:
    """The repair pass on each group it can change (more rows than its lower bound), the
    group's patterns cut out and repaired on their own; every group's new rows then put in
    place in one pass over the plan (repair.replace_rows). Returns the plan and the groups'
    rows after it."""
    tokens = table @ np.arange(seq_len + 1, dtype=np.int64)
    todo = np.flatnonzero((rows > 1) & (rows > np.maximum(1, -(-tokens // seq_len))))
    group_start = offsets_of(rows)
    first_pattern = np.searchsorted(pats.row_start, group_start)
    replaced, new_row, new_parts, rows, n_new = [], [], [], rows.copy(), 0
    for k in todo.tolist():
        own = sliced(pats, int(first_pattern[k]), int(first_pattern[k + 1]))
        found = repair_rows(own, seq_len, int(table[k].sum()))
        if found is None:
            continue
        row_ids, new = found
        replaced.append(row_ids + group_start[k])
        # the lowest places take the new rows; the places left over are dropped
        new_row.append(np.where(np.arange(len(row_ids)) < new.n_rows, n_new + np.arange(len(row_ids)), -1))
        new_parts.append(new)
        rows[k] -= len(row_ids) - new.n_rows
        n_new += new.n_rows
    if not replaced:
        return pats, rows
    joined_new = joined(new_parts)
    pats = replace_rows(pats, np.concatenate(replaced), np.concatenate(new_row), joined_new, group_start[:-1])
    return pats, rows


def _slot_ranks(p: Patterns, part: np.ndarray, width: int, first_rank: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per slot: the rank of its copy in the pattern's first row, and the copies of its
    length in the pattern (the rank's step from row to row). The rank counts from
    first_rank[q * width + L] for the slots of length L in part q (`part`: the part, a
    group, of each pattern, non-decreasing), in plan order. Lengths are below `width`; a
    pattern's slots are in offset order, as every Patterns holds them."""
    part = np.asarray(part, dtype=np.int64)
    first_rank = np.asarray(first_rank, dtype=np.int64)
    if len(part) != len(p.row_start) - 1 or (len(part) and int(part.max() + 1) * width > len(first_rank)):
        raise PackcliError(f"a part for each of {len(p.row_start) - 1} patterns, a first rank for each part and length")
    work = 2 * len(p.slot_len) + len(part)
    return kernel(_rank_slots, work)(p.row_start, p.slot_offsets, p.slot_len, part, width, first_rank)


@njit(cache=True)
def _rank_slots(row_start, slot_offsets, slot_len, part, width, first_rank):
    """One walk over the patterns in plan order: a slot's base is the first rank of its
    (part, length), plus the slots of its length in the part's patterns before it (over
    their rows), plus the copies before it in its pattern; its step the copies of its
    length in the pattern."""
    n_slots = slot_len.shape[0]
    base = np.empty(n_slots, dtype=np.int64)
    step = np.empty(n_slots, dtype=np.int64)
    seen = np.empty(width, dtype=np.int64)  # the next rank of each length in the part, all rows
    owner = np.full(width, -1, dtype=np.int64)  # the part `seen` counts each length of
    copies = np.zeros(width, dtype=np.int64)  # of each length in the pattern
    taken = np.zeros(width, dtype=np.int64)  # of them ranked so far
    for p in range(row_start.shape[0] - 1):
        a, b = slot_offsets[p], slot_offsets[p + 1]
        q = part[p]
        for s in range(a, b):
            length = slot_len[s]
            if owner[length] != q:
                owner[length] = q
                seen[length] = first_rank[q * width + length]
            copies[length] += 1
        repeat = row_start[p + 1] - row_start[p]
        for s in range(a, b):
            length = slot_len[s]
            base[s] = seen[length] + taken[length]
            step[s] = copies[length]
            taken[length] += 1
            if taken[length] == copies[length]:  # its last copy: the pattern's rows move it on
                seen[length] += copies[length] * repeat
                taken[length] = 0
                copies[length] = 0
    return base, step


@njit(cache=True, nogil=True)
def _expand_rows(plan_rows, row_start, slot_offsets, slot_base, slot_step):
    """(pattern slot, rank, index into plan_rows) of every slot of these plan rows, by row
    then offset: row i of pattern p gives slot s the rank slot_base[s] + i * slot_step[s]."""
    n = len(plan_rows)
    pattern = np.empty(n, dtype=np.int64)
    total = 0
    p = 0
    for k in range(n):
        r = plan_rows[k]
        if not (row_start[p] <= r < row_start[p + 1]):  # rows in order mostly stay in one pattern
            p = np.searchsorted(row_start, r, side="right") - 1
        pattern[k] = p
        total += slot_offsets[p + 1] - slot_offsets[p]
    slot = np.empty(total, dtype=np.int64)
    rank = np.empty(total, dtype=np.int64)
    owner = np.empty(total, dtype=np.int64)
    j = 0
    for k in range(n):
        p = pattern[k]
        i = plan_rows[k] - row_start[p]
        for s in range(slot_offsets[p], slot_offsets[p + 1]):
            slot[j] = s
            rank[j] = slot_base[s] + i * slot_step[s]
            owner[j] = k
            j += 1
    return slot, rank, owner
