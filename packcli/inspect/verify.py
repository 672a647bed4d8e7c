"""The invariants of a packed row (SPEC section 4), checked the same way everywhere.

`check_rows` is the one checker: `packcli verify` runs it on every shard and the tests
run it on every output they produce. It is written independently of the code that
builds rows (it rebuilds what each row must look like from `cu_seqlens` alone), so a
bug in one is not mirrored in the other.

Speed: one Numba kernel walks each row once and only answers "which row is the first
bad one"; plain numpy then re-examines that one row to say what is wrong, so the fast
path carries no message logic. `verify_dir` hashes shards on worker threads while the
main thread checks rows (both release the GIL), since sha256 is most of the cost.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from packcli.core.errors import PackcliError
from packcli.core.jit import njit
from packcli.plan.grouping import group_counts, row_token_hashes
from packcli.plan.rows import IGNORE_INDEX, Rows, longest_segments, segment_table
from packcli.write.columns import (
    NPY_FILES,
    OPTIONAL_NPY_FILES,
    SOURCE_COLUMN,
    is_segment_column,
    npy_shard_files,
)
from packcli.write.manifest import Manifest, ShardEntry, load_manifest
from packcli.write.shard_pages import ShardPages
from packcli.write.shard_reader import (
    check_segment_counts,
    map_npy,
    npy_segment_maps,
    read_group_column,
    read_shard,
)
from packcli.write.values import CHOSEN_COLUMN, PAIR_COLUMN, WEIGHT_COLUMN

CHECK_BLOCK_ROWS = 8192
BLOCK_TOKENS = 1 << 22  # rows read per block: memory stays bounded however big a shard is
HASH_CHUNK = 1 << 22


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
    which `segment_source` values must be below. `output_rules(manifest)` gives all of
    these for the rows of a packed output.
    """
    block = (rows.input_ids, rows.labels, rows.position_ids, rows.cu_seqlens, rows.cu_offsets, rows.num_segments)
    rules = {"seq_len": seq_len, "pad_id": pad_id, "vocab_size": vocab_size, "labels_follow_ids": labels_follow_ids}
    multiple = pad_to_multiple_of or 0
    segments = (rows.seg_offsets, rows.segment_columns) if rows.segment_columns else None
    extra = (rows.max_seqlen, rows.cu_seqlens_unpadded)
    _check_block(block, extra, rules, True, multiple, where, first_row, segments, sources)


Segments = tuple[np.ndarray, dict[str, np.ndarray]] | None  # (offsets [rows + 1], {column: values}) of a block


def _check_block(
    block: tuple,
    extra: tuple,
    rules: dict[str, Any],
    has_max: bool,
    multiple: int,
    where: str,
    first_row: int,
    segments: Segments = None,
    sources: int | None = None,
) -> tuple[int, int, SegmentFigures]:
    """Every rule on one block of rows: (ids, labels, positions, cu, offsets, num_segments),
    (max_seqlen, cu_seqlens_unpadded), the per-segment columns. Returns (sequences, real
    tokens, what the per-segment columns add up to)."""
    follow = rules["labels_follow_ids"]
    # Inner pads carry -100 inside a segment: the row kernel checks such rows with loose
    # labels and check_padded_segments checks the labels of the real tokens.
    kernel_rules = {**rules, "labels_follow_ids": follow and not multiple}
    sequences, real = _check_arrays(*block, **kernel_rules, where=where, first_row=first_row)
    if has_max:
        check_max_seqlen(block[3], block[4], extra[0], where=where, first_row=first_row)
    if multiple:
        padded = {"multiple": multiple, "pad_id": rules["pad_id"], "labels_follow_ids": follow}
        ids, labels, positions, cu, offsets, num_segments = block
        real = check_padded_segments(
            ids, labels, positions, cu, offsets, num_segments, extra[1], **padded, where=where, first_row=first_row
        )
    figures = SegmentFigures()
    if segments is not None:
        figures = check_segment_columns(
            block[3], block[4], block[5], extra[1], segments, sources, where=where, first_row=first_row
        )
    return sequences, real, figures


@dataclass
class SegmentFigures:
    """What a block's per-segment columns add up to: real tokens per segment_source value,
    and each pair's index with its row (counted from the block's first), or None."""

    per_source: np.ndarray | None = None
    pairs: tuple[np.ndarray, np.ndarray] | None = None


