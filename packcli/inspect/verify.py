"""`packcli verify`: a packed output checked whole, against its manifest.

`verify_dir` checks each shard's checksum and every row of it (row_checks.py's invariants,
segment_checks.py's per-segment columns), then holds what the shards add up to against the
manifest: each shard's rows, sequences and real tokens, the totals, each source's tokens
(`verify_sources`), each preference pair once (`verify_pairs`), each --group-by group's
counts and token hash (`verify_groups`). `output_rules` gives `check_rows` the rules of an
output's rows; `check_rows` is importable from here too.

Speed: `verify_dir` hashes shards on worker threads while others check rows (both
release the GIL), since sha256 is most of the cost.
"""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from packcli.core.errors import PackcliError
from packcli.core.storage import MANIFEST_FILE
from packcli.inspect.row_checks import check_rows
from packcli.inspect.segment_checks import sum_sources
from packcli.inspect.shard_checks import check_shard, shard_checksum
from packcli.plan.grouping import group_counts, row_token_hashes
from packcli.write.columns import SOURCE_COLUMN, is_segment_column, npy_shard_files
from packcli.write.manifest import Manifest, ShardEntry, load_manifest
from packcli.write.shard_reader import read_group_column, read_shard
from packcli.write.values import PAIR_COLUMN

__all__ = [  # its own checks, and check_rows (row_checks.py), which format.md names from here
    "check_rows",
    "missing_npy_files",
    "output_rules",
    "segment_columns_of",
    "verify_dir",
    "verify_groups",
    "verify_pairs",
    "verify_sources",
]


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
                f"{MANIFEST_FILE}: totals say {value:,} {key.replace('_', ' ')}, the shards hold {totals.get(key):,}"
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
        raise PackcliError(f"{MANIFEST_FILE}: a source table not numbered 0, 1, ...")
    if per_source is None:
        if manifest["shards"] and any(entry.get("tokens", {}).get("out") for entry in table):
            raise PackcliError(
                f"{MANIFEST_FILE}: lists {len(table)} sources, the shards have no {SOURCE_COLUMN} column"
            )
        per_source = np.zeros(len(table), dtype=np.int64)
    for entry, value in zip(table, per_source.tolist()):
        listed = entry.get("tokens", {}).get("out")
        if listed is not None and listed != value:
            raise PackcliError(
                f"{MANIFEST_FILE}: source {entry['index']} ({entry.get('name')!r}) lists {listed:,} tokens out, "
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
                pool.submit(shard_checksum, path, stop),
                pool.submit(check_shard, path, fmt, shards[index]["path"], rules, stop),
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
            per_source = sum_sources(per_source, counted["sources"])
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
            raise PackcliError(f"{MANIFEST_FILE}: lists no pairs, the shards have a {PAIR_COLUMN} column")
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
        raise PackcliError(f"{MANIFEST_FILE}: lists {listed:,} pairs, pair {int(missing[0])} is in no row")


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
        raise PackcliError(f"{MANIFEST_FILE}: --group-by output without a group table numbered 0, 1, ...")
    counted = np.zeros((len(table), 3), dtype=np.int64)
    hashes = np.zeros(len(table), dtype=np.uint64)
    for shard in manifest["shards"]:
        _group_shard(Path(out_dir) / shard["path"], manifest, shard["path"], counted, hashes)
    for entry, (rows, sequences, real) in zip(table, counted.tolist()):
        for key, value in (("rows", rows), ("sequences", sequences), ("real_tokens", real)):
            if entry.get(key) != value:
                raise PackcliError(
                    f"{MANIFEST_FILE}: group {entry['id']} ({entry.get('value')!r}) lists {entry.get(key)} "
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
