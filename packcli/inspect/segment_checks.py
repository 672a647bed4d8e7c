"""The per-segment columns of packed rows (SPEC section 4), checked: each row holds one
entry per real segment in each, `segment_source` values name a source, preference pairs
are whole and matched, weights are finite numbers, 0 or more.

The row checker runs these on every block of rows it checks, once their cu_seqlens are
checked. What the columns add up to (SegmentFigures: real tokens per source, each pair's
index and row) is summed over the shards and held against the manifest by `verify`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from packcli.core.errors import PackcliError
from packcli.plan.rows import segment_table
from packcli.write.columns import SOURCE_COLUMN
from packcli.write.shard_reader import check_segment_counts
from packcli.write.values import CHOSEN_COLUMN, PAIR_COLUMN, WEIGHT_COLUMN


class SegmentColumns(NamedTuple):
    """The per-segment columns of a block of rows: where each row's entries start (rows + 1
    offsets, global in a block of an npy shard) and the values of each column."""

    offsets: np.ndarray
    columns: dict[str, np.ndarray]


@dataclass
class SegmentFigures:
    """What a block's per-segment columns add up to: real tokens per segment_source value,
    and each pair's index with its row (counted from the block's first), or None."""

    per_source: np.ndarray | None = None
    pairs: tuple[np.ndarray, np.ndarray] | None = None


def check_segment_columns(
    cu, offsets, num_segments, unpadded, segments: SegmentColumns, sources: int | None, *, where: str, first_row: int
) -> SegmentFigures:
    """The per-segment columns of rows whose cu_seqlens are checked: each row holds
    num_segments entries of each, `segment_source` values name a source (0 to
    `sources` - 1; any value from 0 without a source table), pairs are whole and matched
    (check_pairs) and weights are finite numbers, 0 or more."""
    seg_offsets, columns = segments
    seg_offsets = np.asarray(seg_offsets, dtype=np.int64)
    counts = np.diff(seg_offsets)
    for name, values in columns.items():
        check_segment_counts(where, name, counts, num_segments, first_row)
        if len(values) != int(seg_offsets[-1] - seg_offsets[0]):
            raise PackcliError(
                f"{where} {first_row}: {name} has {len(values)} entries for {int(counts.sum())} segments"
            )
    figures = SegmentFigures()
    if WEIGHT_COLUMN in columns:
        check_weights(columns, seg_offsets, where=where, first_row=first_row)
    if PAIR_COLUMN in columns or CHOSEN_COLUMN in columns:
        figures.pairs = check_pairs(columns, seg_offsets, where=where, first_row=first_row)
    if SOURCE_COLUMN in columns:
        figures.per_source = _source_tokens(
            cu, offsets, num_segments, unpadded, columns, seg_offsets, sources, where, first_row
        )
    return figures


def check_pairs(
    columns: dict[str, np.ndarray], seg_offsets: np.ndarray, *, where: str, first_row: int
) -> tuple[np.ndarray, np.ndarray]:
    """Preference pairs are whole and matched: every row's segments come two by two, the
    chosen side (segment_chosen 1) then the rejected one (0) of the same pair, with the
    same weight. Returns each pair's index and its row (from the block's first)."""
    for name in (PAIR_COLUMN, CHOSEN_COLUMN):
        if name not in columns:
            other = CHOSEN_COLUMN if name == PAIR_COLUMN else PAIR_COLUMN
            raise PackcliError(f"{where} {first_row}: {other} without {name}")
    pair = np.asarray(columns[PAIR_COLUMN], dtype=np.int64)
    chosen = np.asarray(columns[CHOSEN_COLUMN], dtype=np.int64)
    base = seg_offsets - seg_offsets[0]
    odd = np.flatnonzero(np.diff(base) % 2)
    if len(odd):
        raise PackcliError(
            f"{where} {first_row + int(odd[0])}: {int(np.diff(base)[odd[0]])} segments, "
            "not whole pairs (a pair is two segments of one row)"
        )

    def row_of(segment: int) -> int:
        return first_row + int(np.searchsorted(base, segment, side="right")) - 1

    first, second = slice(0, None, 2), slice(1, None, 2)
    checks: list[tuple[np.ndarray, str]] = [
        (pair[first] != pair[second], "pair {a} is followed by pair {b}: a pair's two segments are next to each other"),
        (chosen[first] != 1, "pair {a}'s first segment has segment_chosen {c}, not 1 (chosen comes first)"),
        (chosen[second] != 0, "pair {a}'s second segment has segment_chosen {d}, not 0 (rejected)"),
        (pair[first] < 0, "pair index {a} is negative"),
    ]
    if WEIGHT_COLUMN in columns:
        weight = np.asarray(columns[WEIGHT_COLUMN])
        checks.append((weight[first] != weight[second], "pair {a}'s two sides have weights {w} and {v}"))
    for wrong, message in checks:
        bad = np.flatnonzero(wrong)
        if len(bad):
            k = int(bad[0])
            a, b, c, d = (int(x) for x in (pair[2 * k], pair[2 * k + 1], chosen[2 * k], chosen[2 * k + 1]))
            w, v = (float(columns[WEIGHT_COLUMN][2 * k + j]) if WEIGHT_COLUMN in columns else 0.0 for j in (0, 1))
            raise PackcliError(f"{where} {row_of(2 * k)}: " + message.format(a=a, b=b, c=c, d=d, w=w, v=v))
    rows = np.searchsorted(base, np.arange(0, len(pair), 2), side="right") - 1
    return pair[first], rows.astype(np.int64)


def check_weights(columns: dict[str, np.ndarray], seg_offsets: np.ndarray, *, where: str, first_row: int) -> None:
    """segment_weight: a finite number, 0 or more, for every segment."""
    weight = np.asarray(columns[WEIGHT_COLUMN], dtype=np.float64)
    bad = np.flatnonzero(~np.isfinite(weight) | (weight < 0))
    if len(bad):
        k = int(bad[0])
        row = first_row + int(np.searchsorted(seg_offsets - seg_offsets[0], k, side="right")) - 1
        raise PackcliError(f"{where} {row}: segment_weight {weight[k]} is not a finite number, 0 or more")


def _source_tokens(cu, offsets, num_segments, unpadded, columns, seg_offsets, sources, where, first_row) -> np.ndarray:
    """Real tokens per segment_source value (padding excluded), each value checked to name a source."""
    source = np.asarray(columns[SOURCE_COLUMN], dtype=np.int64)
    top = sources if sources is not None else np.iinfo(np.int64).max
    bad = np.flatnonzero((source < 0) | (source >= top))
    if len(bad):
        i = int(bad[0])
        row = int(np.searchsorted(seg_offsets - seg_offsets[0], i, side="right")) - 1
        named = f"the manifest's {sources} sources (0 to {sources - 1})" if sources is not None else "a source"
        raise PackcliError(f"{where} {first_row + row}: segment_source {int(source[i])} is not one of {named}")
    _, _, segment, is_real = segment_table(offsets, num_segments)  # offsets may be global over a sliced cu
    cu = np.asarray(cu if unpadded is None else unpadded, dtype=np.int64)
    real = (cu[segment + 1] - cu[segment])[is_real]
    n = sources if sources is not None else (int(source.max()) + 1 if len(source) else 0)
    found: np.ndarray = np.bincount(source, weights=real, minlength=n).astype(np.int64)
    return found


def sum_sources(total: np.ndarray | None, more: np.ndarray | None) -> np.ndarray | None:
    """Real tokens per source, summed (either may be None: no segment_source column, or no rows)."""
    if more is None or total is None:
        return more if total is None else total
    n = max(len(total), len(more))
    out = np.zeros(n, dtype=np.int64)
    out[: len(total)] += total
    out[: len(more)] += more
    return out