def check_segment_columns(
    cu, offsets, num_segments, unpadded, segments: tuple, sources: int | None, *, where: str, first_row: int
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


def _check_arrays(
    ids,
    labels,
    positions,
    cu,
    offsets,
    num_segments,
    *,
    seq_len,
    pad_id,
    vocab_size,
    labels_follow_ids,
    where,
    first_row,
) -> tuple[int, int]:
    """check_rows on bare arrays (npy shards are checked straight from their memory maps).

    `offsets` may be global (offsets[0] > 0, as in a whole npy shard): rows index into
    `cu` through them. Returns (sequences, real tokens) of the rows."""
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
        sequences += seqs
        real_tokens += real
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


# ------------------------------------------------------------------------------ verify DIR


def verify_dir(out_dir: Path | str) -> dict[str, Any]:
    """Every shard against the manifest (rows, checksums, totals) and every row invariant."""
    started = time.perf_counter()
    out_dir = Path(out_dir)
    manifest = load_manifest(out_dir)
    listed = {shard["path"] for shard in manifest["shards"]}
    strays = sorted(p.name for p in out_dir.glob("shard-*") if p.name not in listed)
    if strays:
        raise PackcliError(f"{strays[0]}: shard file not listed in the manifest")
    totals, size, per_source = _check_shards(out_dir, manifest)
    for key, value in manifest.get("totals", {}).items():
        if totals.get(key) != value:
            raise PackcliError(
                f"manifest.json: totals say {value:,} {key.replace('_', ' ')}, the shards hold {totals.get(key):,}"
            )
    mixed = verify_sources(manifest, per_source)
    grouped = verify_groups(out_dir, manifest)
    seconds = time.perf_counter() - started
    return {"shards": len(manifest["shards"]), **totals, **mixed, **grouped, "bytes": size, "seconds": seconds}


def verify_sources(manifest: Manifest, per_source: np.ndarray | None) -> dict[str, int]:
    """A mixture's output: each source's real tokens in the shards (by `segment_source`)
    are the `tokens.out` its manifest entry lists. Returns {"sources": number of sources}
    ({} for an output without a source table)."""
    table = manifest.get("sources")
    if table is None:
        return {}
    if [entry.get("index") for entry in table] != list(range(len(table))):
        raise PackcliError("manifest.json: a source table not numbered 0, 1, ...")
    if per_source is None:
        if manifest["shards"] and any(entry.get("tokens", {}).get("out") for entry in table):
            raise PackcliError(f"manifest.json: lists {len(table)} sources, the shards have no {SOURCE_COLUMN} column")
        per_source = np.zeros(len(table), dtype=np.int64)
    for entry, value in zip(table, per_source.tolist()):
        listed = entry.get("tokens", {}).get("out")
        if listed is not None and listed != value:
            raise PackcliError(
                f"manifest.json: source {entry['index']} ({entry.get('name')!r}) lists {listed:,} tokens out, "
                f"its segments in the shards hold {value:,} real tokens"
            )
    return {"sources": len(table)}


def output_rules(manifest: Manifest) -> dict[str, Any]:
    """The keyword arguments of `check_rows` for the rows of a packed output, from its manifest."""
    tokenizer = manifest["tokenizer"]
    return {
        "seq_len": manifest["seq_len"],
        "pad_id": tokenizer["pad_id"],
        "vocab_size": tokenizer.get("vocab_size"),
        "labels_follow_ids": manifest.get("labels", "text") == "text",
        "pad_to_multiple_of": _pad_multiple(manifest) or None,
        "sources": len(manifest["sources"]) if "sources" in manifest else None,
    }


def _pad_multiple(manifest: Manifest) -> int:
    """The multiple of --pad-to-multiple-of (from the resolved options) when the output has
    cu_seqlens_unpadded (format 3); 0 otherwise."""
    if "cu_seqlens_unpadded" not in manifest.get("columns", {}):
        return 0
    return int(manifest.get("options", {}).get("pad_to_multiple_of") or 1)


def _check_shards(out_dir: Path, manifest: Manifest) -> tuple[dict[str, int], int, np.ndarray | None]:
    """(rows, sequences, real tokens summed over the shards, their bytes, real tokens per
    segment_source value or None), each shard checked against its manifest entry.

    Shards are hashed and checked as separate tasks, a few shards ahead, one thread per
    core (sha256, numba and pyarrow all release the GIL); results are taken in manifest
    order, so the error reported is the first one in that order whatever finishes first."""
    shards, fmt, rules = manifest["shards"], manifest["format"], output_rules(manifest)
    rules["max_seqlen_column"] = "max_seqlen" in manifest.get("columns", {})
    rules["segment_columns"] = segment_columns_of(manifest)
    totals = {"rows": 0, "sequences": 0, "real_tokens": 0}
    per_source: np.ndarray | None = None
    pairs: list[tuple[str, list[tuple[np.ndarray, np.ndarray]]]] = []
    size = 0
    workers = max(1, os.cpu_count() or 1)
    stop = threading.Event()
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="packcli-verify")
    tasks: dict[int, tuple[Future[tuple[str | None, int]], Future[dict[str, Any]]]] = {}

    def submit(index: int) -> None:
        path = out_dir / shards[index]["path"]
        if index not in tasks and path.exists():
            tasks[index] = (
                pool.submit(_sha256, path, stop),
                pool.submit(_check_shard, path, fmt, shards[index]["path"], rules, stop),
            )

    try:
        for index, shard in enumerate(shards):
            for ahead in range(index, min(index + workers, len(shards))):
                submit(ahead)
            if index not in tasks:
                raise PackcliError(f"{shard['path']}: listed in the manifest but missing")
            hashing, checking = tasks.pop(index)
            digest, shard_bytes = hashing.result()
            if digest != shard["checksum"]:  # the root cause when rows are damaged too
                missing = missing_npy_files(out_dir / shard["path"], manifest)
                if missing:
                    raise PackcliError(f"{shard['path']}: {', '.join(missing)} missing (removed since it was written)")
                raise PackcliError(f"{shard['path']}: checksum does not match the manifest (file altered or truncated)")
            counted = checking.result()
            _add_counts(totals, shard, counted)
            per_source = _sum_sources(per_source, counted["sources"])
            pairs.append((shard["path"], counted["pairs"]))
            size += shard_bytes
    finally:
        stop.set()
        pool.shutdown(wait=False, cancel_futures=True)
    verify_pairs(manifest, pairs)
    return totals, size, per_source


