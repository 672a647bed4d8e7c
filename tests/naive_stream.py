"""Concat mode's rows the obvious way: every segment cut at multiples of seq_len in its
stream's coordinates, one piece at a time, rows permuted by the one-row reference.
packcli/plan/stream.py must give the same pieces."""

from __future__ import annotations

from naive_permute import output_row


def stream_pieces(lengths, seq_len, final=True, remainder="pad"):
    """(segment, stream start, length) of every piece, and the rows kept."""
    pieces, start = [], 0
    for i, n in enumerate(lengths):
        s, end = start, start + n
        while s < end:
            e = min(end, (s // seq_len + 1) * seq_len)
            pieces.append((i, s, e - s))
            s = e
        start = end
    full, rest = divmod(start, seq_len)
    n_rows = full + (1 if final and rest and remainder == "pad" else 0)
    return [p for p in pieces if p[1] < n_rows * seq_len], n_rows


def shuffled(row, window_ends, seed, first_window=0):
    begin = 0
    for window, end in enumerate(window_ends, first_window):
        if begin <= row < end:
            return begin + output_row(row - begin, end - begin, seed, window)
        begin = end
    raise AssertionError(row)


def concat_rows(lengths, seq_len, final=True, remainder="pad", shuffle=False, seed=0, window=0, window_ends=None):
    """Sorted (segment, spill start, length, output row, offset) of one stream, and its rows."""
    pieces, n_rows = stream_pieces(lengths, seq_len, final, remainder)
    ends = [n_rows] if window_ends is None else window_ends
    out = []
    for i, s, n in pieces:
        row = s // seq_len
        out.append((i, s, n, shuffled(row, ends, seed, window) if shuffle else row, s % seq_len))
    return sorted(out), n_rows


def grouped_concat_rows(lengths, groups, seq_len, remainder="pad", shuffle=False, seed=0):
    """Each group its own stream (groups in id order), one shuffle over all rows."""
    spill_start = [sum(lengths[:i]) for i in range(len(lengths))]
    rows_in_plan, base = [], 0
    for group in sorted(set(groups)):
        members = [i for i, g in enumerate(groups) if g == group]
        pieces, n_rows = stream_pieces([lengths[i] for i in members], seq_len, True, remainder)
        own_start = [sum(lengths[m] for m in members[:k]) for k in range(len(members))]
        for k, s, n in pieces:
            i = members[k]
            rows_in_plan.append((i, spill_start[i] + s - own_start[k], n, base + s // seq_len, s % seq_len))
        base += n_rows
    if shuffle:
        rows_in_plan = [(i, s, n, output_row(r, base, seed, 0), o) for i, s, n, r, o in rows_in_plan]
    return sorted(rows_in_plan), base
