"""Slow, obviously correct reference for packcli.plan.kernels.pack.improve_rows (the repair pass
after a packer), with Python lists and sets. The rules, in the order they apply, are in
packcli/kernels_improve.py's docstring; this follows them without any index or bitset."""

from __future__ import annotations

from collections import Counter


def fewest_rows(lengths, items, capacity):
    """ceil(tokens / capacity), or the sequences longer than half a row, whichever is more."""
    return max(-(-sum(lengths[i] for i in items) // capacity), sum(2 * lengths[i] > capacity for i in items))


def subset_sum(lengths, left, room):
    """The sequences of `left` (longest first, then by index) that join a row with `room`."""
    counts = Counter(lengths[i] for i in left)
    reach, first = {0}, {}
    for length in sorted(counts, reverse=True):
        if room in reach:
            break
        remaining, copies = counts[length], 1
        while remaining > 0 and room not in reach:
            step = min(copies, remaining)
            fresh = {s + step * length for s in reach if s + step * length <= room} - reach
            for s in fresh:
                first[s] = (length, step)
            reach |= fresh
            remaining -= step
            copies *= 2
    total = room if room in reach else max(reach)
    picked = []
    while total > 0:
        length, step = first[total]
        picked += [i for i in left if lengths[i] == length and i not in picked][:step]
        total -= length * step
    return picked


def refill(lengths, items, capacity):
    """The pool's sequences packed again, one row at a time (a list of lists)."""
    left = sorted(items, key=lambda i: (-lengths[i], i))
    rows = []
    while left:
        seed = left.pop(0)
        members = [seed, *subset_sum(lengths, left, capacity - lengths[seed])]
        left = [i for i in left if i not in members]
        rows.append(members)
    return rows


def one_round(lengths, row, gone, capacity, extra):
    """(rows removed, pool rows); rewrites row and gone when rows were removed."""
    live = [r for r in range(len(gone)) if not gone[r]]
    fill, count = Counter(), Counter()
    for i, r in enumerate(row):
        fill[r] += lengths[i]
        count[r] += 1
    with_room = [r for r in live if fill[r] < capacity]
    full = sorted((r for r in live if fill[r] == capacity), key=lambda r: (-count[r], r))[:extra]
    pool = sorted(with_room + full)
    items = [i for i, r in enumerate(row) if r in pool]
    if fewest_rows(lengths, items, capacity) >= len(pool):
        return 0, len(pool)
    rows = refill(lengths, items, capacity)
    if len(rows) >= len(pool):
        return 0, len(pool)
    for k, members in enumerate(rows):
        for i in members:
            row[i] = pool[k]
    for r in pool[len(rows) :]:
        gone[r] = True
    return len(pool) - len(rows), len(pool)


def improve_rows(lengths, row, offset, n_rows, capacity):
    """(row, offset, n_rows) after the repair pass, as lists."""
    lengths, row, offset = list(lengths), list(row), list(offset)
    bound = fewest_rows(lengths, range(len(lengths)), capacity)
    if n_rows <= bound:
        return row, offset, n_rows
    new_row, gone = list(row), [False] * n_rows
    rows_left, extra = n_rows, 0
    while rows_left > bound:
        removed, pool_size = one_round(lengths, new_row, gone, capacity, extra)
        rows_left -= removed
        if pool_size >= rows_left + removed:
            break
        extra = 2 * extra + 16
    if rows_left == n_rows:
        return row, offset, n_rows
    changed = {r for i in range(len(row)) if new_row[i] != row[i] for r in (new_row[i], row[i])}
    new_id = {r: r - sum(gone[:r]) for r in range(n_rows)}
    new_offset = list(offset)
    cursor = dict.fromkeys(changed, 0)
    for i, r in enumerate(new_row):
        if r in changed:
            new_offset[i] = cursor[r]
            cursor[r] += lengths[i]
    return [new_id[r] for r in new_row], new_offset, rows_left