def verify_pairs(manifest: Manifest, found: list[tuple[str, list[tuple[np.ndarray, np.ndarray]]]]) -> None:
    """Preference pairs: the shards hold pairs 0 to the manifest's `pairs` - 1, each once.
    `found`: per shard (its path), each block's pair indices and their rows."""
    listed = manifest.get("pairs")
    blocks = [(path, pair, row) for path, parts in found for pair, row in parts]
    if listed is None:
        if blocks:
            raise PackcliError(f"manifest.json: lists no pairs, the shards have a {PAIR_COLUMN} column")
        return
    seen = np.zeros(listed, dtype=np.int64)
    for path, pair, row in blocks:
        outside = np.flatnonzero(pair >= listed)
        if len(outside):
            k = int(outside[0])
            raise PackcliError(
                f"{path} row {int(row[k])}: pair {int(pair[k])} is not one of the manifest's {listed:,} pairs"
            )
        np.add.at(seen, pair, 1)
        twice = np.flatnonzero(seen[pair] > 1)
        if len(twice):
            k = int(twice[0])
            raise PackcliError(f"{path} row {int(row[k])}: pair {int(pair[k])} is in the output twice")
    missing = np.flatnonzero(seen == 0)
    if len(missing):
        raise PackcliError(f"manifest.json: lists {listed:,} pairs, pair {int(missing[0])} is in no row")


def _sum_sources(total: np.ndarray | None, more: np.ndarray | None) -> np.ndarray | None:
    """Real tokens per source, summed (either may be None: no segment_source column, or no rows)."""
    if more is None or total is None:
        return more if total is None else total
    n = max(len(total), len(more))
    out = np.zeros(n, dtype=np.int64)
    out[: len(total)] += total
    out[: len(more)] += more
    return out


def segment_columns_of(manifest: Manifest) -> tuple[str, ...]:
    """The per-segment columns the manifest lists (format 5), which every shard holds."""
    return tuple(name for name in manifest.get("columns", {}) if is_segment_column(name))


def missing_npy_files(path: Path, manifest: Manifest) -> list[str]:
    """The files an npy shard directory should hold and does not (none for a Parquet shard)."""
    if not path.is_dir():
        return []
    columns = manifest.get("columns", {})
    expected = npy_shard_files(
        "cu_seqlens_unpadded" in columns,
        manifest.get("groups") is not None,
        "max_seqlen" in columns,
        segment_columns_of(manifest),
    )
    return [name for name in expected if not (path / name).is_file()]


def _add_counts(totals: dict[str, int], shard: ShardEntry, counted: dict[str, Any]) -> None:
    """Add one shard's counts to the totals, once they equal its manifest entry."""
    for key, listed in (
        ("rows", shard["rows"]),
        ("sequences", shard["sequences"]),
        ("real_tokens", shard["real_tokens"]),
    ):
        value = counted[key]
        if value != listed:
            raise PackcliError(f"{shard['path']}: has {value:,} {key.replace('_', ' ')}, the manifest says {listed:,}")
        totals[key] += value


