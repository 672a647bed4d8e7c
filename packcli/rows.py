"""Lay placed sequences out as rows: input_ids, labels, position_ids and cu_seqlens.

Both modes meet here: `bin` places whole sequences (or pieces of split ones) with a
packing kernel, `concat` cuts one token stream at row boundaries; either way each row is
a list of (start in the flat token array, length, row, offset) pieces, and one kernel
writes the columns so the conventions of a row live in one place.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from packcli.errors import PackcliError

IGNORE_INDEX = -100


@dataclass
class Rows:
    """A block of packed rows; cu_seqlens is CSR (values + row offsets) as on disk."""

    input_ids: np.ndarray  # int32 [rows, seq_len]
    labels: np.ndarray  # int32 [rows, seq_len]
    position_ids: np.ndarray  # int32 [rows, seq_len]
    cu_seqlens: np.ndarray  # int32, flat
    cu_offsets: np.ndarray  # int64 [rows + 1]
    num_segments: np.ndarray  # int32 [rows]: real segments, padding excluded

    def __len__(self) -> int:
        return len(self.input_ids)

    @property
    def seq_len(self) -> int:
        return self.input_ids.shape[1]

    def slice(self, start: int, stop: int) -> Rows:
        lo, hi = self.cu_offsets[start], self.cu_offsets[stop]
        return Rows(
            self.input_ids[start:stop],
            self.labels[start:stop],
            self.position_ids[start:stop],
            self.cu_seqlens[lo:hi],
            self.cu_offsets[start : stop + 1] - lo,
            self.num_segments[start:stop],
        )

    def take(self, order: np.ndarray) -> Rows:
        """The rows in the given order (a permutation or any selection)."""
        counts = np.diff(self.cu_offsets)[order]
        offsets = np.zeros(len(order) + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        gather = np.repeat(self.cu_offsets[:-1][order] - offsets[:-1], counts) + np.arange(offsets[-1])
        return Rows(
            self.input_ids[order],
            self.labels[order],
            self.position_ids[order],
            self.cu_seqlens[gather],
            offsets,
            self.num_segments[order],
        )

    @staticmethod
    def concat(blocks: list[Rows]) -> Rows:
        if len(blocks) == 1:
            return blocks[0]
        offsets = [np.zeros(1, dtype=np.int64)]
        base = 0
        for block in blocks:
            offsets.append(block.cu_offsets[1:] + base)
            base += int(block.cu_offsets[-1])
        return Rows(
            np.concatenate([b.input_ids for b in blocks]),
            np.concatenate([b.labels for b in blocks]),
            np.concatenate([b.position_ids for b in blocks]),
            np.concatenate([b.cu_seqlens for b in blocks]),
            np.concatenate(offsets),
            np.concatenate([b.num_segments for b in blocks]),
        )

    def real_lengths(self) -> np.ndarray:
        """Real tokens per row (padding excluded)."""
        ends = self.cu_offsets[1:] - 1
        has_pad = (ends - self.cu_offsets[:-1]) > self.num_segments
        last_real_end = np.where(has_pad, self.cu_seqlens[ends - 1], self.cu_seqlens[ends])
        return last_real_end.astype(np.int64)


@njit(cache=True, nogil=True)
def _pieces_by_row(row_of, offset_of, n_rows):
    """(first, order): the pieces of row r are order[first[r]:first[r + 1]], by offset."""
    first = np.zeros(n_rows + 1, dtype=np.int64)
    for i in range(len(row_of)):
        first[row_of[i] + 1] += 1
    for r in range(n_rows):
        first[r + 1] += first[r]
    order = np.empty(len(row_of), dtype=np.int64)
    cursor = first[:-1].copy()
    for i in range(len(row_of)):
        order[cursor[row_of[i]]] = i
        cursor[row_of[i]] += 1
    for r in range(n_rows):  # insertion sort: a row holds few pieces
        for a in range(first[r] + 1, first[r + 1]):
            piece, b = order[a], a
            while b > first[r] and offset_of[order[b - 1]] > offset_of[piece]:
                order[b] = order[b - 1]
                b -= 1
            order[b] = piece
    return first, order


@njit(cache=True, nogil=True)  # built on a thread while the previous block is written
def _fill_rows(tokens, starts, learned, bit_starts, masked, lengths, row_of, offset_of, n_rows, seq_len, pad_id):
    """Every cell written once, row by row, pieces in offset order (they sit back to back
    from offset 0): a segment starts at each piece and at the padding, if any."""
    first, order = _pieces_by_row(row_of, offset_of, n_rows)
    fill = np.zeros(n_rows, dtype=np.int64)
    cu_offsets = np.zeros(n_rows + 1, dtype=np.int64)
    for r in range(n_rows):
        if first[r + 1] > first[r]:
            last = order[first[r + 1] - 1]
            fill[r] = offset_of[last] + lengths[last]
        cu_offsets[r + 1] = cu_offsets[r] + first[r + 1] - first[r] + (2 if fill[r] < seq_len else 1)
    input_ids = np.empty((n_rows, seq_len), dtype=np.int32)
    out_labels = np.empty((n_rows, seq_len), dtype=np.int32)
    positions = np.empty((n_rows, seq_len), dtype=np.int32)
    cu_seqlens = np.empty(cu_offsets[n_rows], dtype=np.int32)
    num_segments = np.empty(n_rows, dtype=np.int32)
    for r in range(n_rows):
        k = cu_offsets[r]
        for a in range(first[r], first[r + 1]):
            i = order[a]
            o, s, n = offset_of[i], starts[i], lengths[i]
            cu_seqlens[k] = o
            k += 1
            ids, labels, pos = input_ids[r, o : o + n], out_labels[r, o : o + n], positions[r, o : o + n]
            for j in range(n):
                ids[j] = np.int32(tokens[s + j])
                pos[j] = j
            labels[0] = -100
            if masked:
                b = bit_starts[i]
                for j in range(1, n):
                    bit = b + j
                    labels[j] = ids[j] if (learned[bit >> 3] >> (bit & 7)) & 1 else -100
            else:
                labels[1:] = ids[1:]
        f = fill[r]
        if f < seq_len:  # padding is one last segment; its positions restart like any other
            cu_seqlens[k] = f
            k += 1
            input_ids[r, f:] = pad_id
            out_labels[r, f:] = -100
            for j in range(f, seq_len):
                positions[r, j] = j - f
        cu_seqlens[k] = seq_len
        num_segments[r] = first[r + 1] - first[r]
    return input_ids, out_labels, positions, cu_seqlens, cu_offsets, num_segments


def fill_rows(
    tokens, starts, learned, bit_starts, lengths, row_of, offset_of, n_rows: int, seq_len: int, pad_id: int
) -> Rows:
    """Rows from placed pieces of `tokens` (a flat id array of any integer dtype), piece i
    starting at tokens[starts[i]]; `learned` is None when every token is learned, else packed
    bits (little bit order), piece i's first at bit bit_starts[i]."""
    masked = learned is not None
    return Rows(
        *_fill_rows(
            tokens,
            np.asarray(starts, dtype=np.int64),
            learned if masked else np.zeros(1, dtype=np.uint8),
            np.asarray(bit_starts, dtype=np.int64),
            masked,
            np.asarray(lengths, dtype=np.int64),
            np.asarray(row_of, dtype=np.int64),
            np.asarray(offset_of, dtype=np.int64),
            n_rows,
            seq_len,
            pad_id,
        )
    )


