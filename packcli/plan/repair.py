"""The repair pass on a plan from counts: its rows that can change, repacked.

The pass (kernels/improve.py's improve_rows, which also follows the packers that place
lengths one by one) is given the rows with room and the full rows it may pool, expanded
from the patterns; its rows take their places. Its cost stays flat in the number of
sequences (see the limits below). With --group-by each group is repaired on its own and
every group's new rows are put in place in one pass over the plan.
"""

from __future__ import annotations

import numpy as np

from packcli.core.errors import PackcliError
from packcli.core.jit import kernel, njit
from packcli.plan.kernels.pack import IMPROVE_WORK_BASE, IMPROVE_WORK_PER_SEQUENCE, PackedLengths, improve_rows
from packcli.plan.layouts import Patterns, _same_layout, offsets_of, with_used_slots, within

# What the repair pass is given, so that its cost stays flat in the number of sequences:
# the rows with room (at most REPAIR_ROOM_ROWS of them, the emptiest first) and the full
# rows its rounds may pool (0, 16, 48, 112, ... of them, the ones with the most sequences:
# REPAIR_FULL_ROWS covers its first 9 rounds). Below both limits the pass sees every row
# it could change and saves as many rows as on the whole placement.
REPAIR_ROOM_ROWS = 1 << 13
REPAIR_FULL_ROWS = 4096
REPAIR_FULL_SLOTS = 1 << 17  # and no more sequences than this in those full rows


