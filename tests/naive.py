"""Slow, obviously correct reference packers that the kernels must match exactly.

Each returns (row, offset, n_rows) as Python lists/int. Rows are numbered in the order
they are opened; a sequence goes at the current end of its row. Tie-breaking rules are
the specification the kernels behind packcli/kernels.py implement with fast structures:

- nf:  input order; a new row is opened when the sequence does not fit the current one.
- ff:  input order; the lowest-numbered row with room >= length, else a new row.
- ffd: like ff, but sequences are taken longest first, equal lengths by increasing index.
- bfd: order as ffd; the row with the least room >= length; among rows with equal room,
       the one that received a sequence most recently (LIFO); else a new row.
- spfhp / lpfhp: see histogram_packer below; groups of identical rows, one step at a time.
"""

from __future__ import annotations


def decreasing_order(lengths):
    """Longest first; equal lengths keep input order (a stable sort)."""
    return sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))


def next_fit(lengths, capacity):
    row, offset = [0] * len(lengths), [0] * len(lengths)
    n_rows, fill = 0, capacity
    for i, length in enumerate(lengths):
        if fill + length > capacity:
            n_rows += 1
            fill = 0
        row[i], offset[i] = n_rows - 1, fill
        fill += length
    return row, offset, n_rows


def _first_fit(lengths, capacity, order):
    row, offset = [0] * len(lengths), [0] * len(lengths)
    fills = []
    for i in order:
        target = next((r for r, fill in enumerate(fills) if fill + lengths[i] <= capacity), None)
        if target is None:
            target = len(fills)
            fills.append(0)
        row[i], offset[i] = target, fills[target]
        fills[target] += lengths[i]
    return row, offset, len(fills)


def first_fit(lengths, capacity):
    return _first_fit(lengths, capacity, range(len(lengths)))


def first_fit_decreasing(lengths, capacity):
    return _first_fit(lengths, capacity, decreasing_order(lengths))


def best_fit_decreasing(lengths, capacity):
    row, offset = [0] * len(lengths), [0] * len(lengths)
    fills = []
    last_used = []  # step at which each row last received a sequence
    for step, i in enumerate(decreasing_order(lengths)):
        candidates = [r for r, fill in enumerate(fills) if fill + lengths[i] <= capacity]
        if candidates:
            # least room first, then most recently used first
            target = min(candidates, key=lambda r: (capacity - fills[r], -last_used[r]))
        else:
            target = len(fills)
            fills.append(0)
            last_used.append(step)
        row[i], offset[i] = target, fills[target]
        fills[target] += lengths[i]
        last_used[target] = step
    return row, offset, len(fills)


def histogram_packer(lengths, capacity, longest_first, max_per_row=0):
    """The histogram packers, one group and one copy at a time.

    Lengths are taken longest first. A group is a list of identical rows (lowest first);
    groups wait in one LIFO stack per room. Each step takes, for length L, the group with
    the least room >= L (lpfhp, as many copies per row as fit) or with the most room if L
    fits (spfhp, one copy per row); the lowest rows of the group get the copies, the rest
    stay where they were. If no group fits, new rows are opened with as many copies as fit.
    Then the j-th sequence of length L takes the j-th slot of L: groups by first row, and
    inside a group its rows x copies of L, down the rows first if there are at least as
    many rows as copies, else row by row."""
    counts = [0] * (capacity + 1)
    for length in lengths:
        counts[length] += 1
    shortest = min(lengths, default=capacity)
    stacks = {}  # room -> list of groups; a group: {"rows", "room", "pack"}
    groups, n_rows = [], 0

    def push(group):
        full = max_per_row and len(group["pack"]) >= max_per_row
        if group["room"] >= shortest and not full:
            stacks.setdefault(group["room"], []).append(group)

    for length in range(capacity, 0, -1):
        remaining = counts[length]
        while remaining:
            rooms = [r for r, stack in stacks.items() if stack and r >= length]
            room = (min(rooms) if longest_first else max(r for r, s in stacks.items() if s)) if rooms else None
            if room is not None and room >= length:
                old = stacks[room].pop()
                per_row = min(room // length, remaining) if longest_first else 1
                if max_per_row:
                    per_row = min(per_row, max_per_row - len(old["pack"]))
                taken = min(len(old["rows"]), remaining // per_row)
                new = {
                    "rows": old["rows"][:taken],
                    "room": room - per_row * length,
                    "pack": old["pack"] + [length] * per_row,
                }
                old["rows"] = old["rows"][taken:]
                if old["rows"]:
                    stacks[room].append(old)
                else:
                    groups = [g for g in groups if g is not old]
            else:
                per_row = min(capacity // length, remaining, max_per_row or capacity)
                taken = remaining // per_row
                new = {
                    "rows": list(range(n_rows, n_rows + taken)),
                    "room": capacity - per_row * length,
                    "pack": [length] * per_row,
                }
                n_rows += taken
            remaining -= taken * per_row
            groups.append(new)
            push(new)

    slots = {length: [] for length in range(capacity + 1)}
    for group in sorted(groups, key=lambda g: g["rows"][0]):
        pack, rows = group["pack"], group["rows"]
        for length in dict.fromkeys(pack):  # each length once, in pack order
            first = pack.index(length)
            offset = sum(pack[:first])
            copies = pack.count(length)
            grid = [(row, offset + c * length) for row in rows for c in range(copies)]
            if len(rows) >= copies:
                grid = [(row, offset + c * length) for c in range(copies) for row in rows]
            slots[length] += grid
    taken = dict.fromkeys(range(capacity + 1), 0)
    row, offset = [0] * len(lengths), [0] * len(lengths)
    for i, length in enumerate(lengths):
        row[i], offset[i] = slots[length][taken[length]]
        taken[length] += 1
    return row, offset, n_rows


def spfhp(lengths, capacity):
    return histogram_packer(lengths, capacity, longest_first=False)


def lpfhp(lengths, capacity):
    return histogram_packer(lengths, capacity, longest_first=True)


REFERENCES = {
    "nf": next_fit,
    "ff": first_fit,
    "ffd": first_fit_decreasing,
    "bfd": best_fit_decreasing,
    "spfhp": spfhp,
    "lpfhp": lpfhp,
}
