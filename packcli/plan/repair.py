"""The repair pass on a plan from counts: its rows that can change, repacked.

The pass (kernels/improve.py's improve_rows, which also follows the packers that place
lengths one by one) is given the rows with room and the full rows it may pool, expanded
from the patterns; its rows take their places. Its cost stays flat in the number of
sequences (see the limits below).
"""

from __future__ import annotations

import numpy as np

from packcli.plan.kernels.pack import IMPROVE_WORK_BASE, IMPROVE_WORK_PER_SEQUENCE, PackedLengths, improve_rows
from packcli.plan.layouts import Patterns, merged, offsets_of, within

# What the repair pass is given, so that its cost stays flat in the number of sequences:
# the rows with room (at most REPAIR_ROOM_ROWS of them, the emptiest first) and the full
# rows its rounds may pool (0, 16, 48, 112, ... of them, the ones with the most sequences:
# REPAIR_FULL_ROWS covers its first 9 rounds). Below both limits the pass sees every row
# it could change and saves as many rows as on the whole placement.
REPAIR_ROOM_ROWS = 1 << 13
REPAIR_FULL_ROWS = 4096
REPAIR_FULL_SLOTS = 1 << 17  # and no more sequences than this in those full rows


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
        offsets_of(new_sizes),
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
    return merged(Patterns(offsets_of(repeat), offsets_of(sizes), slot_len, slot_pos))
