"""Slow, obviously correct reference for packcli.kernels.improve_rows (the repair pass
after a packer), with Python lists and full scans. The rules, in the order they apply,
are in packcli/kernels_improve.py's docstring; this follows them without any index."""

from __future__ import annotations

POOL = -1


class _State:
    def __init__(self, lengths, row, n_rows, capacity):
        self.lengths, self.capacity = lengths, capacity
        self.row = list(row)
        self.fill = [0] * n_rows
        for i, r in enumerate(self.row):
            self.fill[r] += lengths[i]
        self.takes_part = [f < capacity for f in self.fill]  # full rows are never touched
        self.gone = [False] * n_rows

    def room(self, r):
        return self.capacity - self.fill[r]

    def rows_with_room(self):
        return [r for r in range(len(self.fill)) if self.takes_part[r] and not self.gone[r] and self.room(r) > 0]

    def members(self, r):
        return [i for i, where in enumerate(self.row) if where == r]

    def move(self, i, target):
        if self.row[i] != POOL:
            self.fill[self.row[i]] -= self.lengths[i]
        if target != POOL:
            self.fill[target] += self.lengths[i]
        self.row[i] = target


def _next_move(s, b):
    """('place', row, -1) or ('swap', row, sequence), or None."""
    fits = [r for r in s.rows_with_room() if s.room(r) >= b]
    if fits:
        return "place", min(fits, key=lambda r: (s.room(r), r)), -1
    swaps = [
        (-(b - s.lengths[j]), s.room(r), r, j)
        for r in s.rows_with_room()
        for j in s.members(r)
        if 0 < b - s.lengths[j] <= s.room(r)
    ]
    if not swaps:
        return None
    _, _, r, j = min(swaps)
    return "swap", r, j


def _dissolve(s, target):
    saved = (list(s.row), list(s.fill))
    s.gone[target] = True
    pool = sorted(s.members(target), key=lambda i: (-s.lengths[i], i))
    for i in pool:
        s.move(i, POOL)
    for current in pool:
        while True:
            move = _next_move(s, s.lengths[current])
            if move is None:
                s.row, s.fill = saved
                s.gone[target] = False
                return False
            _, r, j = move
            if j >= 0:
                s.move(j, POOL)
            s.move(current, r)
            if j < 0:
                break
            current = j
    return True


def _concentrate(s):
    swaps = 0
    for r1 in sorted(s.rows_with_room(), key=lambda r: (s.room(r), r)):
        while s.room(r1) > 0:
            room1 = s.room(r1)
            best = None
            for d in range(room1, 0, -1):
                found = [
                    (x, y)
                    for x in s.members(r1)
                    for y in range(len(s.lengths))
                    if s.lengths[y] == s.lengths[x] + d and s.row[y] not in (POOL, r1) and s.room(s.row[y]) + d > room1
                ]
                if found:
                    best = min(found)
                    break
            if best is None:
                break
            x, y = best
            r2 = s.row[y]
            s.move(x, r2)
            s.move(y, r1)
            swaps += 1
    return swaps


def improve_rows(lengths, row, offset, n_rows, capacity):
    """(row, offset, n_rows) after the repair pass, as lists."""
    lengths, row, offset = list(lengths), list(row), list(offset)
    bound = -(-sum(lengths) // capacity)
    if n_rows <= bound:
        return row, offset, n_rows
    s = _State(lengths, row, n_rows, capacity)
    rows_left = n_rows
    while rows_left > bound:
        candidates = s.rows_with_room()
        if not candidates:
            break
        target = max(candidates, key=lambda r: (s.room(r), r))
        if _dissolve(s, target):
            rows_left -= 1
        elif _concentrate(s) == 0:
            break
    if rows_left == n_rows:
        return row, offset, n_rows
    changed = {r for i in range(len(row)) if s.row[i] != row[i] for r in (s.row[i], row[i])}
    new_id = {r: r - sum(s.gone[:r]) for r in range(n_rows)}
    new_offset = list(offset)
    cursor = dict.fromkeys(changed, 0)
    for i, r in enumerate(s.row):
        if r in changed:
            new_offset[i] = cursor[r]
            cursor[r] += lengths[i]
    return [new_id[r] for r in s.row], new_offset, rows_left
