"""The slot rule the obvious way: rows in plan order, slots by offset, each slot of placed
length L taking the next sequence of length L (of its group) in input order. The rows'
layouts come from the plan under test; what is checked is which sequence fills which slot
and where the row goes (the one-row shuffle reference)."""

from __future__ import annotations

from naive_permute import output_row


def fill_slots(layouts, row_groups, placed, groups, shuffle=False, seed=0, window=0):
    """layouts: per plan row, its slots [(offset, placed length)] in offset order;
    row_groups: the group of each plan row; placed / groups: per sequence.
    Returns sorted (sequence, output row, offset)."""
    queues = {}
    for i, (length, group) in enumerate(zip(placed, groups)):
        queues.setdefault((group, length), []).append(i)
    taken = dict.fromkeys(queues, 0)
    n_rows = len(layouts)
    out = []
    for r, layout in enumerate(layouts):
        row = output_row(r, n_rows, seed, window) if shuffle else r
        for offset, length in layout:
            key = (row_groups[r], length)
            out.append((queues[key][taken[key]], row, offset))
            taken[key] += 1
    assert all(taken[k] == len(q) for k, q in queues.items())  # every sequence placed once
    return sorted(out)


def slot_map(lengths, multiple, groups=None):
    """Spill starts sorted by (group, placed length), input order inside each; real
    lengths beside."""
    starts = [sum(lengths[:i]) for i in range(len(lengths))]
    placed = [-(-n // multiple) * multiple for n in lengths]
    of = [0] * len(lengths) if groups is None else groups
    order = sorted(range(len(lengths)), key=lambda i: (of[i], placed[i], i))
    return [starts[i] for i in order], [lengths[i] for i in order]


def patterns_of_runs(runs, n_rows, part_starts=()):
    """The rows runs make, one slot at a time: run (length, first_row, step, rows, offset,
    copies) puts `copies` slots of `length` side by side from `offset` in rows first_row,
    first_row + step, ...; each row's slots by offset; a row with the layout of the row
    before it joins its pattern unless a part starts there. (row_start, slot_offsets,
    slot_len, slot_pos) as lists."""
    rows = [[] for _ in range(n_rows)]
    for length, first, step, count, offset, copies in runs:
        for i in range(count):
            for c in range(copies):
                rows[first + i * step].append((offset + c * length, length))
    return patterns_of_rows([sorted(row) for row in rows], [r in part_starts for r in range(n_rows)])


def patterns_of_rows(rows, apart):
    """Rows' layouts [(offset, length)] made patterns: a row with the layout of the row
    before it joins its pattern unless apart[row]. (row_start, slot_offsets, slot_len,
    slot_pos) as lists."""
    starts, layouts_ = [], []
    for r, layout in enumerate(rows):
        if not layouts_ or layout != layouts_[-1] or apart[r]:
            starts.append(r)
            layouts_.append(layout)
    n_rows = len(rows)
    slot_offsets = [0]
    for layout in layouts_:
        slot_offsets.append(slot_offsets[-1] + len(layout))
    slot_len = [n for layout in layouts_ for _, n in layout]
    slot_pos = [o for layout in layouts_ for o, _ in layout]
    return [*starts, n_rows], slot_offsets, slot_len, slot_pos


def slot_ranks(row_start, slot_offsets, slot_len, part, first_rank):
    """(base, step) of every pattern slot, walking every row in plan order and its slots in
    order, counting the slots of each (part, length) from first_rank[(part, length)]: a
    slot's base is the count it meets in its pattern's first row, its step the copies of
    its length in the pattern."""
    taken, base, step = {}, [None] * len(slot_len), [None] * len(slot_len)
    for p in range(len(row_start) - 1):
        own = slot_len[slot_offsets[p] : slot_offsets[p + 1]]
        for r in range(row_start[p], row_start[p + 1]):
            for s in range(slot_offsets[p], slot_offsets[p + 1]):
                key = (part[p], slot_len[s])
                taken.setdefault(key, first_rank[key])
                if r == row_start[p]:
                    base[s], step[s] = taken[key], own.count(slot_len[s])
                taken[key] = taken.get(key, 0) + 1
    return base, step


def sorted_spill(tokens, lengths, multiple, groups=None, learned=None):
    """The spill sorted by (group, placed length), input order inside each, every sequence
    in a record of its placed length (its tokens, then zeros): the file's tokens, its
    learned flags (0/1 per token, zeros in the padding) and each rank's start."""
    starts = [sum(lengths[:i]) for i in range(len(lengths))]
    placed = [-(-n // multiple) * multiple for n in lengths]
    of = [0] * len(lengths) if groups is None else groups
    order = sorted(range(len(lengths)), key=lambda i: (of[i], placed[i], i))
    out, flags, where = [], [], []
    for i in order:
        where.append(len(out))
        s, n = starts[i], lengths[i]
        out += list(tokens[s : s + n]) + [0] * (placed[i] - n)
        if learned is not None:
            flags += [int(f) for f in learned[s : s + n]] + [0] * (placed[i] - n)
    return out, flags, where


def expand_rows(plan_rows, row_start, slot_offsets, slot_base, slot_step):
    """Every slot of these plan rows, row by row: (pattern slot, rank, index of its row)."""
    out = []
    for k, r in enumerate(plan_rows):
        p = max(q for q in range(len(row_start) - 1) if row_start[q] <= r)
        for s in range(slot_offsets[p], slot_offsets[p + 1]):
            out.append((s, slot_base[s] + (r - row_start[p]) * slot_step[s], k))
    return out


def part_position(counts, base, lengths, bucket, local):
    """Where rank `local` of `bucket` lies when part p holds counts[p][bucket] of the
    bucket's sequences in order, from base[p][bucket], in records of lengths[bucket]."""
    for p, own in enumerate(counts):
        if local < own[bucket]:
            return base[p][bucket] + local * lengths[bucket]
        local -= own[bucket]
    raise AssertionError("rank past the bucket's end")


def runs_in_order(starts, lengths, gap):
    """(start, end) of each range and each piece's range: a piece joins the range before
    it when it starts at most `gap` after that range's end (and not before it)."""
    ranges, group = [], []
    for s, n in zip(starts, lengths):
        if ranges and 0 <= s - ranges[-1][1] <= gap:
            ranges[-1][1] = s + n
        else:
            ranges.append([s, s + n])
        group.append(len(ranges) - 1)
    return [tuple(r) for r in ranges], group


def layouts(p) -> list[list[tuple[int, int]]]:
    """Every plan row's slots [(offset, placed length)], expanded from the patterns."""
    rows = []
    for k in range(len(p.row_start) - 1):
        a, b = int(p.slot_offsets[k]), int(p.slot_offsets[k + 1])
        layout = list(zip(p.slot_pos[a:b].tolist(), p.slot_len[a:b].tolist()))
        rows += [layout] * int(p.row_start[k + 1] - p.row_start[k])
    return rows


def run_table(run_begin, run_end, runs, first_row):
    """Each length's runs (first_row, step, rows, offset, copies), lengths in order, as
    [length, first_row + the rows before, step, rows, offset, copies]."""
    table = []
    for length, (begin, end) in enumerate(zip(run_begin, run_end)):
        for r in range(begin, end):
            first, step, rows, offset, copies = runs[r]
            table.append([length, first + first_row, step, rows, offset, copies])
    return table


def replace_rows(rows, row_ids, new_row, new_rows, part_starts):
    """Rows' layouts with row row_ids[k] replaced by new_rows[new_row[k]] (dropped for -1),
    made patterns: no pattern joins across a row of part_starts (the first row kept at or
    after it begins a pattern)."""
    out, apart, barrier = [], [], False
    replaced = dict(zip(row_ids, new_row))
    for r, layout in enumerate(rows):
        barrier = barrier or r in part_starts
        if r in replaced:
            if replaced[r] < 0:
                continue
            layout = new_rows[replaced[r]]
        out.append(layout)
        apart.append(barrier)
        barrier = False
    return patterns_of_rows(out, apart)


def by_row_and_offset(row, offset, n_rows):
    """Sequence indices sorted by (row, offset), and the sequences of each row."""
    order = sorted(range(len(row)), key=lambda i: (row[i], offset[i]))
    return order, [list(row).count(r) for r in range(n_rows)]


def same_layout(slot_len, slot_pos, prev, begin, end):
    """Whether the (length, position) slots begin..end - 1 are the ones prev..begin - 1."""
    pairs = list(zip(slot_len, slot_pos))
    return pairs[prev:begin] == pairs[begin:end]
