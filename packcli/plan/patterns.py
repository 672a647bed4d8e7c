"""Bin mode's plan from the length histogram: row patterns with repeat counts.

bfd and the histogram packers decide from the counts of each length alone; what they
decide is a list of runs (kernels_runs.py). Here the runs become the plan: row patterns
(a layout of placed lengths, back to back from offset 0) with a repeat count, in plan row
order. The repair pass (kernels_improve.py) runs on the rows with room and the full rows
it may pool, expanded from the patterns, and its rows replace them. Which sequence fills
which slot is a rule, not an array:

    the k-th sequence of placed length L in input order (within its --group-by group)
    takes the k-th slot of length L in plan order (rows in order, slots by offset).

So a slot of length L at copy c (the c-th L of its pattern) in the i-th row of pattern p
has rank `base[slot] + i * copies[slot]`, where `copies` counts L in the pattern and
`base` adds the slots of L in the patterns before p and the group's first sequence of
length L in the slot map. The slot map lists the sequences' spill starts sorted by
(group, placed length), in input order inside each (8 bytes per sequence; their real
lengths beside them with --pad-to-multiple-of). docs/plan-from-counts.md has the design.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

import numpy as np

from packcli.core.errors import PackcliError
from packcli.core.jit import kernel, njit
from packcli.plan.contract import Pieces, RowOrder
from packcli.plan.kernels.pack import (
    IMPROVE_WORK_BASE,
    IMPROVE_WORK_PER_SEQUENCE,
    PackedLengths,
    _as_lengths,
    improve_rows,
)
from packcli.plan.permute import RowPermutation

# Algorithms whose rows come from the histogram alone; the repair pass follows each of
# them, as kernels.pack's improve_rows follows them when they place lengths one by one.
PATTERN_ALGORITHMS = ("bfd", "spfhp", "lpfhp")
# What the repair pass is given, so that its cost stays flat in the number of sequences:
# the rows with room (at most REPAIR_ROOM_ROWS of them, the emptiest first) and the full
# rows its rounds may pool (0, 16, 48, 112, ... of them, the ones with the most sequences:
# REPAIR_FULL_ROWS covers its first 9 rounds). Below both limits the pass sees every row
# it could change and saves as many rows as on the whole placement.
REPAIR_ROOM_ROWS = 1 << 13
REPAIR_FULL_ROWS = 4096
REPAIR_FULL_SLOTS = 1 << 17  # and no more sequences than this in those full rows


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
    return _merged(
        Patterns(bounds.astype(np.int64), _offsets(per_interval), slot_len.astype(np.int64), slot_pos.astype(np.int64))
    )


def within(sizes: np.ndarray) -> np.ndarray:
    """0, 1, ..., size - 1 for each size, concatenated."""
    sizes = np.asarray(sizes, dtype=np.int64)
    total = int(sizes.sum())
    return np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(sizes) - sizes, sizes)


def _offsets(sizes: np.ndarray) -> np.ndarray:
    out = np.zeros(len(sizes) + 1, dtype=np.int64)
    np.cumsum(sizes, out=out[1:])
    return out


def _merged(p: Patterns) -> Patterns:
    """Consecutive patterns with the same layout joined into one."""
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
    return Patterns(row_start, _offsets(new_sizes), p.slot_len[slot_keep], p.slot_pos[slot_keep])


def _layout_key(p: Patterns, i: int) -> bytes:
    a, b = int(p.slot_offsets[i]), int(p.slot_offsets[i + 1])
    return p.slot_len[a:b].tobytes() + p.slot_pos[a:b].tobytes()


def repair_patterns(p: Patterns, capacity: int, n_sequences: int) -> Patterns:
    """The repair pass (kernels.improve_rows) on the rows it can change: every row with room
    (the REPAIR_ROOM_ROWS emptiest beyond that many) and the REPAIR_FULL_ROWS full rows
    with the most sequences (ties: the lowest row; no more than REPAIR_FULL_SLOTS
    sequences in them), expanded from the patterns in row order. Its rows take the places of those rows, the
    lowest first; the places left over are dropped. Budget: the one improve_rows gives the
    whole input."""
    repeat = p.repeat
    sizes = np.diff(p.slot_offsets)
    fill = np.bincount(p.slot_pattern(), weights=p.slot_len, minlength=len(sizes)).astype(np.int64)
    total = int((fill * repeat).sum())
    if p.n_rows <= max(1, -(-total // capacity)):
        return p
    with_room = np.flatnonzero(fill < capacity)
    room_rows = repeat[with_room]
    if int(room_rows.sum()) > REPAIR_ROOM_ROWS:  # the emptiest rows first, the lowest at equal fill
        emptiest = with_room[np.lexsort((p.row_start[with_room], fill[with_room]))]
        taken_rows = np.minimum(np.cumsum(repeat[emptiest]), REPAIR_ROOM_ROWS)
        room_take = np.diff(np.concatenate([[0], taken_rows]))
        with_room, room_rows = emptiest[room_take > 0], room_take[room_take > 0]
    full = np.flatnonzero(fill == capacity)
    # full rows by most sequences, then lowest row: whole patterns first, the last one cut
    by_count = full[np.lexsort((p.row_start[full], -sizes[full]))]
    taken_rows = np.minimum(np.cumsum(repeat[by_count]), REPAIR_FULL_ROWS)
    take = np.diff(np.concatenate([[0], taken_rows]))
    slots_before = np.cumsum(take * sizes[by_count]) - take * sizes[by_count]
    take = np.clip((REPAIR_FULL_SLOTS - slots_before) // np.maximum(sizes[by_count], 1), 0, take)
    chosen_patterns = np.concatenate([with_room, by_count[take > 0]])
    chosen_rows = np.concatenate([room_rows, take[take > 0]])
    order = np.argsort(p.row_start[chosen_patterns], kind="stable")
    chosen_patterns, chosen_rows = chosen_patterns[order], chosen_rows[order]
    if not len(chosen_patterns):
        return p
    # the chosen rows, in row order: the first chosen_rows[k] rows of pattern chosen_patterns[k]
    row_ids = np.repeat(p.row_start[chosen_patterns], chosen_rows) + within(chosen_rows)
    row_pattern = np.repeat(chosen_patterns, chosen_rows)
    per_row = sizes[row_pattern]
    slot_index = np.repeat(p.slot_offsets[row_pattern], per_row) + within(per_row)
    lengths = p.slot_len[slot_index]
    sub_row = np.repeat(np.arange(len(row_ids)), per_row)
    placed = PackedLengths(sub_row.astype(np.int32), p.slot_pos[slot_index].astype(np.int32), len(row_ids))
    budget = IMPROVE_WORK_PER_SEQUENCE * n_sequences + IMPROVE_WORK_BASE
    repaired = improve_rows(lengths, placed, capacity, budget)
    if repaired.n_rows == len(row_ids):
        return p
    # the repaired rows' layouts, in row order, slots by position
    new_order = np.lexsort((repaired.offset, repaired.row))
    new_sizes = np.bincount(repaired.row, minlength=repaired.n_rows)
    repaired_rows = Patterns(
        np.arange(repaired.n_rows + 1, dtype=np.int64),
        _offsets(new_sizes),
        lengths[new_order].astype(np.int64),
        repaired.offset[new_order].astype(np.int64),
    )
    return _replace_rows(p, row_ids, repaired_rows)


def _replace_rows(p: Patterns, row_ids: np.ndarray, new: Patterns) -> Patterns:
    """The rows row_ids (sorted) replaced by the rows of `new` in order, the ones past its
    last dropped; every other row kept; rows renumbered without gaps."""
    n_new = new.n_rows
    cuts = np.unique(np.concatenate([p.row_start, row_ids, row_ids + 1]))
    begin, end = cuts[:-1], cuts[1:]
    replaced = np.isin(begin, row_ids)
    k = np.searchsorted(row_ids, begin)  # which chosen row, for replaced intervals
    dropped = replaced & (k >= n_new)
    keep = ~dropped
    begin, end, replaced, k = begin[keep], end[keep], replaced[keep], k[keep]
    pattern = np.searchsorted(p.row_start, begin, side="right") - 1
    repeat = end - begin
    # each interval's slots: a pattern's, or a new row's
    src_offsets = np.where(replaced, new.slot_offsets[np.minimum(k, n_new - 1)], p.slot_offsets[pattern])
    sizes = np.where(
        replaced,
        np.diff(new.slot_offsets)[np.minimum(k, n_new - 1)],
        np.diff(p.slot_offsets)[pattern],
    )
    flat = np.repeat(src_offsets, sizes) + within(sizes)
    from_new = np.repeat(replaced, sizes)
    slot_len = np.where(from_new, new.slot_len[np.where(from_new, flat, 0)], p.slot_len[np.where(from_new, 0, flat)])
    slot_pos = np.where(from_new, new.slot_pos[np.where(from_new, flat, 0)], p.slot_pos[np.where(from_new, 0, flat)])
    return _merged(Patterns(_offsets(repeat), _offsets(sizes), slot_len, slot_pos))


@dataclass
class Buckets:
    """The sorted copy's layout: bucket b holds the sequences of ranks
    [rank[b], rank[b + 1]) in records of `length[b]` tokens from token `token[b]`;
    `key[b]` = group position * (seq_len + 1) + placed length (increasing)."""

    key: np.ndarray  # int64 [B]
    length: np.ndarray  # int64 [B]
    rank: np.ndarray  # int64 [B + 1]
    token: np.ndarray  # int64 [B + 1]

    @staticmethod
    def from_histograms(histograms: list[np.ndarray], seq_len: int) -> Buckets:
        """Buckets of the groups' histograms (sequences per placed length 0..seq_len), in
        the order the plan counts ranks: group by group, lengths increasing."""
        keys, lengths, counts = [], [], []
        for position, counts_g in enumerate(histograms):
            counts_g = np.asarray(counts_g, dtype=np.int64)
            present = np.flatnonzero(counts_g)
            keys.append(position * (seq_len + 1) + present)
            lengths.append(present)
            counts.append(counts_g[present])
        empty = np.zeros(0, dtype=np.int64)
        key = np.concatenate(keys) if keys else empty
        length = np.concatenate(lengths) if lengths else empty
        count = np.concatenate(counts) if counts else empty
        rank = np.zeros(len(key) + 1, dtype=np.int64)
        np.cumsum(count, out=rank[1:])
        token = np.zeros(len(key) + 1, dtype=np.int64)
        np.cumsum(count * length, out=token[1:])
        return Buckets(key.astype(np.int64), length.astype(np.int64), rank, token)

    def starts(self, rank: np.ndarray) -> np.ndarray:
        """Where the sequences of these ranks start in the sorted copy (in tokens)."""
        b = np.searchsorted(self.rank, rank, side="right") - 1
        return self.token[b] + (rank - self.rank[b]) * self.length[b]


class BucketParts:
    """Where rank r of bucket b lies when each bucket's sequences are split over parts in
    order, part p holding `counts[p, b]` of them (in input order), laid out from
    `base[p, b]` in records of the bucket's length: a place in the sorted copy (Buckets)
    becomes a place in the parts' joined coordinates. The parts are the chunks of a spill
    written by length, or the Ray engine's sorted copies. A record (one slot) lies in one
    part."""

    def __init__(self, buckets: Buckets, counts: np.ndarray, base: np.ndarray):
        self.buckets = buckets
        self.counts = np.ascontiguousarray(counts, dtype=np.int64)
        self.base = np.ascontiguousarray(base, dtype=np.int64)
        parts, n_buckets = self.counts.shape
        # per bucket (rows), each part's first rank in it and, last, the bucket's size
        self.first = np.zeros((n_buckets, parts + 1), dtype=np.int64)
        np.cumsum(self.counts.T, axis=1, out=self.first[:, 1:])

    @staticmethod
    def end_to_end(buckets: Buckets, counts: np.ndarray) -> BucketParts:
        """Parts laid out one after another, each by bucket (a bucket it lacks takes no
        room): the chunks of a spill written by length, or the Ray parts' copies joined."""
        counts = np.asarray(counts, dtype=np.int64)
        sizes = counts * buckets.length[None, :]
        base = np.cumsum(sizes).reshape(sizes.shape) - sizes  # cell by cell, part after part
        return BucketParts(buckets, counts, base)

    def positions(self, bucket: np.ndarray, local: np.ndarray) -> np.ndarray:
        """Where the records of these (bucket, rank within the bucket) start."""
        work = len(local) + len(self.buckets.length)
        return kernel(_part_positions, work)(bucket, local, self.first, self.base, self.buckets.length)


