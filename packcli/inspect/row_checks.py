"""The invariants of a packed row (SPEC section 4), checked the same way everywhere.

`check_rows` is the one checker: `packcli verify` runs it on every shard and the tests
run it on every output they produce. It is written independently of the code that
builds rows (it rebuilds what each row must look like from `cu_seqlens` alone), so a
bug in one is not mirrored in the other. `check_block` is the same on bare arrays
(RowBlock), which `verify` reads a shard into; it checks a block's per-segment columns
too (segment_checks.py).

Speed: one Numba kernel walks each row once and only answers "which row is the first
bad one"; plain numpy then re-examines that one row to say what is wrong, so the fast
path carries no message logic.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from packcli.core.errors import PackcliError
from packcli.core.jit import njit
from packcli.inspect.segment_checks import SegmentColumns, SegmentFigures, check_segment_columns
from packcli.plan.rows import IGNORE_INDEX, Rows, longest_segments, segment_table

CHECK_BLOCK_ROWS = 8192


class RowBlock(NamedTuple):
    """A block of rows as bare arrays, what the checks take (npy shards are checked straight
    from their memory maps). `offsets` index `cu` and may be global (offsets[0] > 0, a block
    of an npy shard over its slice of cu_seqlens); `unpadded` is cu_seqlens_unpadded. A
    column the rows lack is None, `segments` None for rows without per-segment columns."""

    ids: np.ndarray
    labels: np.ndarray
    positions: np.ndarray
    cu: np.ndarray
    offsets: np.ndarray
    num_segments: np.ndarray
    max_seqlen: np.ndarray | None
    unpadded: np.ndarray | None
    segments: SegmentColumns | None

    @classmethod
    def of(cls, rows: Rows, max_seqlen: bool = True) -> RowBlock:
        """The arrays of `rows`; `max_seqlen` False for a shard without that column (Rows
        computes it where it is missing, so it would pass unseen)."""
        segments = SegmentColumns(rows.seg_offsets, rows.segment_columns) if rows.segment_columns else None
        return cls(
            rows.input_ids,
            rows.labels,
            rows.position_ids,
            rows.cu_seqlens,
            rows.cu_offsets,
            rows.num_segments,
            rows.max_seqlen if max_seqlen else None,
            rows.cu_seqlens_unpadded,
            segments,
        )


def check_rows(
    rows: Rows,
    *,
    seq_len: int,
    pad_id: int,
    vocab_size: int | None = None,
    labels_follow_ids: bool = True,
    pad_to_multiple_of: int | None = None,
    sources: int | None = None,
    where: str = "row",
    first_row: int = 0,
) -> None:
    """Raise PackcliError naming the first bad row and what is wrong with it.

    labels_follow_ids: plain text, where every label not masked by a boundary or padding
    must equal its input id (in SFT data prompt tokens are masked too, so only
    "label is the id or -100" can be checked). pad_to_multiple_of: rows of
    --pad-to-multiple-of, whose segments must each be real tokens then fewer than that
    many pads, as `cu_seqlens_unpadded` says. Per-segment columns (`rows.segment_columns`)
    hold one entry per real segment; `sources`: the number of the manifest's sources,
    which `segment_source` values must be below. `verify.output_rules(manifest)` gives all
    of these for the rows of a packed output.
    """
    rules = {"seq_len": seq_len, "pad_id": pad_id, "vocab_size": vocab_size, "labels_follow_ids": labels_follow_ids}
    multiple = pad_to_multiple_of or 0
    check_block(RowBlock.of(rows), rules, True, multiple, where, first_row, sources)


def check_block(
    block: RowBlock,
    rules: dict[str, Any],
    has_max: bool,
    multiple: int,
    where: str,
    first_row: int,
    sources: int | None = None,
) -> tuple[int, int, SegmentFigures]:
    """Every rule on one block of rows: its rows, their max_seqlen (`has_max`) and
    cu_seqlens_unpadded (`multiple`), its per-segment columns. `rules`: check_rows'
    seq_len, pad_id, vocab_size and labels_follow_ids. Returns (sequences, real tokens,
    what the per-segment columns add up to)."""
    follow = rules["labels_follow_ids"]
    # Inner pads carry -100 inside a segment: the row kernel checks such rows with loose
    # labels and check_padded_segments checks the labels of the real tokens.
    kernel_rules = {**rules, "labels_follow_ids": follow and not multiple}
    sequences, real = _check_arrays(block, **kernel_rules, where=where, first_row=first_row)
    if has_max:
        check_max_seqlen(block.cu, block.offsets, block.max_seqlen, where=where, first_row=first_row)
    if multiple:
        padded = {"multiple": multiple, "pad_id": rules["pad_id"], "labels_follow_ids": follow}
        arrays = (block.ids, block.labels, block.positions, block.cu, block.offsets, block.num_segments)
        real = check_padded_segments(*arrays, block.unpadded, **padded, where=where, first_row=first_row)
    figures = SegmentFigures()
    if block.segments is not None:
        cu, offsets, num_segments, unpadded = block.cu, block.offsets, block.num_segments, block.unpadded
        figures = check_segment_columns(
            cu, offsets, num_segments, unpadded, block.segments, sources, where=where, first_row=first_row
        )
    return sequences, real, figures


def _check_arrays(
    block: RowBlock,
    *,
    seq_len,
    pad_id,
    vocab_size,
    labels_follow_ids,
    where,
    first_row,
) -> tuple[int, int]:
    """The rules of one row on every row of a block (its input_ids, labels, position_ids,
    cu_seqlens and num_segments). Returns (sequences, real tokens) of the rows."""
    ids, labels, positions = block.ids, block.labels, block.positions
    cu, offsets, num_segments = block.cu, block.offsets, block.num_segments
    n = len(ids)

    def fail(row: int, message: str):
        raise PackcliError(f"{where} {first_row + row}: {message}")

    for name, array in (("input_ids", ids), ("labels", labels), ("position_ids", positions)):
        if array.shape != (n, seq_len):
            fail(0, f"{name} has shape {array.shape}, expected ({n}, {seq_len})")
        if array.dtype.kind not in "iu":
            fail(0, f"{name} holds {array.dtype}, not integers")
    if len(offsets) != n + 1 or len(num_segments) != n or (n and offsets[-1] - offsets[0] > len(cu)):
        fail(0, "cu_seqlens offsets do not match the number of rows")
    # The kernel is compiled for the dtypes shards hold; anything else is widened first.
    ids = ids if ids.dtype in (np.uint16, np.uint32, np.int32) else np.asarray(ids, dtype=np.int64)
    labels, positions = (a if a.dtype == np.int32 else np.asarray(a, dtype=np.int64) for a in (labels, positions))
    # The largest valid id, as int32 so that the kernel's arithmetic stays in int32.
    last_id = np.int32(min(int(vocab_size) - 1 if vocab_size is not None else 2**31 - 1, 2**31 - 1))
    pad = np.int32(pad_id)
    base = int(offsets[0]) if n else 0
    sequences = real_tokens = 0
    arrays = (ids, labels, positions, cu, offsets, num_segments)
    for start in range(0, n, CHECK_BLOCK_ROWS):
        stop = min(start + CHECK_BLOCK_ROWS, n)
        bad, seqs, real = _first_bad_row(*arrays, base, start, stop, seq_len, pad, last_id, labels_follow_ids)
        if bad >= 0:
            lo, hi = int(offsets[bad]) - base, int(offsets[bad + 1]) - base
            rules = (int(num_segments[bad]), seq_len, pad_id, vocab_size, labels_follow_ids)
            fail(bad, _row_problem(ids[bad], labels[bad], positions[bad], cu, lo, hi, *rules))
        sequences += int(seqs)  # a Python int, whether the kernel ran compiled or as Python
        real_tokens += int(real)
    return sequences, real_tokens


@njit(cache=True, nogil=True)
def _first_bad_row(
    ids, labels, positions, cu, offsets, num_segments, base, start, stop, seq_len, pad_id, last_id, follow
):
    """Index of the first row in [start, stop) that breaks an invariant (-1 if none),
    with the sequences and real tokens of the rows before it.

    Inner loops OR differences into accumulators instead of branching, so they
    vectorize: `eq` must stay 0 (positions, masked labels, padding as expected) and
    `sign` must stay >= 0 (0 <= id <= last_id). Each segment is sliced and walked from
    index 0, which spares numba's negative-index checks (5x faster); arithmetic is in
    int32 for uint16 and int32 ids."""
    n_cu = len(cu)
    sequences = 0
    real_tokens = 0
    masked = np.int32(-IGNORE_INDEX)  # label + masked == 0 for a masked label
    for r in range(start, stop):
        lo = offsets[r] - base
        hi = offsets[r + 1] - base
        if lo < 0 or hi > n_cu or hi - lo < 2:
            return r, sequences, real_tokens
        if cu[lo] != 0 or cu[hi - 1] != seq_len:
            return r, sequences, real_tokens
        for k in range(lo, hi - 1):
            if cu[k + 1] <= cu[k]:
                return r, sequences, real_tokens
        segments = hi - lo - 1
        extra = segments - num_segments[r]
        if extra != 0 and extra != 1:
            return r, sequences, real_tokens
        eq = np.int32(0)
        sign = np.int32(0)
        loose = False  # labels_follow_ids off: a label may also be -100
        for k in range(segments):
            s = np.int64(cu[lo + k])
            e = np.int64(cu[lo + k + 1])
            seg_ids, seg_labels, seg_positions = ids[r, s:e], labels[r, s:e], positions[r, s:e]
            if extra == 1 and k == segments - 1:  # the padding segment
                for j in range(e - s):
                    eq |= (seg_positions[j] - np.int32(j)) | (seg_labels[j] + masked) | (seg_ids[j] - pad_id)
                continue
            t = seg_ids[0]
            eq |= seg_positions[0] | (seg_labels[0] + masked)
            sign |= t | (last_id - t)
            if follow:
                for j in range(1, e - s):
                    t = seg_ids[j]
                    eq |= (seg_positions[j] - np.int32(j)) | (seg_labels[j] - t)
                    sign |= t | (last_id - t)
            else:
                for j in range(1, e - s):
                    t = seg_ids[j]
                    label = seg_labels[j]
                    eq |= seg_positions[j] - np.int32(j)
                    sign |= t | (last_id - t)
                    loose |= (label != t) & (label != IGNORE_INDEX)
        if eq != 0 or sign < 0 or loose:
            return r, sequences, real_tokens
        sequences += num_segments[r]
        real_tokens += cu[hi - 2] if extra == 1 else seq_len
    return -1, sequences, real_tokens


def _row_problem(
    ids, labels, positions, cu_all, lo, hi, num_segments, seq_len, pad_id, vocab_size, labels_follow_ids
) -> str:
    """What is wrong with one row the kernel flagged, in the order the checks are listed."""
    if lo < 0 or hi > len(cu_all):
        return "cu_seqlens offsets do not match the number of rows"
    cu = np.asarray(cu_all[lo:hi], dtype=np.int64)
    if len(cu) < 2:
        return "cu_seqlens has fewer than 2 entries"
    if cu[0] != 0:
        return "cu_seqlens does not start at 0"
    if cu[-1] != seq_len:
        return f"cu_seqlens ends at {cu[-1]}, not at seq_len {seq_len}"
    if (np.diff(cu) <= 0).any():
        return "cu_seqlens is not strictly increasing"
    segments = len(cu) - 1
    extra = segments - num_segments
    if extra not in (0, 1):
        return f"num_segments {num_segments} does not fit {segments} segments in cu_seqlens"

    column = np.arange(seq_len)
    expected_positions = column - np.repeat(cu[:-1], np.diff(cu))
    positions = np.asarray(positions, dtype=np.int64)
    if (positions != expected_positions).any():
        col = _first(positions != expected_positions)
        return f"position_ids do not restart at segment starts (position {col} is {positions[col]}, expected {expected_positions[col]})"
    ids, labels = np.asarray(ids, dtype=np.int64), np.asarray(labels, dtype=np.int64)
    is_pad = column >= (cu[-2] if extra == 1 else seq_len)
    pad_wrong = is_pad & (ids != pad_id)
    if pad_wrong.any():
        return f"padding holds token {ids[pad_wrong][0]}, not pad id {pad_id}"
    out = (ids < 0) | (ids >= vocab_size) if vocab_size is not None else ids < 0
    if out.any():
        return f"token id {ids[out][0]} outside the vocabulary (size {vocab_size})"
    starts = np.zeros(seq_len, dtype=bool)
    starts[cu[:-1]] = True
    must_ignore = starts | is_pad
    not_ignored = must_ignore & (labels != IGNORE_INDEX)
    if not_ignored.any():
        col = _first(not_ignored)
        what = "padding" if is_pad[col] else "the first token of a segment"
        return f"label at position {col} ({what}) is {labels[col]}, expected -100"
    wrong = ~must_ignore & (labels != ids)
    if not labels_follow_ids:
        wrong &= labels != IGNORE_INDEX
    if wrong.any():
        col = _first(wrong)
        return f"label at position {col} is {labels[col]}, input id is {ids[col]}"
    return "breaks an invariant the row checker could not name"  # the kernel and this disagree


def _first(mask) -> int:
    return int(np.argmax(mask))


def check_max_seqlen(cu, offsets, max_seqlen, *, where: str = "row", first_row: int = 0) -> None:
    """max_seqlen is the longest segment of each row's cu_seqlens, padding included."""
    n = len(offsets) - 1
    if max_seqlen is None or len(max_seqlen) != n:
        raise PackcliError(f"{where} {first_row}: the max_seqlen column is missing or does not match the rows")
    local = np.asarray(offsets, dtype=np.int64) - int(offsets[0])  # npy blocks: global offsets, cu sliced
    expected = longest_segments(np.asarray(cu), local)
    wrong = np.flatnonzero(np.asarray(max_seqlen) != expected)
    if len(wrong):
        r = int(wrong[0])
        raise PackcliError(
            f"{where} {first_row + r}: max_seqlen is {int(max_seqlen[r])}, the longest segment of cu_seqlens is {int(expected[r])}"
        )


