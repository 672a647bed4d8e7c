"""Row repair after a packer: dissolve the emptiest rows into the room the others leave.

``_improve_kernel(lengths, capacity, row, offset, n_rows, budget) -> n_rows`` rewrites
``row`` and ``offset`` in place and trusts its input (``packcli.kernels.improve_rows``
validates). The rules below are the specification; ``tests/naive_improve.py`` follows
them with Python lists and the tests require identical output (with no budget limit).

A packer such as bfd leaves a few tokens of room in many rows; together they can hold
whole rows. Only rows with room at the start take part (full rows are never touched).
While there are more rows than ceil(tokens / capacity):

1. Dissolve: the target is the row with the most room (ties: the highest row). Its
   sequences leave it for a pool, longest first (ties: lowest index). Each pooled
   sequence, of length b, is *placed* in the row with the least room >= b (ties: lowest
   row); if none has room, it is *swapped*: it takes the place of a sequence of length
   a < b in a row with room >= b - a, the largest b - a first (then least room, lowest
   row, lowest index), and that sequence is pooled in its place, shorter, so a chain of
   swaps ends. An empty pool removes the target row; if a sequence can neither be
   placed nor swapped, every move of this target is undone.
2. Concentrate (after a failed dissolve): rows with room, least room first (ties: lowest
   row), each swap a sequence x of theirs for a longer y = x + d (d <= their room) from
   another row whose room plus d exceeds their own room, while one exists: the largest
   d, then the lowest x, then the lowest y. The sum of
   squared rooms grows with every such swap, so room gathers in fewer rows and the
   sweep ends. Then step 1 again; a sweep without a swap ends the pass.

If no row was removed, the packer's rows are returned unchanged. Otherwise the rows left
are renumbered in order (no gaps); a row whose sequences did not change keeps its
layout, a changed row is laid out in input order from offset 0.

``budget`` bounds the work (sequences and rows looked at, plus moves): when it runs out
the current dissolve is undone and the pass stops, so the result depends on the budget
but is always valid and deterministic.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from packcli.kernels_bitset import _bitset_add, _bitset_new, _bitset_next, _bitset_prev, _bitset_remove

_POOL = -1  # the row of a sequence waiting in the pool


@njit(cache=True)
def _room_remove(r, room, head, row_next, row_prev, words, level_starts):
    """Take row r out of the stack of rows with `room` left."""
    after, before = row_next[r], row_prev[r]
    if before >= 0:
        row_next[before] = after
    else:
        head[room] = after
        if after < 0:
            _bitset_remove(words, level_starts, room)
    if after >= 0:
        row_prev[after] = before


@njit(cache=True)
def _room_add(r, room, head, row_next, row_prev, words, level_starts):
    first = head[room]
    if first < 0:
        _bitset_add(words, level_starts, room)
    else:
        row_prev[first] = r
    row_next[r] = first
    row_prev[r] = -1
    head[room] = r


@njit(cache=True)
def _by_length_link(i, length, in_room):
    """Insert sequence i in the list of its length, which is kept in index order."""
    head, after, before = in_room
    previous, current = -1, head[length]
    while current >= 0 and current < i:
        previous, current = current, after[current]
    after[i], before[i] = current, previous
    if current >= 0:
        before[current] = i
    if previous >= 0:
        after[previous] = i
    else:
        head[length] = i


@njit(cache=True)
def _by_length_unlink(i, length, in_room):
    head, after, before = in_room
    if before[i] >= 0:
        after[before[i]] = after[i]
    else:
        head[length] = after[i]
    if after[i] >= 0:
        before[after[i]] = before[i]


@njit(cache=True)
def _count_row(r, joins, lengths, item_head, item_next, in_room):
    """Row r's sequences join (or leave) the by-length lists of sequences in rows with room."""
    j = item_head[r]
    while j >= 0:
        if joins:
            _by_length_link(j, lengths[j], in_room)
        else:
            _by_length_unlink(j, lengths[j], in_room)
        j = item_next[j]


