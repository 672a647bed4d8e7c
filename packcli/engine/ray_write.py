"""`--engine ray`'s tasks that sort and write, steps 2 and 3 of ray_tasks.py: a part copied
into length order for a plan from the histogram (`sort_part`), the parts read as one token
stream or as one sorted copy (PartedSpill, PartedSortedCopy), and one task per shard that
gathers its rows from them, writes the shard and records it in the ledger (`write_shard`).

As for every task, each name derives from a part or shard index, never from a task id, so
a task that Ray retries rewrites the same names with the same bytes.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from packcli.core import storage
from packcli.core.flow import prefetch
from packcli.engine.ray_tasks import maybe_fail, record_attempt
from packcli.plan.buckets import BucketParts, Buckets
from packcli.plan.contract import Plan, RowOrder
from packcli.plan.grouping import group_counts
from packcli.plan.patterns import PatternPlan
from packcli.write import outdir
from packcli.write.by_length import SORTED_LEARNED_FILE, SORTED_TOKENS_FILE, SortedCopy, sort_spill
from packcli.write.columns import shard_name
from packcli.write.gather import BlockReader, PieceTags, gather_rows
from packcli.write.report import RowStats
from packcli.write.shards import ShardInfo, ShardWriter
from packcli.write.spill import HISTOGRAM_FILE, Block, Spill

LEDGER_DIR = "ledger"
SORTED_COMPLETE_FILE = "by_length.json"  # in a part: its sorted copy is complete (written last)


@dataclass(frozen=True)
class ShardJob:
    """What every shard task shares (shipped once through the object store)."""

    part_dirs: list[str]
    part_tokens: list[int]
    plan: Plan
    order: RowOrder  # plan.row_order(), computed once on the driver
    fmt: str
    seq_len: int
    rows_per_shard: int
    vocab_size: int | None
    pad_id: int
    output: str  # a local directory or a URL
    ledger: str
    multiple: int = 1  # --pad-to-multiple-of
    part_counts: np.ndarray | None = None  # a plan from the histogram: sequences per part and bucket
    tags: PieceTags | None = None  # the rows' per-segment columns (pairs, weights)


def warm_writer(token_dtype: str) -> None:
    """The row kernels loaded (Numba, from its cache) while the driver plans, for the
    spill's token type: the shard tasks start on rows at once."""
    from packcli.plan.rows import fill_rows

    one = np.zeros(1, dtype=np.int64)
    fill_rows(np.zeros(1, dtype=token_dtype), one, None, one, np.ones(1, dtype=np.int64), one, one, 1, 2, 0)


# ----------------------------------------------------------------------------- the spill parts as one


class PartedSpill:
    """The parts as one token stream, in part order: a piece never crosses two parts
    (a segment is spilled whole into one part), so each is read from its own part."""

    def __init__(self, part_dirs: list[str], part_tokens: list[int]):
        self.parts = [Spill.open(Path(d)) for d in part_dirs]
        self.first_token = np.concatenate([[0], np.cumsum(part_tokens)]).astype(np.int64)

    def read_block(self, starts: np.ndarray, lengths: np.ndarray) -> Block:
        part_of = np.searchsorted(self.first_token, starts, side="right") - 1
        dtype = self.parts[0].token_dtype if self.parts else np.dtype(np.uint32)
        return read_parts(self.parts, part_of, starts - self.first_token[part_of], lengths, dtype)

    def close(self) -> None:
        for part in self.parts:
            part.close()


