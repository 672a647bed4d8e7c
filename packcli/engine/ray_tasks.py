"""`--engine ray`: the local engine's stages as Ray Core tasks, with the same plan.

1. One task per input file reads, tokenizes and segments it into a spill part
   (`<spill>/part-NNNNN`, complete when its `complete.json` is written, as a local spill;
   with --group-by also the part's own group table and its segments' ids in it).
2. The driver plans with the call the local engine makes: where that is the plan from the
   histogram (bin mode of short sequences), from the parts' histograms added up, while
   one task per part copies the part into length order (`sort_part`, complete when its
   `by_length.json` is written); otherwise from the parts' lengths (and group ids,
   mapped to one table merged in input order), in input order. Same input, same plan.
3. One task per shard gathers its rows from the parts (from their sorted copies through
   the per-part counts of each length, PartedSortedCopy, or from the parts themselves,
   PartedSpill), writes the shard under a temporary name and renames it (or uploads it)
   when complete, then records it in the ledger; it returns the rows' statistics (and
   per-group counts) for the report.
4. The driver writes the report and the manifest.

Every name derives from a part or shard index, never from a task id, so a task that Ray
retries rewrites the same names with the same bytes. The spill must be on storage every
task sees (a local directory for a cluster on one machine, a shared mount otherwise).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from packcli.core import storage
from packcli.core.errors import PackcliError, needs_extra
from packcli.core.flow import Timer, prefetch
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
from packcli.write.spill import HISTOGRAM_FILE, Block, Spill, open_complete, remove_spill

FAULT_ENV = "PACKCLI_FAULT_DIR"  # tests: a task stage armed there exits once, mid-way
LEDGER_DIR = "ledger"
SORTED_COMPLETE_FILE = "by_length.json"  # in a part: its sorted copy is complete (written last)
ATTEMPTS_DIR = "attempts"
MAX_RETRIES = 3
_SETUP: list[tuple[Any, Any]] = []  # per worker process: (options, setup), the tokenizer and encoder loaded once


@dataclass(frozen=True)
class Part:
    """A part of the input one task reads: a file, row groups (lo, hi) of a Parquet file, or
    (start byte, end byte, first line number) of a plain JSON Lines file."""

    path: str
    section: tuple[int, ...] | None = None
    bytes: int = 0  # about how much of the input it is, for the progress bar


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


def connect(address: str | None, cpus: int | None) -> tuple[Any, bool]:
    """The ray module, connected; True when this call started the cluster (and so stops it)."""
    with needs_extra("ray", "--engine ray needs Ray"):
        import ray
    if ray.is_initialized():
        return ray, False
    try:
        if address is None:
            ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False, configure_logging=False)
        else:
            ray.init(address=address, log_to_driver=False, configure_logging=False)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        where = address or "a local cluster"
        raise PackcliError(f"cannot connect to Ray at {where} ({str(exc).splitlines()[0]})") from None
    return ray, True


def resolved(ray: Any, refs: list[Any]) -> list[Any]:
    """ray.get, with a task's PackcliError raised as itself (one line, no Ray traceback)."""
    try:
        return list(ray.get(refs))
    except ray.exceptions.RayTaskError as exc:
        cause = getattr(exc, "cause", None)
        if isinstance(cause, PackcliError):
            raise PackcliError(str(cause), usage=cause.usage) from None
        raise PackcliError(f"a Ray task failed: {str(cause or exc).splitlines()[0]}") from None


# ----------------------------------------------------------------------------- faults and attempts


def _attempt(spill_dir: str, stage: str, index: int) -> None:
    """Record this attempt (retries = attempts - tasks), and exit here when a test armed it."""
    attempts = Path(spill_dir) / ATTEMPTS_DIR
    attempts.mkdir(parents=True, exist_ok=True)
    (attempts / f"{stage}-{index:05d}-{os.getpid()}-{time.monotonic_ns()}").touch()


def maybe_fail(stage: str, index: int) -> None:
    faults = os.environ.get(FAULT_ENV)
    if not faults or not (Path(faults) / f"arm-{stage}-{index}").exists():
        return
    fired = Path(faults) / f"fired-{stage}-{index}"
    if not fired.exists():
        fired.touch()
        os._exit(1)  # a worker killed mid-task: Ray retries the task


def remove_attempts(spill_dir: Path) -> None:
    shutil.rmtree(spill_dir / ATTEMPTS_DIR, ignore_errors=True)