@njit(cache=True)
def _move(i, source, target, lengths, capacity, row, fill, live, item_head, item_next, item_prev, rooms, in_room):
    """Sequence i from row `source` to row `target` (either may be the pool), keeping the
    per-row lists of sequences, the room stacks of live rows and `in_room` (the sequences
    of each length that sit in rows with room) up to date."""
    head, row_next, row_prev, words, level_starts = rooms
    length = lengths[i]
    if source != _POOL:
        had_room = fill[source] < capacity
        if live[source] and had_room:
            _room_remove(source, capacity - fill[source], head, row_next, row_prev, words, level_starts)
        after, before = item_next[i], item_prev[i]
        if before >= 0:
            item_next[before] = after
        else:
            item_head[source] = after
        if after >= 0:
            item_prev[after] = before
        fill[source] -= length
        if had_room:
            _by_length_unlink(i, length, in_room)
        else:
            _count_row(source, True, lengths, item_head, item_next, in_room)
        if live[source]:
            _room_add(source, capacity - fill[source], head, row_next, row_prev, words, level_starts)
    if target != _POOL:
        if live[target]:
            _room_remove(target, capacity - fill[target], head, row_next, row_prev, words, level_starts)
        first = item_head[target]
        if first >= 0:
            item_prev[first] = i
        item_next[i] = first
        item_prev[i] = -1
        item_head[target] = i
        fill[target] += length
        _by_length_link(i, length, in_room)
        if fill[target] == capacity:
            _count_row(target, False, lengths, item_head, item_next, in_room)
        elif live[target]:
            _room_add(target, capacity - fill[target], head, row_next, row_prev, words, level_starts)
    row[i] = target


@njit(cache=True)
def _best_placement(b, rooms):
    """(row, work) of the row with the least room >= b, lowest row on ties; row -1 if none."""
    head, row_next, _, words, level_starts = rooms
    room = _bitset_next(words, level_starts, b)
    if room < 0:
        return -1, 0
    best, work = -1, 0
    r = head[room]
    while r >= 0:
        work += 1
        if best < 0 or r < best:
            best = r
        r = row_next[r]
    return best, work


@njit(cache=True)
def _best_swap(b, capacity, lengths, row, fill, in_room, rooms):
    """(row, sequence, work) of the best swap for a pooled sequence of length b, or row -1:
    gains from the largest down, each looked up in the by-length lists."""
    _, _, _, words, level_starts = rooms
    top = _bitset_prev(words, level_starts, capacity)
    work = 0
    for gain in range(min(b - 1, top), 0, -1):
        best_row, best_item, best_room = -1, -1, -1
        j = in_room[0][b - gain]
        while j >= 0:
            work += 1
            r = row[j]
            room = capacity - fill[r]
            if room >= gain and (
                best_row < 0
                or room < best_room
                or (room == best_room and (r < best_row or (r == best_row and j < best_item)))
            ):
                best_row, best_item, best_room = r, j, room
            j = in_room[1][j]
        if best_row >= 0:
            return best_row, best_item, work
    return -1, -1, work


@njit(cache=True)
def _target_row(rooms, capacity):
    """The row with the most room, highest row on ties, or -1."""
    head, row_next, _, words, level_starts = rooms
    room = _bitset_prev(words, level_starts, capacity)
    if room < 1:
        return -1
    best = -1
    r = head[room]
    while r >= 0:
        best = max(best, r)
        r = row_next[r]
    return best


@njit(cache=True)
def _logged(log, n_log, i, source, target):
    """Append a move to the undo log, growing it when full."""
    if n_log == log.shape[0]:
        grown = np.empty((2 * log.shape[0], 3), dtype=np.int64)
        grown[:n_log] = log
        log = grown
    log[n_log, 0] = i
    log[n_log, 1] = source
    log[n_log, 2] = target
    return log, n_log + 1


