"""The invariants of a packed row (SPEC section 4), checked the same way everywhere.

`check_rows` is the one checker: `packcli verify` runs it on every shard and the tests
run it on every output they produce. It is written independently of the code that
builds rows (it rebuilds what each row must look like from `cu_seqlens` alone), so a
bug in one is not mirrored in the other.
"""

from __future__ import annotations

import numpy as np

from packcli.errors import PackcliError
from packcli.rows import IGNORE_INDEX, Rows

CHECK_BLOCK_ROWS = 2048


def check_rows(
    rows: Rows,
    *,
    seq_len: int,
    pad_id: int,
    vocab_size: int | None = None,
    labels_follow_ids: bool = True,
    where: str = "row",
    first_row: int = 0,
) -> None:
    """Raise PackcliError naming the first bad row and what is wrong with it.

    labels_follow_ids: plain text, where every label not masked by a boundary or padding
    must equal its input id (in SFT data prompt tokens are masked too, so only
    "label is the id or -100" can be checked).
    """
    for start in range(0, len(rows), CHECK_BLOCK_ROWS):
        block = rows.slice(start, min(start + CHECK_BLOCK_ROWS, len(rows)))
        problem = _first_problem(block, seq_len, pad_id, vocab_size, labels_follow_ids)
        if problem is not None:
            index, message = problem
            raise PackcliError(f"{where} {first_row + start + index}: {message}")


def _first_problem(rows: Rows, seq_len, pad_id, vocab_size, labels_follow_ids):
    n = len(rows)
    for name in ("input_ids", "labels", "position_ids"):
        shape = getattr(rows, name).shape
        if shape != (n, seq_len):
            return 0, f"{name} has shape {shape}, expected ({n}, {seq_len})"
    offsets, cu = rows.cu_offsets.astype(np.int64), rows.cu_seqlens.astype(np.int64)
    if len(offsets) != n + 1 or offsets[0] != 0 or offsets[-1] != len(cu):
        return 0, "cu_seqlens offsets do not match the number of rows"
    counts = np.diff(offsets)
    if (counts < 2).any():
        return _first(counts < 2), "cu_seqlens has fewer than 2 entries"
    row_of_entry = np.repeat(np.arange(n), counts)
    is_first = np.zeros(len(cu), dtype=bool)
    is_first[offsets[:-1]] = True
    is_last = np.zeros(len(cu), dtype=bool)
    is_last[offsets[1:] - 1] = True
    if (cu[is_first] != 0).any():
        return _first(cu[is_first] != 0), "cu_seqlens does not start at 0"
    if (cu[is_last] != seq_len).any():
        bad = _first(cu[is_last] != seq_len)
        return bad, f"cu_seqlens ends at {cu[is_last][bad]}, not at seq_len {seq_len}"
    steps = np.diff(cu)
    within_row = ~is_last[:-1]
    not_increasing = within_row & (steps <= 0)
    if not_increasing.any():
        return int(row_of_entry[np.argmax(not_increasing)]), "cu_seqlens is not strictly increasing"

    # What every row must look like, rebuilt from cu_seqlens alone.
    starts = np.zeros((n, seq_len), dtype=bool)
    starts[row_of_entry[~is_last], cu[~is_last]] = True
    column = np.arange(seq_len)
    segment_start = np.maximum.accumulate(np.where(starts, column, 0), axis=1)
    expected_positions = column - segment_start

    segments = counts - 1
    extra = segments - rows.num_segments.astype(np.int64)
    if ((extra != 0) & (extra != 1)).any():
        bad = _first((extra != 0) & (extra != 1))
        return bad, f"num_segments {rows.num_segments[bad]} does not fit {segments[bad]} segments in cu_seqlens"
    last_start = cu[offsets[1:] - 2]
    real_end = np.where(extra == 1, last_start, seq_len)
    is_pad = column[None, :] >= real_end[:, None]

    if (rows.position_ids != expected_positions).any():
        bad_rows = (rows.position_ids != expected_positions).any(axis=1)
        r = _first(bad_rows)
        col = _first(rows.position_ids[r] != expected_positions[r])
        return r, f"position_ids do not restart at segment starts (position {col} is {rows.position_ids[r, col]}, expected {expected_positions[r, col]})"
    ids, labels = rows.input_ids.astype(np.int64), rows.labels.astype(np.int64)
    pad_wrong = is_pad & (ids != pad_id)
    if pad_wrong.any():
        r = _first(pad_wrong.any(axis=1))
        return r, f"padding holds token {ids[r][pad_wrong[r]][0]}, not pad id {pad_id}"
    if vocab_size is not None:
        out = (ids < 0) | (ids >= vocab_size)
        if out.any():
            r = _first(out.any(axis=1))
            return r, f"token id {ids[r][out[r]][0]} outside the vocabulary (size {vocab_size})"
    must_ignore = starts | is_pad
    not_ignored = must_ignore & (labels != IGNORE_INDEX)
    if not_ignored.any():
        r = _first(not_ignored.any(axis=1))
        col = _first(not_ignored[r])
        what = "padding" if is_pad[r, col] else "the first token of a segment"
        return r, f"label at position {col} ({what}) is {labels[r, col]}, expected -100"
    if labels_follow_ids:
        wrong = ~must_ignore & (labels != ids)
    else:
        wrong = ~must_ignore & (labels != ids) & (labels != IGNORE_INDEX)
    if wrong.any():
        r = _first(wrong.any(axis=1))
        col = _first(wrong[r])
        return r, f"label at position {col} is {labels[r, col]}, input id is {ids[r, col]}"
    return None