def check_padded_segments(
    ids,
    labels,
    positions,
    cu,
    offsets,
    num_segments,
    unpadded,
    *,
    multiple: int,
    pad_id: int,
    labels_follow_ids: bool,
    where: str = "row",
    first_row: int = 0,
) -> int:
    """--pad-to-multiple-of: every real segment is its real tokens then fewer than `multiple`
    pads (pad id, label -100) up to a multiple of it; cu_seqlens_unpadded counts the real
    tokens (the final padding segment as its own length). Returns the real tokens."""
    off = np.asarray(offsets, dtype=np.int64) - int(offsets[0])
    cu = np.asarray(cu, dtype=np.int64)
    if unpadded is None or len(unpadded) != len(cu):
        raise PackcliError(f"{where} {first_row}: cu_seqlens_unpadded is missing or does not match cu_seqlens")
    un = np.asarray(unpadded, dtype=np.int64)
    if (un[off[:-1]] != 0).any():
        raise PackcliError(
            f"{where} {first_row + int(np.argmax(un[off[:-1]] != 0))}: cu_seqlens_unpadded does not start at 0"
        )
    entry_row, k, seg, is_real = segment_table(off, num_segments)
    row, padded, real = entry_row[seg], cu[seg + 1] - cu[seg], un[seg + 1] - un[seg]
    bad = np.where(
        is_real, (real < 1) | (real > padded) | (padded % multiple != 0) | (padded - real >= multiple), real != padded
    )
    if bad.any():
        i = int(np.argmax(bad))
        raise PackcliError(
            f"{where} {first_row + int(row[i])}: segment {int(k[seg[i]])} has {int(real[i])} real tokens in "
            f"{int(padded[i])} (cu_seqlens_unpadded does not fit --pad-to-multiple-of {multiple})"
        )
    seq_len = ids.shape[1]
    starts = (row * seq_len + cu[seg])[is_real]
    real, padded, row = real[is_real], padded[is_real], row[is_real]
    pads = _spans(starts + real, padded - real)
    flat_ids, flat_labels = np.asarray(ids).reshape(-1), np.asarray(labels).reshape(-1)
    wrong = (flat_ids[pads] != pad_id) | (flat_labels[pads] != IGNORE_INDEX)
    if wrong.any():
        at = int(pads[np.argmax(wrong)])
        raise PackcliError(
            f"{where} {first_row + at // seq_len}: the pad at position {at % seq_len} is not pad id {pad_id} with label -100"
        )
    if labels_follow_ids:
        inside = _spans(starts + 1, real - 1)
        wrong = flat_labels[inside] != flat_ids[inside]
        if wrong.any():
            at = int(inside[np.argmax(wrong)])
            raise PackcliError(
                f"{where} {first_row + at // seq_len}: label at position {at % seq_len} is not its input id"
            )
    return int(real.sum())


def _spans(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The indices of spans [start, start + length) one after another."""
    lengths = np.maximum(lengths, 0)
    total = int(lengths.sum())
    shift = np.repeat(starts - (np.cumsum(lengths) - lengths), lengths)
    spans: np.ndarray = shift + np.arange(total)
    return spans