@njit(cache=True)
def _dissolve(
    target, lengths, capacity, row, fill, live, item_head, item_next, item_prev, rooms, in_room, work, budget
):
    """Steps 1-3 for one target row. Returns (dissolved, work)."""
    head, row_next, row_prev, words, level_starts = rooms
    _room_remove(target, capacity - fill[target], head, row_next, row_prev, words, level_starts)
    live[target] = False
    count = 0
    j = item_head[target]
    while j >= 0:
        count += 1
        j = item_next[j]
    pool = np.empty(count, dtype=np.int64)
    j, k = item_head[target], 0
    while j >= 0:
        pool[k] = (capacity - lengths[j]) * lengths.shape[0] + j  # longest first, then index
        k += 1
        j = item_next[j]
    pool.sort()
    log, n_log = np.empty((max(16, 2 * count), 3), dtype=np.int64), 0
    state = (lengths, capacity, row, fill, live, item_head, item_next, item_prev, rooms, in_room)
    for k in range(count):
        j = pool[k] % lengths.shape[0]
        _move(j, target, _POOL, *state)
        log, n_log = _logged(log, n_log, j, target, _POOL)
    ok = True
    for k in range(count):
        current = pool[k] % lengths.shape[0]
        while True:
            b = lengths[current]
            r, seen = _best_placement(b, rooms)
            work += seen
            j = -1
            if r < 0:
                r, j, seen = _best_swap(b, capacity, lengths, row, fill, in_room, rooms)
                work += seen
            if r < 0 or work >= budget:
                ok = False
                break
            work += 1
            if j >= 0:
                _move(j, r, _POOL, *state)
                log, n_log = _logged(log, n_log, j, r, _POOL)
            _move(current, _POOL, r, *state)
            log, n_log = _logged(log, n_log, current, _POOL, r)
            if j < 0:
                break
            current = j
        if not ok:
            break
    if not ok:
        for e in range(n_log - 1, -1, -1):
            _move(log[e, 0], log[e, 2], log[e, 1], *state)
        live[target] = True
        _room_add(target, capacity - fill[target], head, row_next, row_prev, words, level_starts)
    return ok, work


@njit(cache=True)
def _relayout(lengths, row, offset, before, dissolved, n_rows):
    """Rows renumbered without the dissolved ones; changed rows laid out in input order."""
    changed = np.zeros(n_rows, dtype=np.bool_)
    for i in range(lengths.shape[0]):
        if row[i] != before[i]:
            changed[row[i]] = True
            changed[before[i]] = True
    new_id = np.empty(n_rows, dtype=np.int64)
    gone = 0
    for r in range(n_rows):
        new_id[r] = r - gone
        if dissolved[r]:
            gone += 1
    cursor = np.zeros(n_rows, dtype=np.int64)
    for i in range(lengths.shape[0]):
        r = row[i]
        if changed[r]:
            offset[i] = cursor[r]
            cursor[r] += lengths[i]
        row[i] = new_id[r]
    return n_rows - gone


@njit(cache=True)
def _best_transfer(r1, room1, lengths, capacity, row, fill, item_head, item_next, in_room, rooms):
    """(x, y, work): the swap that moves the most room, d <= room1, out of row r1 into a row
    that then has more room than r1 had: x (in r1) for y (elsewhere), lengths[y] =
    lengths[x] + d; ties: the lowest x, then the lowest y. The sum of squared rooms grows
    with every such swap, so they end. The by-length lists are in index order, so the
    first y that qualifies is the lowest."""
    head, row_next, _, words, level_starts = rooms
    other = _bitset_prev(words, level_starts, capacity)  # the most room in a row besides r1
    if other == room1 and head[other] == r1 and row_next[r1] < 0:
        other = _bitset_prev(words, level_starts, room1 - 1)
    work = 0
    for d in range(room1, max(0, room1 - other), -1):  # d > room1 - room2 for some row
        best_x, best_y = -1, -1
        x = item_head[r1]
        while x >= 0:
            v = lengths[x] + d
            work += 1
            if (best_x < 0 or x < best_x) and v <= capacity:
                y = in_room[0][v]
                while y >= 0:
                    work += 1
                    r2 = row[y]
                    if r2 != r1 and capacity - fill[r2] + d > room1:
                        best_x, best_y = x, y
                        break
                    y = in_room[1][y]
            x = item_next[x]
        if best_x >= 0:
            return best_x, best_y, work
    return -1, -1, work