class PartedSortedCopy:
    """The parts' sorted copies as one: the sorted copy the local engine makes of its spill
    (the plan's `buckets`), made of the parts' copies without being written.

    Bucket b of the whole holds the sequences of placed length L = buckets.length[b] of
    part 0 (in input order), then of part 1, and so on (`part_counts[p, b]` of each), which
    is the input order; so rank r of bucket b is local rank r - (part p's first rank in b)
    in part p's copy, where it starts at the part's own bucket start + that rank * L. The
    copies are joined end to end: `placing` gives a plan its slots in that coordinate,
    and a block is read from each part it reaches."""

    def __init__(self, part_dirs: list[str], buckets: Buckets, part_counts: np.ndarray):
        self.part_dirs, self.buckets = part_dirs, buckets
        counts = np.asarray(part_counts, dtype=np.int64).reshape(len(part_dirs), len(buckets.key))
        self.counts = counts
        self.where = BucketParts.end_to_end(buckets, counts)  # the copies joined
        part_size = counts @ buckets.length
        self.part_start = np.cumsum(part_size) - part_size  # each copy's first token, joined
        self.parts: dict[int, SortedCopy] = {}
        self.token_dtype: np.dtype | None = None

    def placing(self, plan: PatternPlan) -> PatternPlan:
        """The plan with its slots placed in the joined copies, where `read_block` reads."""
        return plan.in_parts(self.where)

    def locate(self, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(part, start in the part's copy) of pieces that start at `starts` in the joined copies
        (a piece lies in one part; empty parts before it share its start and are passed over)."""
        part = np.searchsorted(self.part_start, starts, side="right") - 1
        return part, starts - self.part_start[part]

    def _part(self, index: int) -> SortedCopy:
        if index not in self.parts:
            spill = Spill.open(Path(self.part_dirs[index]))
            own = np.zeros(int(self.buckets.length.max(initial=0)) + 1, dtype=np.int64)
            own[self.buckets.length] = self.counts[index]  # the part's histogram
            self.parts[index] = SortedCopy.open(spill, Buckets.from_histograms([own], len(own) - 1))
            self.token_dtype = spill.token_dtype
        return self.parts[index]

    def read_block(self, starts: np.ndarray, lengths: np.ndarray) -> Block:
        part_of, local = self.locate(np.asarray(starts, dtype=np.int64))
        readers = {int(p): self._part(int(p)) for p in np.unique(part_of).tolist()}
        dtype = self.token_dtype if self.token_dtype is not None else np.dtype(np.uint32)
        return read_parts(readers, part_of, local, lengths, dtype)

    def close(self) -> None:
        parts, self.parts = self.parts, {}
        for part in parts.values():
            part.close()


def read_parts(
    readers: Sequence[BlockReader] | Mapping[int, BlockReader],
    part_of: np.ndarray,
    starts: np.ndarray,
    lengths: np.ndarray,
    dtype: np.dtype,
) -> Block:
    """A block of pieces read each from its part (`readers[part]`, in the part's own
    coordinates `starts`), joined in piece order: one read per part, no loop per piece."""
    if len(part_of) and part_of.min() == part_of.max():  # one part has them all: no joining copy
        block: Block = readers[int(part_of[0])].read_block(starts, lengths)
        return block
    token_at = np.empty(len(starts), dtype=np.int64)
    bit_at = np.empty(len(starts), dtype=np.int64)
    tokens, bits, token_base, byte_base = [], [], 0, 0
    for part in np.unique(part_of).tolist():
        pick = np.flatnonzero(part_of == part)
        block = readers[part].read_block(starts[pick], lengths[pick])
        token_at[pick] = block.token_at + token_base
        bit_at[pick] = block.bit_at + byte_base * 8
        tokens.append(block.tokens)
        token_base += len(block.tokens)
        if block.learned is not None:
            bits.append(block.learned)
            byte_base += len(block.learned)
    joined = np.concatenate(tokens) if tokens else np.zeros(0, dtype=dtype)
    learned = np.concatenate(bits) if bits else None
    return Block(joined, token_at, learned, bit_at)


# ----------------------------------------------------------------------------- sorted copies


def part_histogram(part_dir: Path, seq_len: int) -> np.ndarray:
    """A part's sequences per length 0..seq_len (lengths within seq_len: a plan from the
    histogram)."""
    saved = np.load(Path(part_dir) / HISTOGRAM_FILE)
    counts = np.zeros(seq_len + 1, dtype=np.int64)
    counts[: len(saved)] = saved
    return counts


def sort_part(part_dir: str, spill_dir: str, index: int, seq_len: int) -> None:
    """A part copied into length order (write/by_length.py, its own histogram's buckets),
    for a plan from the histogram; complete once SORTED_COMPLETE_FILE is written (after
    the copy is fsynced): a retry or a resumed driver finds either a whole copy or none."""
    record_attempt(spill_dir, "sort", index)
    directory = Path(part_dir)
    (directory / SORTED_COMPLETE_FILE).unlink(missing_ok=True)
    spill = Spill.open(directory)
    try:
        buckets = Buckets.from_histograms([part_histogram(directory, seq_len)], seq_len)
        sort_spill(spill, buckets, seq_len, 1, durable=True, threads=1).close()
    finally:
        spill.close()
    maybe_fail("sort", index)
    outdir.write_json_atomic(directory / SORTED_COMPLETE_FILE, {"tokens": int(buckets.token[-1])})


def sorted_complete(part_dir: Path, meta: dict[str, Any]) -> bool:
    """Whether a part's sorted copy is complete: its record written, for all of its tokens."""
    try:
        record = json.loads((Path(part_dir) / SORTED_COMPLETE_FILE).read_text(encoding="utf-8"))
        tokens = int(meta["tokens"])
        sizes = [(SORTED_TOKENS_FILE, tokens * np.dtype(meta["token_dtype"]).itemsize)]
        if meta["masked"]:
            sizes.append((SORTED_LEARNED_FILE, tokens))
        return record.get("tokens") == tokens and all((Path(part_dir) / n).stat().st_size == b for n, b in sizes)
    except (OSError, ValueError, KeyError):
        return False


# ----------------------------------------------------------------------------- shards


def write_shard(job: ShardJob, index: int, spill_dir: str) -> dict[str, Any]:
    """Shard `index`: its rows gathered and written whole under a temporary name, renamed
    (or uploaded) when complete, then recorded in the ledger. The stats always come back."""
    record_attempt(spill_dir, "shard", index)
    first = index * job.rows_per_shard
    end = min(first + job.rows_per_shard, job.plan.n_rows)
    name = shard_name(index, job.fmt)
    ledger = Path(job.ledger) / f"shard-{index:05d}.json"
    stats = RowStats(job.seq_len)
    row_group = job.plan.row_group
    recorded = _recorded(ledger, job.output, name)
    writer = None if recorded else _task_writer(job, index)
    # The writer counts the groups of the rows it writes; a shard kept from before is counted here.
    groups = (
        None
        if row_group is None or writer is not None
        else np.zeros((int(row_group.max(initial=-1)) + 1, 3), dtype=np.int64)
    )
    spill: PartedSpill | PartedSortedCopy
    plan = job.plan
    if job.part_counts is not None:
        assert isinstance(plan, PatternPlan) and plan.buckets is not None  # a plan from the histogram
        spill = PartedSortedCopy(job.part_dirs, plan.buckets, job.part_counts)
        plan = spill.placing(plan)
    else:
        spill = PartedSpill(job.part_dirs, job.part_tokens)
    gathered = gather_rows(spill, plan, job.seq_len, job.pad_id, first, job.multiple, end, job.order, tags=job.tags)
    # As in the local engine: rows are built on a thread while the block before them is
    # written here (the row kernel and pyarrow's compression both run without the GIL).
    built = prefetch(gathered, depth=1) if writer is not None else gathered
    try:
        at = first
        for n, rows in enumerate(built):
            stats.add(rows)
            group = None if row_group is None else row_group[at : at + len(rows)]
            at += len(rows)
            if groups is not None and group is not None:
                groups += group_counts(group, rows.num_segments, rows.real_lengths(), len(groups))
            if writer is not None:
                writer.add(rows, group)
                if n == 0:
                    maybe_fail("shard", index)
    finally:
        getattr(built, "close", lambda: None)()  # the thread stops before the parts close
        spill.close()
    info = recorded or _publish(job, writer, index, name, ledger)
    if writer is not None and row_group is not None:
        groups = writer.group_counts
    histograms = {k: v.tolist() for k, v in stats.histograms().items()}
    return {"info": info, "stats": histograms, "labels": stats.label_tokens, "groups": _listed(groups)}


def _listed(counts: np.ndarray | None) -> list[list[int]] | None:
    """Per group: rows, sequences and real tokens of a shard (--group-by), as plain lists."""
    return None if counts is None else counts.tolist()


def _recorded(ledger: Path, output: str, name: str) -> dict[str, Any] | None:
    """The ledger's entry for a shard that is in place already (a resumed run)."""
    if not ledger.is_file():
        return None
    if not storage.exists(f"{output.rstrip('/')}/{name}"):
        return None
    entry: dict[str, Any] = json.loads(ledger.read_text(encoding="utf-8"))
    return entry


def _task_dir(job: ShardJob, index: int) -> Path:
    """Where a task builds its shard: next to the output, or in this node's temporary
    directory for a remote output. Emptied first: a killed attempt may have left a part."""
    base = Path(tempfile.gettempdir()) if storage.is_remote(job.output) else Path(job.output)
    where = base / f".shard-{index:05d}.task"
    shutil.rmtree(where, ignore_errors=True)
    where.mkdir(parents=True)
    return where


def _task_writer(job: ShardJob, index: int) -> ShardWriter:
    grouped = job.plan.row_group is not None
    return ShardWriter(_task_dir(job, index), job.fmt, job.seq_len, job.rows_per_shard, job.vocab_size, grouped=grouped)


def _publish(job: ShardJob, writer: ShardWriter | None, index: int, name: str, ledger: Path) -> dict[str, Any]:
    assert writer is not None  # a shard not recorded was written
    (built,) = writer.close()
    local = writer.out_dir / built.path
    if storage.is_remote(job.output):
        storage.RemoteDir(job.output).put(local, name)
    else:
        final = Path(job.output) / name
        outdir.remove_path(final)
        os.replace(local, final)
    shutil.rmtree(writer.out_dir, ignore_errors=True)
    entry = ShardInfo(name, built.rows, built.sequences, built.real_tokens, built.checksum).to_dict()
    ledger.parent.mkdir(parents=True, exist_ok=True)
    outdir.write_json_atomic(ledger, dict(entry))
    return dict(entry)


def merge_stats(seq_len: int, results: list[dict[str, Any]]) -> RowStats:
    stats = RowStats(seq_len)
    for result in results:
        stats.merge(RowStats.from_histograms(seq_len, result["stats"], result["labels"]))
    return stats


def merge_group_counts(results: list[dict[str, Any]]) -> np.ndarray:
    """The shards' per-group rows, sequences and real tokens, summed ([groups, 3])."""
    counts = [np.asarray(r["groups"], dtype=np.int64).reshape(-1, 3) for r in results if r.get("groups") is not None]
    total = np.zeros((max((len(c) for c in counts), default=0), 3), dtype=np.int64)
    for c in counts:
        total[: len(c)] += c
    return total