def input_size(path: str) -> int:
    try:
        return storage.size(path)
    except (OSError, PackcliError):
        return 0


def split_inputs(paths: list[str], part_bytes: int) -> list[Part]:
    """Files in order; a file over `part_bytes` cut into parts of about that size: a Parquet
    file by runs of row groups, a plain JSON Lines file at line starts. Decided from the
    files alone, so a resumed run finds the same parts."""
    parts = []
    for path in paths:
        size = input_size(path)
        lowered = path.lower()
        if size > part_bytes and lowered.endswith(".parquet"):
            parts.extend(_parquet_parts(path, size, part_bytes))
        elif size > part_bytes and lowered.endswith(".jsonl"):
            parts.extend(_jsonl_parts(path, size, part_bytes))
        else:
            parts.append(Part(path, None, size))
    return parts


def _parquet_parts(path: str, size: int, part_bytes: int) -> list[Part]:
    groups = _parquet_groups(path)
    if len(groups) < 2:
        return [Part(path, None, size)]
    parts, total, lo, held = [], sum(groups), 0, 0
    for index, group_bytes in enumerate(groups):
        held += group_bytes
        if held >= part_bytes or index == len(groups) - 1:
            parts.append(Part(path, (lo, index + 1), size * held // max(1, total)))
            lo, held = index + 1, 0
    return parts


def _jsonl_parts(path: str, size: int, part_bytes: int) -> list[Part]:
    """One pass over the file: a part ends at the first line end past each multiple of
    `part_bytes`; the lines before each start are counted, so messages keep file:line."""
    bounds, want, position, line = [(0, 1)], part_bytes, 0, 1
    with storage.open_input(path) as f:
        while data := f.read(1 << 24):
            at = max(0, want - position)
            while at < len(data) and (end := data.find(b"\n", at)) >= 0:
                bounds.append((position + end + 1, line + data.count(b"\n", 0, end + 1)))
                want = position + end + 1 + part_bytes
                at = want - position
            line += data.count(b"\n")
            position += len(data)
    starts = [(at, first_line) for at, first_line in bounds if at < size]
    ends = [at for at, _ in starts[1:]] + [size]
    return [Part(path, (start, end, first), end - start) for (start, first), end in zip(starts, ends)]


def _parquet_groups(path: str) -> list[int]:
    """Uncompressed bytes of each row group; none when the file cannot be read (the task
    that reads it then fails with the reader's own message)."""
    import pyarrow.parquet as pq

    try:
        with storage.open_input(path) as f:
            meta = pq.ParquetFile(f).metadata
            return [meta.row_group(i).total_byte_size for i in range(meta.num_row_groups)]
    except Exception:
        return []


def count_attempts(spill_dir: Path) -> int:
    attempts = spill_dir / ATTEMPTS_DIR
    return sum(1 for _ in attempts.iterdir()) if attempts.is_dir() else 0


# ----------------------------------------------------------------------------- spill parts


def worker_setup(opts: Any, fingerprint: str | None) -> Any:
    """This worker's tokenizer, special ids and encoder for these options, loaded once per
    process: kept while the options and the tokenizer's fingerprint stay the same and its
    encoder is the backend asked for (None: any; the driver then chooses)."""
    from packcli.engine.ingest import use_workers
    from packcli.tokenize.setup import setup_tokens

    opts = replace(opts, workers=1)
    use_workers(1)
    key = replace(opts, inputs=[], output="", tokenizer_backend="auto", overwrite=False, resume=False, tmp_dir=None)
    if _SETUP:
        held, setup = _SETUP[0]
        same = held == key and (fingerprint is None or setup.fingerprint == fingerprint)
        if same and opts.tokenizer_backend in ("auto", setup.backend):
            return setup
    _SETUP.clear()
    setup = setup_tokens(opts)
    _SETUP.append((key, setup))
    return setup


def warm_reader(opts: Any) -> None:
    """A worker's start-up done ahead of its first part, while the driver loads its own
    tokenizer: the modules, the tokenizer and the encoder. A failure here is left to the
    part tasks, which report it with the input it concerns."""
    try:
        from packcli.engine import job  # noqa: F401  (what a part task imports)
        from packcli.tokenize.setup import choose_backend

        setup = worker_setup(opts, None)
        if setup.encoder is None:
            choose_backend(replace(opts, workers=1), setup, None, threads=1)
    except Exception:
        pass


def warm_writer(token_dtype: str) -> None:
    """The row kernels loaded (Numba, from its cache) while the driver plans, for the
    spill's token type: the shard tasks start on rows at once."""
    from packcli.plan.rows import fill_rows

    one = np.zeros(1, dtype=np.int64)
    fill_rows(np.zeros(1, dtype=token_dtype), one, None, one, np.ones(1, dtype=np.int64), one, one, 1, 2, 0)


def spill_part(
    opts: Any, part: Part, part_dir: str, spill_dir: str, index: int, run_id: str, fingerprint: str | None
) -> dict[str, Any]:
    """Read, tokenize and segment one part of the input into one spill part; its record is
    the ledger entry."""
    from packcli.engine import job
    from packcli.engine.ingest import IngestCounts, TokenStream, segments
    from packcli.plan.grouping import GroupTable, save_group_ids
    from packcli.read.records import BadRecords
    from packcli.write.columns import ids_dtype
    from packcli.write.spill import SpillWriter

    _attempt(spill_dir, "spill", index)
    setup = worker_setup(opts, fingerprint)
    opts = replace(opts, workers=1)
    timer, bad, counts = Timer(), BadRecords(), IngestCounts()
    paths = [part.path]
    stream = TokenStream(opts, setup, paths, bad, timer, {part.path: part.section} if part.section else None)
    masked = setup.builder.labels != "text"
    writer = SpillWriter(Path(part_dir), ids_dtype(setup.vocab_size), masked, durable=True)  # nodes come and go
    table = GroupTable(opts.group_by) if opts.group_by is not None else None
    try:
        segmenter = job.make_segmenter(opts, setup, counts, table)
        for n, (tokens, lengths, learned) in enumerate(segments(stream, segmenter, paths)):
            with timer.stage("spill"):
                writer.append(tokens, lengths, learned)
            if n == 0:
                maybe_fail("spill", index)
        meta = {"run_id": run_id, "counts": counts.to_dict(), "bad": job.bad_dict(bad), "timings": timer.seconds}
        if table is not None:  # the part's own table (first appearance in the part) and its segments' ids
            save_group_ids(Path(part_dir), segmenter.group_ids.take(segmenter.group_ids.held))
            meta["groups"] = table.to_dict()
        if segmenter.values is not None:  # pairs, weights: each segment's, beside the part
            segmenter.values.save(Path(part_dir))
        with timer.stage("spill"):
            return writer.finish(meta).meta
    except BaseException:
        writer.abort()
        raise
    finally:
        stream.close()


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
    _attempt(spill_dir, "sort", index)
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
    _attempt(spill_dir, "shard", index)
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


def complete_parts(spill_dir: Path, count: int, run_id: str) -> dict[int, dict[str, Any]]:
    """The parts a resumed run can keep: complete, and made by the same run."""
    kept = {}
    for index in range(count):
        spill = open_complete(part_path(spill_dir, index), run_id)
        if spill is not None:
            kept[index] = spill.meta
            spill.close()
    return kept


def part_path(spill_dir: Path, index: int) -> Path:
    return spill_dir / f"part-{index:05d}"


def clear(spill_dir: Path) -> None:
    remove_spill(spill_dir)
    spill_dir.mkdir(parents=True, exist_ok=True)


# ----------------------------------------------------------------------------- a mixture's sources


def spill_source_part(
    opts: Any, part: Part, dirs: dict[str, str], spill_dir: str, index: int, run_id: str, fingerprint: str | None
) -> dict[str, dict[str, Any]]:
    """One part of one source of a mixture read into its side spills (engine/sources.py),
    its documents numbered from 0; the records of its sides, by side."""
    from packcli.engine.ingest import TokenStream
    from packcli.engine.sources import SourceReader, key_fields
    from packcli.plan.grouping import GroupTable
    from packcli.read.records import BadRecords

    _attempt(spill_dir, "source", index)
    setup = worker_setup(opts, fingerprint)
    opts = replace(opts, workers=1)
    timer, bad = Timer(), BadRecords()
    sections = {part.path: part.section} if part.section else None
    stream = TokenStream(opts, setup, [part.path], bad, timer, sections, extra_fields=key_fields(opts))
    groups = GroupTable(opts.group_by) if opts.group_by is not None else None
    reader = SourceReader(opts, setup, {side: Path(d) for side, d in dirs.items()}, run_id, groups, timer, durable=True)
    spills = reader.read(stream, bad)
    maybe_fail("source", index)
    records = {}
    for side, spill in spills.items():
        records[side] = spill.meta
        spill.close()
    return records