@njit(cache=True)
def _concentrate(lengths, capacity, row, fill, live, item_head, item_next, item_prev, rooms, in_room, work, budget):
    """Step 4: room moved from rows with little into rows with as much or more, by swaps.
    Returns (swaps, work)."""
    order = np.empty(fill.shape[0], dtype=np.int64)
    count = 0
    for r in range(fill.shape[0]):
        if live[r] and fill[r] < capacity:
            order[count] = (capacity - fill[r]) * fill.shape[0] + r
            count += 1
    order = np.sort(order[:count])
    state = (lengths, capacity, row, fill, live, item_head, item_next, item_prev, rooms, in_room)
    swaps = 0
    for k in range(count):
        r1 = order[k] % fill.shape[0]
        while fill[r1] < capacity:
            x, y, seen = _best_transfer(
                r1, capacity - fill[r1], lengths, capacity, row, fill, item_head, item_next, in_room, rooms
            )
            work += seen
            if x < 0 or work > budget:
                break
            r2 = row[y]
            _move(x, r1, _POOL, *state)
            _move(y, r2, r1, *state)
            _move(x, _POOL, r2, *state)
            swaps += 1
        if work > budget:
            break
    return swaps, work


@njit(cache=True)
def _improve_kernel(lengths, capacity, row, offset, n_rows, budget):
    n = lengths.shape[0]
    fill = np.zeros(n_rows, dtype=np.int64)
    total = 0
    for i in range(n):
        fill[row[i]] += lengths[i]
        total += lengths[i]
    bound = (total + capacity - 1) // capacity
    if n_rows <= bound:
        return n_rows
    live = fill < capacity  # only rows with room take part; full rows are never touched
    item_head = np.full(n_rows, -1, dtype=np.int64)
    item_next = np.full(n, -1, dtype=np.int64)
    item_prev = np.full(n, -1, dtype=np.int64)
    for i in range(n - 1, -1, -1):
        r = row[i]
        if live[r]:
            first = item_head[r]
            if first >= 0:
                item_prev[first] = i
            item_next[i] = first
            item_head[r] = i
    head = np.full(capacity + 1, -1, dtype=np.int64)
    row_next = np.full(n_rows, -1, dtype=np.int64)
    row_prev = np.full(n_rows, -1, dtype=np.int64)
    words, level_starts = _bitset_new(capacity + 1)
    for r in range(n_rows):
        if live[r]:
            _room_add(r, capacity - fill[r], head, row_next, row_prev, words, level_starts)
    rooms = (head, row_next, row_prev, words, level_starts)
    in_room = (
        np.full(capacity + 1, -1, dtype=np.int64),
        np.full(n, -1, dtype=np.int64),
        np.full(n, -1, dtype=np.int64),
    )
    for i in range(n - 1, -1, -1):
        if live[row[i]]:
            _by_length_link(i, lengths[i], in_room)
    before = row.copy()
    dissolved = np.zeros(n_rows, dtype=np.bool_)
    rows_left, work = n_rows, 0
    while rows_left > bound:
        target = _target_row(rooms, capacity)
        if target < 0:
            break
        ok, work = _dissolve(
            target, lengths, capacity, row, fill, live, item_head, item_next, item_prev, rooms, in_room, work, budget
        )
        if ok:
            dissolved[target] = True
            rows_left -= 1
            continue
        if work >= budget:
            break
        swaps, work = _concentrate(
            lengths, capacity, row, fill, live, item_head, item_next, item_prev, rooms, in_room, work, budget
        )
        if swaps == 0 or work > budget:
            break
    if rows_left == n_rows:  # nothing gained: the packer's rows stand as they were
        row[:] = before
        return n_rows
    return _relayout(lengths, row, offset, before, dissolved, n_rows)