def _sha256(path: Path, stop: threading.Event) -> tuple[str | None, int]:
    """The manifest's checksum of a shard file or npy directory, and its size in bytes.

    The same definition as the writer's (format.md), computed here on purpose: verify
    trusts nothing of the code that wrote the shards."""
    if not path.exists():
        return None, 0
    digest = hashlib.sha256()
    files = [path] if path.is_file() else sorted(p for p in path.iterdir() if p.is_file())
    buffer = bytearray(HASH_CHUNK)
    view = memoryview(buffer)
    size = 0
    for file in files:
        if path.is_dir():
            digest.update(file.name.encode() + b"\0")
        with open(file, "rb", buffering=0) as f:
            while (got := f.readinto(buffer)) and not stop.is_set():
                digest.update(view[:got])
                size += got
    return "sha256:" + digest.hexdigest(), size


def _check_shard(path: Path, fmt: str, name: str, options: dict, stop: threading.Event | None = None) -> dict:
    """Rows, sequences and real tokens of one shard (and real tokens per segment_source
    value, or None), checking every row on the way. `options`: output_rules, whether the
    shards hold a max_seqlen column, and the per-segment columns the manifest lists."""
    counted: dict[str, Any] = {"rows": 0, "sequences": 0, "real_tokens": 0, "sources": None, "pairs": []}
    options = dict(options)
    has_max, multiple = options.pop("max_seqlen_column", False), options.pop("pad_to_multiple_of", None) or 0
    sources, listed = options.pop("sources", None), options.pop("segment_columns", ())
    seq_len = options["seq_len"]
    block_rows = max(1, BLOCK_TOKENS // seq_len)
    for block, extra, segments in _shard_blocks(path, fmt, seq_len, block_rows):
        if stop is not None and stop.is_set():
            break
        missing = [column for column in listed if segments is None or column not in segments[1]]
        if missing:
            raise PackcliError(f"{name}: no {', '.join(missing)} column, but the manifest lists it")
        where, first = f"{name} row", counted["rows"]
        sequences, real, figures = _check_block(
            block, extra, options, has_max, multiple, where, first, segments, sources
        )
        counted["rows"] += len(block[0])
        counted["sequences"] += sequences
        counted["real_tokens"] += real
        counted["sources"] = _sum_sources(counted["sources"], figures.per_source)
        if figures.pairs is not None:
            pair, row = figures.pairs
            counted["pairs"].append((pair, row + first))
    return counted


def _shard_blocks(path: Path, fmt: str, seq_len: int, block_rows: int) -> Iterator[tuple[tuple, tuple, Segments]]:
    """((ids, labels, positions, cu, offsets, num_segments), (max_seqlen, cu_seqlens_unpadded),
    the per-segment columns) per block of rows; an extra column a shard lacks is None, the
    per-segment columns None for a shard without them."""
    if fmt == "npy":
        arrays = _npy_shard_maps(path, seq_len)
        n = len(arrays["input_ids"])
        offsets = arrays["cu_seqlens_offsets"]
        seg_offsets, columns = npy_segment_maps(path, n)
        for start in range(0, n, block_rows):
            stop = min(start + block_rows, n)
            lo, hi = offsets[start], offsets[stop]
            segments = None
            if seg_offsets is not None:
                seg = np.asarray(seg_offsets[start : stop + 1], dtype=np.int64)
                segments = (seg, {name: values[seg[0] : seg[-1]] for name, values in columns.items()})
            yield (
                (
                    arrays["input_ids"][start:stop],
                    arrays["labels"][start:stop],
                    arrays["position_ids"][start:stop],
                    arrays["cu_seqlens"][lo:hi],
                    offsets[start : stop + 1],
                    arrays["num_segments"][start:stop],
                ),
                (
                    arrays["max_seqlen"][start:stop] if "max_seqlen" in arrays else None,
                    arrays["cu_seqlens_unpadded"][lo:hi] if "cu_seqlens_unpadded" in arrays else None,
                ),
                segments,
            )
        return
    pages = ShardPages.of(path)  # without pyarrow's list decoding, most of its read
    names = _parquet_columns(path) if pages is None else pages.columns
    for rows in read_shard(path, fmt, seq_len, block_rows=block_rows) if pages is None else pages.rows(seq_len):
        block = (rows.input_ids, rows.labels, rows.position_ids, rows.cu_seqlens, rows.cu_offsets, rows.num_segments)
        segments = (rows.seg_offsets, rows.segment_columns) if rows.segment_columns else None
        yield block, (rows.max_seqlen if "max_seqlen" in names else None, rows.cu_seqlens_unpadded), segments


def _parquet_columns(path: Path) -> list[str]:
    """The columns a Parquet shard holds (readers compute max_seqlen where it is missing)."""
    try:
        return list(pq.read_schema(str(path)).names)
    except Exception:
        return []  # read_shard names the damage


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


def _npy_shard_maps(path: Path, seq_len: int) -> dict:
    """Memory maps of an npy shard: the kernel streams through them, nothing is copied."""
    missing = [name for name in NPY_FILES if not (path / name).is_file()]
    if missing:
        raise PackcliError(f"{path.name}: missing file(s) {', '.join(missing)}")
    try:
        names = [*NPY_FILES, *(name for name in OPTIONAL_NPY_FILES if (path / name).is_file())]
        arrays = {name[:-4]: map_npy(path / name) for name in names}
    except Exception as exc:
        raise PackcliError(
            f"{path.name}: cannot read shard ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})"
        ) from exc
    n = len(arrays["input_ids"])
    for name in ("input_ids", "labels", "position_ids"):
        if arrays[name].shape != (n, seq_len):
            raise PackcliError(f"{path.name}: {name}.npy has shape {arrays[name].shape}, expected ({n}, {seq_len})")
    offsets = arrays["cu_seqlens_offsets"]
    if (
        len(offsets) != n + 1
        or len(arrays["num_segments"]) != n
        or offsets[0] != 0
        or offsets[-1] != len(arrays["cu_seqlens"])
    ):
        raise PackcliError(f"{path.name}: cu_seqlens_offsets, num_segments and cu_seqlens do not match {n} rows")
    return arrays


# ------------------------------------------------------------------------------ --group-by


def verify_groups(out_dir: Path | str, manifest: Manifest) -> dict[str, int]:
    """A --group-by output: every row's group is in the manifest's table, each group's rows,
    sequences and real tokens are what the table says, and the tokens of each group's rows
    hash to what was read for that group (`token_hash`), which a row mixing groups breaks.
    Returns {"groups": number of groups} ({} for an output without --group-by)."""
    if manifest.get("group_by") is None:
        return {}
    table = manifest.get("groups")
    if not isinstance(table, list) or [entry.get("id") for entry in table] != list(range(len(table))):
        raise PackcliError("manifest.json: --group-by output without a group table numbered 0, 1, ...")
    counted = np.zeros((len(table), 3), dtype=np.int64)
    hashes = np.zeros(len(table), dtype=np.uint64)
    for shard in manifest["shards"]:
        _group_shard(Path(out_dir) / shard["path"], manifest, shard["path"], counted, hashes)
    for entry, (rows, sequences, real) in zip(table, counted.tolist()):
        for key, value in (("rows", rows), ("sequences", sequences), ("real_tokens", real)):
            if entry.get(key) != value:
                raise PackcliError(
                    f"manifest.json: group {entry['id']} ({entry.get('value')!r}) lists {entry.get(key)} "
                    f"{key.replace('_', ' ')}, its rows in the shards hold {value:,}"
                )
        listed = entry.get("token_hash")
        if listed is not None and listed != f"{int(hashes[entry['id']]):016x}":
            raise PackcliError(
                f"group {entry['id']} ({entry.get('value')!r}): the tokens of its rows are not the tokens read for "
                "it (a row mixes groups, or tokens were altered)"
            )
    return {"groups": len(table)}


def _group_shard(path: Path, manifest: Manifest, name: str, counted: np.ndarray, hashes: np.ndarray) -> None:
    """Add one shard's rows to the per-group counts and token hashes."""
    fmt, seq_len = manifest["format"], manifest["seq_len"]
    first_row = 0
    for rows, group in zip(read_shard(path, fmt, seq_len), read_group_column(path, fmt), strict=False):
        if len(group) != len(rows):
            raise PackcliError(f"{name}: the group column has {len(group):,} rows where the shard has {len(rows):,}")
        bad = (group < 0) | (group >= len(counted))
        if bad.any():
            row = int(np.argmax(bad))
            raise PackcliError(f"{name} row {first_row + row}: group {int(group[row])} is not in the manifest's table")
        real = rows.real_lengths()
        counted += group_counts(group, rows.num_segments, real, len(counted))
        row_token_hashes(
            rows.input_ids,
            rows.cu_seqlens,
            rows.cu_offsets,
            rows.num_segments,
            group,
            hashes,
            rows.cu_seqlens_unpadded,
        )
        first_row += len(rows)