def repair_rows(p: Patterns, capacity: int, n_sequences: int) -> tuple[np.ndarray, Patterns] | None:
    """The repair pass (kernels.improve_rows) on the rows it can change: every row with room
    (the REPAIR_ROOM_ROWS emptiest beyond that many) and the REPAIR_FULL_ROWS full rows
    with the most sequences (ties: the lowest row; no more than REPAIR_FULL_SLOTS
    sequences in them), expanded from the patterns in row order. Returns those rows (in
    order) and the pass's rows (one pattern each, fewer of them), which take their places
    the lowest first, the places left over dropped (replace_rows); None when it saves no
    row. Budget: the one improve_rows gives the whole input."""
    repeat = p.repeat
    sizes = np.diff(p.slot_offsets)
    fill = np.bincount(p.slot_pattern(), weights=p.slot_len, minlength=len(sizes)).astype(np.int64)
    total = int((fill * repeat).sum())
    if p.n_rows <= max(1, -(-total // capacity)):
        return None
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
        return None
    # the chosen rows, in row order: the first chosen_rows[k] rows of pattern chosen_patterns[k]
    row_ids = np.repeat(p.row_start[chosen_patterns], chosen_rows) + within(chosen_rows)
    row_pattern = np.repeat(chosen_patterns, chosen_rows)
    per_row = sizes[row_pattern]
    slot_index = np.repeat(p.slot_offsets[row_pattern], per_row) + within(per_row)
    lengths = p.slot_len[slot_index]
    sub_row = np.repeat(np.arange(len(row_ids), dtype=np.int32), per_row)
    placed = PackedLengths(sub_row, p.slot_pos[slot_index].astype(np.int32), len(row_ids))
    budget = IMPROVE_WORK_PER_SEQUENCE * n_sequences + IMPROVE_WORK_BASE
    repaired = improve_rows(lengths, placed, capacity, budget)
    if repaired.n_rows == len(row_ids):
        return None
    # the repaired rows' layouts, in row order, slots by position
    new_order, new_sizes = by_row_and_offset(repaired.row, repaired.offset, repaired.n_rows)
    repaired_rows = Patterns(
        np.arange(repaired.n_rows + 1, dtype=np.int64),
        offsets_of(new_sizes),
        lengths[new_order].astype(np.int64),
        repaired.offset[new_order].astype(np.int64),
    )
    return row_ids, repaired_rows


def by_row_and_offset(row: np.ndarray, offset: np.ndarray, n_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """The order of the sequences by row, then offset (rows in [0, n_rows), no two
    sequences of a row at one offset), and the sequences of each row: a counting sort on
    the row, the few of each row then sorted by offset (np.lexsort's order, at a fraction
    of its cost)."""
    row = np.ascontiguousarray(row)
    offset = np.ascontiguousarray(offset)
    if row.shape != offset.shape or (len(row) and (row.min() < 0 or row.max() >= n_rows)):
        raise PackcliError(f"a row in [0, {n_rows}) for each of {len(offset)} offsets")
    order, sizes = kernel(_by_row_and_offset, len(row) + n_rows)(row, offset, n_rows)
    return order, sizes


@njit(cache=True)
def _by_row_and_offset(row, offset, n_rows):
    sizes = np.zeros(n_rows, dtype=np.int64)
    for i in range(row.shape[0]):
        sizes[row[i]] += 1
    cursor = np.empty(n_rows, dtype=np.int64)
    at = 0
    for r in range(n_rows):
        cursor[r] = at
        at += sizes[r]
    order = np.empty(row.shape[0], dtype=np.int64)
    for i in range(row.shape[0]):
        order[cursor[row[i]]] = i
        cursor[row[i]] += 1
    begin = 0
    for r in range(n_rows):  # cursor[r] is now the row's end
        for k in range(begin + 1, cursor[r]):  # insertion sort: a row holds few sequences
            i = order[k]
            m = k
            while m > begin and offset[order[m - 1]] > offset[i]:
                order[m] = order[m - 1]
                m -= 1
            order[m] = i
        begin = cursor[r]
    return order, sizes


def replace_rows(
    p: Patterns, row_ids: np.ndarray, new_row: np.ndarray, new: Patterns, part_starts: np.ndarray
) -> Patterns:
    """The plan with row row_ids[k] (increasing) replaced by the row of pattern new_row[k]
    of `new` (one row per pattern), or dropped where new_row[k] is -1; every other row
    kept; rows renumbered without gaps. Consecutive patterns of the same layout are joined,
    except where a row of `part_starts` (a group's first row) begins the later one."""
    row_ids = np.asarray(row_ids, dtype=np.int64)
    new_row = np.asarray(new_row, dtype=np.int64)
    starts_part = np.isin(p.row_start[:-1], np.asarray(part_starts, dtype=np.int64))
    n_patterns = len(p.row_start) - 1
    if row_ids.shape != new_row.shape or (
        len(row_ids)
        and (
            row_ids.min() < 0
            or row_ids.max() >= p.n_rows
            or (np.diff(row_ids) <= 0).any()
            or new_row.min() < -1
            or new_row.max() >= len(new.row_start) - 1
        )
    ):
        raise PackcliError(f"increasing rows in [0, {p.n_rows}), each with a new row or -1")
    if (np.diff(new.row_start) != 1).any():
        raise PackcliError("the new rows must be one pattern each")
    sizes = np.diff(p.slot_offsets)
    # the runs of kept rows in each pattern, each its layout once (before any join): one
    # from the pattern's first row unless it is replaced, one after each replaced row
    # followed by a kept row of the same pattern
    pattern = np.searchsorted(p.row_start, row_ids, side="right") - 1
    then_kept = row_ids + 1 < p.row_start[pattern + 1]
    then_kept[:-1] &= row_ids[1:] != row_ids[:-1] + 1
    runs = np.bincount(pattern[then_kept], minlength=n_patterns) + ~np.isin(p.row_start[:-1], row_ids)
    n_slots = int(sizes @ runs) + int(np.diff(new.slot_offsets)[new_row[new_row >= 0]].sum())
    row_start, slot_offsets, slot_len, slot_pos, used = kernel(_replace_rows, n_slots + n_patterns)(
        p.row_start,
        p.slot_offsets,
        p.slot_len,
        p.slot_pos,
        starts_part,
        row_ids,
        new_row,
        new.slot_offsets,
        new.slot_len,
        new.slot_pos,
        n_patterns + 2 * len(row_ids),
        n_slots,
    )
    return with_used_slots(row_start, slot_offsets, slot_len, slot_pos, used)


@njit(cache=True)
def _replace_rows(
    row_start,
    slot_offsets,
    slot_len,
    slot_pos,
    starts_part,
    row_ids,
    new_row,
    new_offsets,
    new_len,
    new_pos,
    max_patterns,
    max_slots,
):
    """One walk over the patterns: runs of kept rows keep their pattern's layout, a
    replaced row takes its new row's (or is dropped); each layout joins the pattern before
    it when it is the same and no part starts between them."""
    out_start = np.empty(max_patterns + 1, dtype=np.int64)
    out_offsets = np.empty(max_patterns + 1, dtype=np.int64)
    out_len = np.empty(max_slots, dtype=np.int64)
    out_pos = np.empty(max_slots, dtype=np.int64)
    out_offsets[0] = 0
    q = 0  # patterns written
    j = 0  # slots written
    rows = 0  # rows written
    barrier = True  # the next layout may not join the pattern before it
    c = 0  # the next replaced row
    for p in range(row_start.shape[0] - 1):
        if starts_part[p]:
            barrier = True
        r, end = row_start[p], row_start[p + 1]
        while r < end:
            if c < row_ids.shape[0] and row_ids[c] == r:
                k = new_row[c]
                c += 1
                r += 1
                if k < 0:
                    continue
                a, b, repeat = new_offsets[k], new_offsets[k + 1], 1
                source_len, source_pos = new_len, new_pos
            else:
                stop = row_ids[c] if c < row_ids.shape[0] and row_ids[c] < end else end
                a, b, repeat = slot_offsets[p], slot_offsets[p + 1], stop - r
                source_len, source_pos = slot_len, slot_pos
                r = stop
            begin = j
            for s in range(a, b):
                out_len[j] = source_len[s]
                out_pos[j] = source_pos[s]
                j += 1
            if q > 0 and not barrier and _same_layout(out_len, out_pos, out_offsets[q - 1], begin, j):
                j = begin  # more rows of the pattern before it
            else:
                out_start[q] = rows
                q += 1
                out_offsets[q] = j
            rows += repeat
            barrier = False
    out_start[q] = rows
    return out_start[: q + 1].copy(), out_offsets[: q + 1].copy(), out_len, out_pos, j
