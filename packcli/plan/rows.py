"""Lay placed sequences out as rows: input_ids, labels, position_ids and cu_seqlens.

Both modes meet here: `bin` places whole sequences (or pieces of split ones) with a
packing kernel, `concat` cuts one token stream at row boundaries; either way each row is
a list of (start in the flat token array, length, row, offset) pieces, and one kernel
writes the columns so the conventions of a row live in one place.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from packcli.core.errors import PackcliError
from packcli.core.jit import kernel, njit

IGNORE_INDEX = -100


@dataclass
class Rows:
    """A block of packed rows; cu_seqlens is CSR (values + row offsets) as on disk.

    `max_seqlen` is the longest segment of each row's cu_seqlens (padding included);
    computed from cu_seqlens when not given (outputs of format 2 and before).
    `cu_seqlens_unpadded` (with --pad-to-multiple-of) has the entries of cu_seqlens, at the
    offsets of cu_offsets, counting only real tokens; the row's final padding segment
    counts as its own length, so the last entry is the padded tail after the real tokens.
    `segment_columns` (e.g. `segment_source`): per-segment values, each a flat array with
    one entry per real segment (padding excluded), rows in order and each row's segments
    in order: row r's entries are [seg_offsets[r], seg_offsets[r + 1])."""

    input_ids: np.ndarray  # int32 [rows, seq_len]
    labels: np.ndarray  # int32 [rows, seq_len]
    position_ids: np.ndarray  # int32 [rows, seq_len]
    cu_seqlens: np.ndarray  # int32, flat
    cu_offsets: np.ndarray  # int64 [rows + 1]
    num_segments: np.ndarray  # int32 [rows]: real segments, padding excluded
    max_seqlen: np.ndarray | None = None  # int32 [rows]
    cu_seqlens_unpadded: np.ndarray | None = None  # int32, flat, CSR with cu_offsets
    segment_columns: dict[str, np.ndarray] = field(default_factory=dict)  # flat, CSR with seg_offsets

    def __post_init__(self) -> None:
        if self.max_seqlen is None:
            self.max_seqlen = longest_segments(self.cu_seqlens, self.cu_offsets)

    def __len__(self) -> int:
        return len(self.input_ids)

    @property
    def seq_len(self) -> int:
        return self.input_ids.shape[1]

    @property
    def seg_offsets(self) -> np.ndarray:
        """int64 [rows + 1]: where each row's entries of the segment columns begin
        (cumulative num_segments, from 0)."""
        return segment_offsets(self.num_segments)

    def _unpadded(self, pick) -> np.ndarray | None:
        return None if self.cu_seqlens_unpadded is None else self.cu_seqlens_unpadded[pick]

    def _segments(self, pick) -> dict[str, np.ndarray]:
        return {name: values[pick] for name, values in self.segment_columns.items()}

    def slice(self, start: int, stop: int) -> Rows:
        lo, hi = self.cu_offsets[start], self.cu_offsets[stop]
        assert self.max_seqlen is not None  # filled by __post_init__
        return Rows(
            self.input_ids[start:stop],
            self.labels[start:stop],
            self.position_ids[start:stop],
            self.cu_seqlens[lo:hi],
            self.cu_offsets[start : stop + 1] - lo,
            self.num_segments[start:stop],
            self.max_seqlen[start:stop],
            self._unpadded(slice(lo, hi)),
            self._segments(slice(*self.seg_offsets[[start, stop]].tolist())) if self.segment_columns else {},
        )

    def take(self, order: np.ndarray) -> Rows:
        """The rows in the given order (a permutation or any selection)."""
        counts = np.diff(self.cu_offsets)[order]
        offsets = np.zeros(len(order) + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        gather = np.repeat(self.cu_offsets[:-1][order] - offsets[:-1], counts) + np.arange(offsets[-1])
        assert self.max_seqlen is not None  # filled by __post_init__
        segments = {}
        if self.segment_columns:
            seg = self.seg_offsets
            taken = self.num_segments[order].astype(np.int64)
            firsts = np.cumsum(taken) - taken
            segments = self._segments(np.repeat(seg[:-1][order] - firsts, taken) + np.arange(int(taken.sum())))
        return Rows(
            self.input_ids[order],
            self.labels[order],
            self.position_ids[order],
            self.cu_seqlens[gather],
            offsets,
            self.num_segments[order],
            self.max_seqlen[order],
            self._unpadded(gather),
            segments,
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
        unpadded = [b.cu_seqlens_unpadded for b in blocks]
        names = list(blocks[0].segment_columns)
        if any(list(b.segment_columns) != names for b in blocks):
            raise PackcliError("internal: blocks of rows with different segment columns joined")
        return Rows(
            np.concatenate([b.input_ids for b in blocks]),
            np.concatenate([b.labels for b in blocks]),
            np.concatenate([b.position_ids for b in blocks]),
            np.concatenate([b.cu_seqlens for b in blocks]),
            np.concatenate(offsets),
            np.concatenate([b.num_segments for b in blocks]),
            np.concatenate([b.max_seqlen for b in blocks]),
            np.concatenate([u for u in unpadded if u is not None]) if all(u is not None for u in unpadded) else None,
            {name: np.concatenate([b.segment_columns[name] for b in blocks]) for name in names},
        )

    def real_lengths(self) -> np.ndarray:
        """Real tokens per row (padding excluded)."""
        ends = self.cu_offsets[1:] - 1
        has_pad = (ends - self.cu_offsets[:-1]) > self.num_segments
        cu = self.cu_seqlens if self.cu_seqlens_unpadded is None else self.cu_seqlens_unpadded
        last_real_end = np.where(has_pad, cu[ends - 1], cu[ends])
        return last_real_end.astype(np.int64)


def segment_offsets(num_segments: np.ndarray) -> np.ndarray:
    """int64 [rows + 1]: the cumulative real segments of each row, from 0 (the CSR offsets
    of the per-segment columns)."""
    offsets = np.zeros(len(num_segments) + 1, dtype=np.int64)
    np.cumsum(num_segments, out=offsets[1:])
    return offsets


def longest_segments(cu_seqlens: np.ndarray, cu_offsets: np.ndarray) -> np.ndarray:
    """The longest segment of every row's cu_seqlens (CSR), as int32."""
    n = len(cu_offsets) - 1
    if n <= 0:
        return np.zeros(0, dtype=np.int32)
    values = np.asarray(cu_seqlens, dtype=np.int64)[int(cu_offsets[0]) : int(cu_offsets[-1])]
    widths = np.diff(values)
    offsets = np.asarray(cu_offsets, dtype=np.int64) - int(cu_offsets[0])
    widths[offsets[1:-1] - 1] = 0  # a difference across two rows is no segment
    return np.maximum.reduceat(widths, offsets[:-1]).astype(np.int32)


def segment_table(cu_offsets: np.ndarray, num_segments: np.ndarray) -> tuple[np.ndarray, ...]:
    """Over a block's flat cu_seqlens: the row of each entry and its index k in the row,
    then the entries that start a segment (all but each row's last) and whether each of
    those is a real segment (k < num_segments) rather than the padding segment."""
    offsets = np.asarray(cu_offsets, dtype=np.int64) - int(cu_offsets[0])
    entries = np.diff(offsets)
    entry_row = np.repeat(np.arange(len(entries)), entries)
    k = np.arange(int(offsets[-1])) - offsets[entry_row]
    segment = np.flatnonzero(k < entries[entry_row] - 1)
    is_real = k[segment] < np.asarray(num_segments)[entry_row[segment]]
    return entry_row, k, segment, is_real


def real_token_mask(rows: Rows) -> np.ndarray:
    """bool [rows, seq_len]: True on real tokens, False on the padding segment and on the
    pads after each segment (--pad-to-multiple-of)."""
    n = len(rows)
    cu = np.asarray(rows.cu_seqlens, dtype=np.int64)
    unpadded = cu if rows.cu_seqlens_unpadded is None else np.asarray(rows.cu_seqlens_unpadded, dtype=np.int64)
    _, _, segment, is_real = segment_table(rows.cu_offsets, rows.num_segments)
    real = np.where(is_real, unpadded[segment + 1] - unpadded[segment], 0)
    per_token = np.repeat(real, cu[segment + 1] - cu[segment]).reshape(n, rows.seq_len)
    mask: np.ndarray = np.asarray(rows.position_ids) < per_token
    return mask


@njit(cache=True, nogil=True, inline="always")
def _lay_piece(
    i,
    o,
    input_ids,
    out_labels,
    positions,
    real_at,
    tokens,
    starts,
    learned,
    bit_starts,
    masked,
    lengths,
    row_of,
    pad_id,
    multiple,
    overwrite,
):
    """Piece i from offset o of its row: its tokens, positions from 0, labels, and its pads
    to a multiple of `multiple`. The -100 labels (its first token, tokens `learned` has no
    bit for) and the pads' ids and labels are written only with `overwrite`: arrays made
    for the rows hold pad_id and -100 already. Returns its room."""
    r, s, b, n = row_of[i], starts[i], bit_starts[i], lengths[i]
    for j in range(n):
        t = np.int32(tokens[s + j])
        input_ids[r, o + j] = t
        positions[r, o + j] = j
        k = b + j
        if j > 0 and (not masked or (learned[k >> 3] >> (k & 7)) & 1):
            out_labels[r, o + j] = t
        elif overwrite:
            out_labels[r, o + j] = -100
    end = n
    if multiple > 1:
        end = (n + multiple - 1) // multiple * multiple
        for j in range(n, end):
            if overwrite:
                input_ids[r, o + j] = pad_id
                out_labels[r, o + j] = -100
            positions[r, o + j] = j
        real_at[r, o] = n
    return end


@njit(cache=True, nogil=True)  # built on a thread while the previous block is written
def _place(tokens, starts, learned, bit_starts, masked, lengths, row_of, offset_of, n_rows, seq_len, pad_id, multiple):
    """input_ids, labels and positions of the placed pieces; each piece's pads (to a multiple
    of `multiple`) keep pad_id and -100 and count positions on. Returns also each row's fill
    and, with padding, each piece's real length at its start (real_at)."""
    input_ids = np.full((n_rows, seq_len), pad_id, dtype=np.int32)
    out_labels = np.full((n_rows, seq_len), -100, dtype=np.int32)
    positions = np.zeros((n_rows, seq_len), dtype=np.int32)
    real_at = np.zeros((n_rows if multiple > 1 else 0, seq_len), dtype=np.int32)
    fill = np.zeros(n_rows, dtype=np.int64)
    num_segments = np.zeros(n_rows, dtype=np.int32)
    for i in range(len(starts)):
        r, o = row_of[i], offset_of[i]
        end = _lay_piece(
            i,
            o,
            input_ids,
            out_labels,
            positions,
            real_at,
            tokens,
            starts,
            learned,
            bit_starts,
            masked,
            lengths,
            row_of,
            pad_id,
            multiple,
            False,
        )  # the arrays hold pad_id and -100 already
        num_segments[r] += 1
        if o + end > fill[r]:
            fill[r] = o + end
    return input_ids, out_labels, positions, fill, num_segments, real_at


@njit(cache=True, nogil=True)
def _runs_on(order, offset_of, lengths, row_of, n_rows, multiple):
    """Whether, taken in `order` (by row, then offset), every piece starts where the one
    before it in its row ended, as the planners place them: then the pieces cover each
    row's cells up to its fill once each, and nothing needs filling beforehand."""
    end = np.zeros(n_rows, dtype=np.int64)
    for i in order:
        r = row_of[i]
        if offset_of[i] != end[r]:
            return False
        n = lengths[i]
        end[r] += (n + multiple - 1) // multiple * multiple if multiple > 1 else n
    return True


@njit(cache=True, nogil=True)
def _place_once(
    order,
    input_ids,
    out_labels,
    positions,
    real_at,
    tokens,
    starts,
    learned,
    bit_starts,
    masked,
    lengths,
    row_of,
    n_rows,
    pad_id,
    multiple,
):
    """_place for pieces that run on in their rows in `order` (`_runs_on`), into arrays of
    any prior content: every cell of a row is written exactly once (the positions after
    its fill are left to `_segments`)."""
    seq_len = input_ids.shape[1]
    fill = np.zeros(n_rows, dtype=np.int64)
    num_segments = np.zeros(n_rows, dtype=np.int32)
    for i in order:
        r = row_of[i]
        fill[r] += _lay_piece(
            i,
            fill[r],
            input_ids,
            out_labels,
            positions,
            real_at,
            tokens,
            starts,
            learned,
            bit_starts,
            masked,
            lengths,
            row_of,
            pad_id,
            multiple,
            True,
        )
        num_segments[r] += 1
    for r in range(n_rows):
        for j in range(fill[r], seq_len):
            input_ids[r, j] = pad_id
            out_labels[r, j] = -100
    return fill, num_segments


@njit(cache=True, nogil=True)
def _segments(positions, fill, real_at, n_rows, seq_len, multiple):
    """cu_seqlens (CSR), max_seqlen and, with padding, cu_seqlens_unpadded. Padding is one
    last segment whose positions restart like any other; in cu_seqlens_unpadded it
    counts as its own length."""
    total = 0
    for r in range(n_rows):
        for j in range(fill[r], seq_len):
            positions[r, j] = j - fill[r]
        for j in range(seq_len):
            if positions[r, j] == 0:
                total += 1
        total += 1
    cu_offsets = np.zeros(n_rows + 1, dtype=np.int64)
    cu_seqlens = np.empty(total, dtype=np.int32)
    unpadded = np.empty(total if multiple > 1 else 0, dtype=np.int32)
    max_seqlen = np.zeros(n_rows, dtype=np.int32)
    k = 0
    for r in range(n_rows):
        real = 0
        previous = 0
        for j in range(seq_len):
            if positions[r, j] == 0:
                cu_seqlens[k] = j
                if j - previous > max_seqlen[r]:
                    max_seqlen[r] = j - previous
                previous = j
                if multiple > 1:
                    unpadded[k] = real
                    real += real_at[r, j] if j < fill[r] else seq_len - j
                k += 1
        cu_seqlens[k] = seq_len
        if seq_len - previous > max_seqlen[r]:
            max_seqlen[r] = seq_len - previous
        if multiple > 1:
            unpadded[k] = real
        k += 1
        cu_offsets[r + 1] = k
    return cu_seqlens, cu_offsets, max_seqlen, unpadded


Pieces = tuple[Any, Any, Any, Any, bool, Any, Any, int]  # tokens .. row_of (as _place takes them), n_rows


class RowBuffers:
    """Reusable arrays for the columns of one block of rows, for a caller that is done with
    a block's Rows before it asks for the next (writing npy, which keeps nothing): fresh
    arrays per block cost a page fault and the kernel's zeroing on every page."""

    def __init__(self) -> None:
        self._arrays: tuple[np.ndarray, ...] = ()

    def take(self, n_rows: int, seq_len: int, multiple: int) -> tuple[np.ndarray, ...]:
        """input_ids, labels, positions and real_at (rows with --pad-to-multiple-of) arrays
        of n_rows rows, their contents left as they were."""
        if not self._arrays or len(self._arrays[0]) < n_rows or self._arrays[0].shape[1] != seq_len:
            self._arrays = tuple(np.empty((n_rows, seq_len), dtype=np.int32) for _ in range(4))
        ids, labels, positions, real_at = (a[:n_rows] for a in self._arrays)
        return ids, labels, positions, real_at if multiple > 1 else real_at[:0]


def fill_rows(
    tokens,
    starts,
    learned,
    bit_starts,
    lengths,
    row_of,
    offset_of,
    n_rows: int,
    seq_len: int,
    pad_id: int,
    multiple: int = 1,
    buffers: RowBuffers | None = None,
) -> Rows:
    """Rows from placed pieces of `tokens` (a flat id array of any integer dtype), piece i
    starting at tokens[starts[i]]; `learned` is None when every token is learned, else packed
    bits (little bit order), piece i's first at bit bit_starts[i]. `multiple` > 1 pads every
    piece to a multiple of it (--pad-to-multiple-of; the offsets must leave room).
    `buffers`: the columns are written into these (the Rows returned are views of them)."""
    masked = learned is not None
    args: Pieces = (
        tokens,
        np.asarray(starts, dtype=np.int64),
        learned if masked else np.zeros(1, dtype=np.uint8),
        np.asarray(bit_starts, dtype=np.int64),
        masked,
        np.asarray(lengths, dtype=np.int64),
        np.asarray(row_of, dtype=np.int64),
        n_rows,
    )
    offset_of = np.asarray(offset_of, dtype=np.int64)
    work = n_rows * seq_len
    placed = None if buffers is None else _place_in(buffers, args, offset_of, seq_len, pad_id, multiple)
    if placed is None:
        placed = kernel(_place, work)(*args[:7], offset_of, n_rows, seq_len, pad_id, multiple)
    ids, labels, positions, fill, num_segments, real_at = placed
    segments = kernel(_segments, work)
    cu, offsets, max_seqlen, unpadded = segments(positions, fill, real_at, n_rows, seq_len, multiple)
    return Rows(ids, labels, positions, cu, offsets, num_segments, max_seqlen, unpadded if multiple > 1 else None)


def _place_in(buffers: RowBuffers, args: Pieces, offset_of, seq_len: int, pad_id: int, multiple: int):
    """_place_once into `buffers`, or None when the pieces leave gaps in a row (then
    _place, which fills every cell first, lays them out). `args`: the pieces and n_rows."""
    lengths, row_of, n_rows = args[5], args[6], args[7]
    order = np.argsort(row_of * (seq_len + 1) + offset_of, kind="stable")
    work = n_rows * seq_len
    if not kernel(_runs_on, len(order))(order, offset_of, lengths, row_of, n_rows, multiple):
        return None
    ids, labels, positions, real_at = buffers.take(n_rows, seq_len, multiple)
    fill, num_segments = kernel(_place_once, work)(order, ids, labels, positions, real_at, *args, pad_id, multiple)
    return ids, labels, positions, fill, num_segments, real_at


def padded_lengths(lengths: np.ndarray, multiple: int) -> np.ndarray:
    """Each length rounded up to a multiple of `multiple` (what the planner places)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    if multiple == 1:  # the default: no pass over the lengths
        return lengths
    rounded: np.ndarray = (lengths + multiple - 1) // multiple * multiple
    return rounded


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


def build_rows(
    tokens, labels, starts, lengths, row_of, offset_of, n_rows: int, seq_len: int, pad_id: int, multiple: int = 1
) -> Rows:
    """Rows from placed pieces of `tokens`; `labels` is None for plain text, else a flat array
    aligned with `tokens` (-100 where nothing is learned)."""
    bits = None
    if labels is not None:
        bits = np.packbits(learned_bits(tokens, labels), bitorder="little")
    return fill_rows(tokens, starts, bits, starts, lengths, row_of, offset_of, n_rows, seq_len, pad_id, multiple)


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
    starts, lengths = np.asarray(starts, dtype=np.int64), np.asarray(lengths, dtype=np.int64)
    work = len(starts) + int(lengths.sum()) // max(int(width), 1)
    return kernel(_cut_pieces, work)(starts, lengths, width, aligned)