@njit(cache=True, nogil=True)
def _part_positions(bucket, local, first, base, length):
    """BucketParts.positions. A bucket's ranks come in runs (the copies of one length in a
    row, and without --shuffle the same slot in consecutive rows), so each bucket's last
    part is tried before a search."""
    last_part = np.zeros(first.shape[0], dtype=np.int64)
    out = np.empty(len(local), dtype=np.int64)
    parts = first.shape[1] - 1
    for i in range(len(local)):
        b, r = bucket[i], local[i]
        p = last_part[b]
        if not (first[b, p] <= r < first[b, p + 1]):
            lo, hi = 0, parts - 1  # the last part whose first rank is <= r: empty parts are passed over
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if first[b, mid] <= r:
                    lo = mid
                else:
                    hi = mid - 1
            p = lo
            last_part[b] = p
        out[i] = base[p, b] + (r - first[b, p]) * length[b]
    return out


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
    lengths = _as_lengths(lengths, seq_len // multiple * multiple)
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
    from packcli.plan.grouping import group_slices

    placed = lengths if multiple == 1 else (lengths + multiple - 1) // multiple * multiple
    histograms, orders = [], []
    need_order = not by_bucket or multiple > 1
    for g, members in group_slices(groups):
        own = placed[members]
        if need_order:
            by_length = np.argsort(own, kind="stable")  # input order inside each length
            orders.append(members[by_length])
        histograms.append((g, np.bincount(own, minlength=seq_len + 1)))
    plan = plan_from_counts(
        histograms, seq_len, algorithm, cap=cap, shuffle=shuffle, seed=seed, window=window, grouped=True
    )
    order = np.concatenate(orders) if orders else np.zeros(0, dtype=np.int64)
    if not by_bucket:
        plan.lookup = SlotMap((np.cumsum(lengths) - lengths)[order])
    plan.slot_real = None if multiple == 1 else lengths[order]
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


def slot_map(lengths: np.ndarray, multiple: int, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """The slot map of one group: the spill start of every sequence (starts are the
    running sums of `lengths`), sorted by placed length (`counts`: sequences per placed
    length), in input order inside each length; and beside it the real lengths when
    `multiple` > 1. A counting sort in one pass: nothing but the outputs is allocated."""
    lengths = np.ascontiguousarray(lengths, dtype=np.int64)
    counts = np.ascontiguousarray(counts, dtype=np.int64)
    if len(lengths) and (lengths.min() < 1 or -(-int(lengths.max()) // multiple) * multiple >= len(counts)):
        raise PackcliError(f"lengths must be in [1, {len(counts) - 1}] once placed")
    if int(counts.sum()) != len(lengths):
        raise PackcliError(f"counts hold {int(counts.sum())} sequences, lengths {len(lengths)}")
    starts = np.empty(len(lengths), dtype=np.int64)
    real = np.empty(len(lengths) if multiple > 1 else 0, dtype=np.int64)
    kernel(_slot_map, len(lengths) + len(counts))(lengths, multiple, counts, starts, real)
    return starts, (real if multiple > 1 else None)


@njit(cache=True)
def _placed_counts(lengths, multiple, seq_len):
    counts = np.zeros(seq_len + 1, dtype=np.int64)
    for i in range(lengths.shape[0]):
        counts[(lengths[i] + multiple - 1) // multiple * multiple] += 1
    return counts


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
    plan its `row_group` column (int32 per row)."""
    parts, slot_bases, slot_steps, row_groups = [], [], [], []
    repair = algorithm in PATTERN_ALGORITHMS and cap is None
    first = 0  # sequences of the groups before this one, in the slot map
    for g, counts in histograms:
        counts = np.asarray(counts, dtype=np.int64)
        n = int(counts.sum())
        if n == 0:
            continue
        runs, n_rows = runs_from_counts(counts, seq_len, algorithm, cap or 0)
        pats = patterns_from_runs(runs, n_rows)
        if repair and n_rows > 1:
            pats = repair_patterns(pats, seq_len, n)
        base, step = _slot_ranks(pats)
        slot_bases.append(base + first + _offsets(counts)[pats.slot_len])
        slot_steps.append(step)
        parts.append(pats)
        if grouped:
            row_groups.append(np.full(pats.n_rows, g, dtype=np.int32))
        first += n
    empty = np.zeros(0, dtype=np.int64)
    plan = PatternPlan(
        seq_len=seq_len,
        patterns=_joined(parts),
        slot_base=np.concatenate(slot_bases) if slot_bases else empty,
        slot_step=np.concatenate(slot_steps) if slot_steps else empty,
        lookup=Buckets.from_histograms([counts for _, counts in histograms], seq_len),
        shuffle=shuffle,
        seed=seed,
        window=window,
    )
    if grouped:
        in_plan_order = np.concatenate(row_groups) if row_groups else np.zeros(0, dtype=np.int32)
        plan.row_group = np.empty_like(in_plan_order)
        plan.row_group[plan.output_rows_of(np.arange(plan.n_rows))] = in_plan_order
    return plan


def _slot_ranks(p: Patterns) -> tuple[np.ndarray, np.ndarray]:
    """Per slot: the rank among the slots of its length of its copy in the pattern's first
    row, and the copies of its length in the pattern (the rank's step from row to row)."""
    slot_pattern = p.slot_pattern()
    order = np.lexsort((p.slot_pos, slot_pattern, p.slot_len))  # by length, plan order
    length, pattern = p.slot_len[order], slot_pattern[order]
    new_group = np.concatenate([[True], (length[1:] != length[:-1]) | (pattern[1:] != pattern[:-1])])
    group_id = np.cumsum(new_group) - 1
    group_first = np.flatnonzero(new_group)
    group_size = np.diff(np.append(group_first, len(order)))
    c = np.arange(len(order)) - group_first[group_id]
    copies = group_size[group_id]
    # slots of each (length, pattern) group over the pattern's rows, added up per length
    contribution = group_size * p.repeat[pattern[group_first]]
    group_length = length[group_first]
    new_length = np.concatenate([[True], group_length[1:] != group_length[:-1]])
    cumulative = np.cumsum(contribution) - contribution
    length_first = cumulative[np.flatnonzero(new_length)]
    before = cumulative - length_first[np.cumsum(new_length) - 1]
    base = np.empty(len(order), dtype=np.int64)
    step = np.empty(len(order), dtype=np.int64)
    base[order] = before[group_id] + c
    step[order] = copies
    return base, step


def _joined(parts: list[Patterns]) -> Patterns:
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