def learned_bits(tokens: np.ndarray, labels: np.ndarray, where=lambda i: f"token {i}") -> np.ndarray:
    """Labels as one learned bit per token. A label is its token or -100 (SPEC: labels are
    unshifted), so nothing else is representable; anything else is refused."""
    labels = np.asarray(labels)
    learned = labels != IGNORE_INDEX
    wrong = learned & (labels != tokens)
    if wrong.any():
        i = int(np.argmax(wrong))
        raise PackcliError(
            f"{where(i)}: label {int(labels[i])} is neither its token {int(tokens[i])} nor -100 "
            "(labels are the input ids, unshifted, with -100 where nothing is learned)"
        )
    return learned


def build_rows(tokens, labels, starts, lengths, row_of, offset_of, n_rows: int, seq_len: int, pad_id: int) -> Rows:
    """Rows from placed pieces of `tokens`; `labels` is None for plain text, else a flat array
    aligned with `tokens` (-100 where nothing is learned)."""
    bits = None
    if labels is not None:
        bits = np.packbits(learned_bits(tokens, labels), bitorder="little")
    return fill_rows(tokens, starts, bits, starts, lengths, row_of, offset_of, n_rows, seq_len, pad_id)


@njit(cache=True)
def _cut_pieces(starts, lengths, width, aligned):
    count = 0
    for i in range(len(starts)):
        first = starts[i] // width if aligned else 0
        last = (starts[i] + lengths[i] - 1) // width if aligned else (lengths[i] - 1) // width
        count += last - first + 1
    piece_start = np.empty(count, dtype=np.int64)
    piece_len = np.empty(count, dtype=np.int64)
    piece_owner = np.empty(count, dtype=np.int64)
    k = 0
    for i in range(len(starts)):
        s = starts[i]
        end = s + lengths[i]
        while s < end:
            boundary = (s // width + 1) * width if aligned else s + width
            e = min(end, boundary)
            piece_start[k] = s
            piece_len[k] = e - s
            piece_owner[k] = i
            k += 1
            s = e
    return piece_start, piece_len, piece_owner


def cut_pieces(starts, lengths, width: int, aligned: bool):
    """Split spans [start, start+length) into pieces of at most `width` tokens.

    aligned=False cuts each span every `width` tokens from its own start (an overlong
    sequence split into rows); aligned=True cuts at multiples of `width` in the shared
    coordinate (a token stream cut into rows). Returns (start, length, owner span index).
    """
    return _cut_pieces(np.asarray(starts, dtype=np.int64), np.asarray(lengths, dtype=np.int64), width, aligned)