def _first(mask) -> int:
    return int(np.argmax(mask))



def verify_dir(out_dir) -> dict:
    """Every shard against the manifest (rows, checksums, totals) and every row invariant."""
    import time
    from pathlib import Path

    from packcli.shards import checksum, load_manifest, read_shard

    started = time.perf_counter()
    out_dir = Path(out_dir)
    manifest = load_manifest(out_dir)
    seq_len, fmt = manifest["seq_len"], manifest["format"]
    tokenizer = manifest["tokenizer"]
    listed = {shard["path"] for shard in manifest["shards"]}
    strays = sorted(p.name for p in out_dir.glob("shard-*") if p.name not in listed)
    if strays:
        raise PackcliError(f"{strays[0]}: shard file not listed in the manifest")
    totals = {"rows": 0, "sequences": 0, "real_tokens": 0}
    size = 0
    for shard in manifest["shards"]:
        name = shard["path"]
        path = out_dir / name
        if not path.exists():
            raise PackcliError(f"{name}: listed in the manifest but missing")
        if checksum(path) != shard["checksum"]:
            raise PackcliError(f"{name}: checksum does not match the manifest (file altered or truncated)")
        size += path.stat().st_size if path.is_file() else sum(p.stat().st_size for p in path.iterdir())
        counted = {"rows": 0, "sequences": 0, "real_tokens": 0}
        for rows in read_shard(path, fmt, seq_len):
            check_rows(
                rows,
                seq_len=seq_len,
                pad_id=tokenizer["pad_id"],
                vocab_size=tokenizer.get("vocab_size"),
                labels_follow_ids=manifest.get("labels", "text") == "text",
                where=f"{name} row",
                first_row=counted["rows"],
            )
            counted["rows"] += len(rows)
            counted["sequences"] += int(rows.num_segments.sum())
            counted["real_tokens"] += int(rows.real_lengths().sum())
        for key, value in counted.items():
            if value != shard[key]:
                raise PackcliError(f"{name}: has {value:,} {key.replace('_', ' ')}, the manifest says {shard[key]:,}")
            totals[key] += value
    for key, value in manifest.get("totals", {}).items():
        if totals.get(key) != value:
            raise PackcliError(f"manifest.json: totals say {value:,} {key.replace('_', ' ')}, the shards hold {totals.get(key):,}")
    seconds = time.perf_counter() - started
    return {"shards": len(manifest["shards"]), **totals, "bytes": size, "seconds": seconds}
