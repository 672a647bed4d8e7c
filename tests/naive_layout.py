"""Slow, obviously correct references for the row layout kernels in packcli/rows.py."""

from __future__ import annotations

IGNORE = -100


def naive_rows(tokens, labels, starts, lengths, row_of, offset_of, n_rows, seq_len, pad_id) -> dict:
    """Lay pieces out one token at a time; segments are the pieces sorted by offset, then padding."""
    ids = [[pad_id] * seq_len for _ in range(n_rows)]
    labs = [[IGNORE] * seq_len for _ in range(n_rows)]
    pos = [[0] * seq_len for _ in range(n_rows)]
    pieces = [[] for _ in range(n_rows)]
    for start, length, row, offset in zip(starts, lengths, row_of, offset_of):
        pieces[row].append((offset, length))
        for j in range(length):
            token = int(tokens[start + j])
            ids[row][offset + j] = token
            pos[row][offset + j] = j
            if j > 0:
                labs[row][offset + j] = token if labels is None else int(labels[start + j])
    cu, counts = [], []
    for row in range(n_rows):
        bounds = [0]
        for offset, length in sorted(pieces[row]):
            bounds.append(offset + length)
        fill = bounds[-1]
        for j in range(fill, seq_len):
            pos[row][j] = j - fill
        if fill < seq_len:
            bounds.append(seq_len)
        cu.append(bounds)
        counts.append(len(pieces[row]))
    return {"input_ids": ids, "labels": labs, "position_ids": pos, "cu_seqlens": cu, "num_segments": counts}


def naive_cut_pieces(starts, lengths, width, aligned):
    """Walk every token; a new piece begins at the span start and at every cut point."""
    piece_start, piece_len, owner = [], [], []
    for i, (start, length) in enumerate(zip(starts, lengths)):
        for t in range(start, start + length):
            cut = (t % width == 0) if aligned else ((t - start) % width == 0)
            if t == start or cut:
                piece_start.append(t)
                piece_len.append(0)
                owner.append(i)
            piece_len[-1] += 1
    return piece_start, piece_len, owner
