"""`packcli pack`: options -> read+tokenize -> spill -> plan -> gather+write -> report.

Each stage is its own module; this one runs them in order and owns the output
directory for the length of the run. By default every segment is spilled to disk and
one plan covers the whole corpus; `--buffer-size K` instead spills, plans and writes
windows of K segments (bounded temporary disk, for streams that never end). Bytes depend
only on the input and the options: never on workers, batch sizes or an interruption.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import numpy as np

from packcli.core.errors import Interrupted, PackcliError
from packcli.core.flow import Timer, prefetch, signals_raise
from packcli.core.options import PackOptions
from packcli.core.pause import pause
from packcli.engine.ingest import IngestCounts, TokenStream, segments, use_workers
from packcli.engine.job import (
    Chunk,
    Chunks,
    Job,
    Outcome,
    Progress,
    account_plan,
    bad_dict,
    by_bucket,
    check_documents,
    from_histogram,
    make_segmenter,
    open_job,
    plan_histogram,
    plan_segments,
    publish,
    spills_by_length,
)
from packcli.engine.summary import run_manifest, run_report
from packcli.plan.grouping import GroupTable, load_group_ids, save_group_ids
from packcli.plan.patterns import PatternPlan
from packcli.plan.planner import Plan, RowOrder
from packcli.plan.rows import RowBuffers
from packcli.plan.settings import plan_settings
from packcli.plan.stream import SparseEnds, sparse_stream_plan
from packcli.read.inputs import expand_inputs
from packcli.read.records import BadRecords
from packcli.tokenize.setup import setup_tokens
from packcli.write import outdir
from packcli.write import remote as remote_output
from packcli.write import spill as spilling
from packcli.write.by_length import ChunkedSpill, SortedSpill, chunk_parts, file_slot_starts, sort_spill
from packcli.write.columns import ids_dtype
from packcli.write.gather import BlockReader, gather_rows
from packcli.write.manifest import Report
from packcli.write.report import RowStats
from packcli.write.shards import ShardWriter
from packcli.write.spill import Spill, SpillWriter, remove_spill

T = TypeVar("T")


def run_pack(opts: PackOptions, progress: Progress | None = None) -> Report:
    """Pack the inputs into opts.output; returns the report. Raises PackcliError."""
    opts.validate()
    use_workers(opts.workers)
    started = time.perf_counter()
    paths = expand_inputs(opts.inputs)
    if opts.engine != "ray":
        return _run_pack(opts, paths, started, progress)
    from packcli.engine.ray_driver import ray_session  # the workers start while this process loads the tokenizer

    with ray_session(opts, paths):
        return _run_pack(opts, paths, started, progress)


def _run_pack(opts: PackOptions, paths: list[str], started: float, progress: Progress | None) -> Report:
    timer = Timer()
    setup = setup_tokens(opts)
    bad = BadRecords()
    stream = TokenStream(opts, setup, paths, bad, timer)
    try:
        job = open_job(opts, setup, paths)
    except BaseException:
        stream.close()
        raise
    try:
        if job.finished:
            stream.close()
            return _finished_report(job)
        with signals_raise():
            pause("claimed")
            if opts.engine == "ray":
                stream.close()  # it checked the first batch and chose the backend; tasks read the rest
                from packcli.engine.ray_driver import execute_ray

                outcome = execute_ray(job, paths, timer, progress)
            else:
                outcome = _execute(job, stream, bad, paths, timer, progress)
            report = run_report(job, outcome, stream.workers, timer, time.perf_counter() - started)
            _finish(job, outcome, report)
        return report
    except KeyboardInterrupt as stop:  # SIGINT stays a KeyboardInterrupt for callers; it tells whether it came late
        stop.output_complete = _output_complete(job)  # type: ignore[attr-defined]
        raise
    except Interrupted as stop:
        if _output_complete(job):  # it came after the manifest: the output is whole
            raise stop.completed() from None
        raise
    finally:
        stream.close()
        job.lock.release()
        if job.remote is not None and (job.finished or _complete(job)):
            outdir.remove_path(job.out_dir)  # the staging directory: everything is uploaded


def _complete(job: Job) -> bool:
    return (job.out_dir / "manifest.json").is_file()


def _output_complete(job: Job) -> bool:
    """Whether the output is complete: its manifest written (for a remote output, uploaded)."""
    return job.finished or (job.published_manifest if job.remote is not None else _complete(job))


def _execute(
    job: Job, stream: TokenStream, bad: BadRecords, paths: list[str], timer: Timer, progress: Progress | None
) -> Outcome:

    opts = job.opts
    outcome = Outcome(stats=RowStats(opts.seq_len))
    writer = ShardWriter(
        job.out_dir,
        opts.format,
        opts.seq_len,
        job.rows_per_shard,
        job.setup.vocab_size,
        job.done_shards,
        grouped=opts.group_by is not None,
    )
    try:
        job.groups = GroupTable(opts.group_by) if opts.group_by is not None else None
        segmenter = make_segmenter(opts, job.setup, outcome.counts, job.groups)
        job.segmenter = segmenter
        chunks = segments(stream, segmenter, paths, progress)
        if opts.buffer_size is None:
            _one_plan(job, chunks, outcome, writer, bad, timer)
        else:
            _windows(job, chunks, outcome, writer, timer)
            outcome.bad = bad_dict(bad)
        check_documents(outcome, paths)
        with timer.stage("write"):
            outcome.shards = outdir.guarded(job.out_dir, writer.close)
            publish(job, outcome.shards)
        pause("written")
        outcome.group_counts = writer.group_counts
        return outcome
    except BaseException:
        writer.abort()
        raise


def _one_plan(job: Job, chunks: Chunks, outcome: Outcome, writer: ShardWriter, bad: BadRecords, timer: Timer) -> None:
    """The default: spill everything, plan every row at once, then gather and write."""
    spill = spilling.open_complete(job.spill_dir, job.run_id) if job.opts.resume else None
    if spill is not None:
        job.spill_reused = True
        outcome.counts = IngestCounts(**spill.meta["counts"])
        outcome.bad = spill.meta["bad"]
        if job.opts.group_by is not None:
            job.groups = GroupTable.from_dict(spill.meta["groups"])
            group_ids = load_group_ids(job.spill_dir, spill.sequences)
    else:
        spill = _spill_all(job, chunks, timer, lambda: _spill_meta(job, outcome, bad))
        pause("spilled")
        outcome.bad = spill.meta["bad"]
        if job.groups is not None:
            group_ids = load_group_ids(job.spill_dir, spill.sequences)
    job.spill_bytes = spilling.spill_size(job.spill_dir)
    try:
        groups = group_ids if job.opts.group_by is not None else None
        _plan_and_write(job, spill, outcome, writer, timer, index=0, final=True, groups=groups)
    finally:
        spill.close()


def _spill_all(job: Job, chunks: Chunks, timer: Timer, meta: Callable[[], dict[str, Any]]) -> Spill:
    """Every segment into the spill; `meta()` (the counts, once all is read) goes in its record."""
    masked = job.setup.builder.labels != "text"
    dtype = ids_dtype(job.setup.vocab_size)
    opts = job.opts
    # by length if the first chunk's rows would hold many sequences (a guess the plan
    # corrects: it copies a spill in input order, or maps one written by length)
    by_length = spills_by_length(opts) and (lambda tokens, sequences: by_bucket(opts, tokens, sequences))
    writer = outdir.guarded(job.spill_dir, SpillWriter, job.spill_dir, dtype, masked, False, by_length)
    try:
        for tokens, lengths, learned in chunks:
            with timer.stage("spill"):
                _spill_write(job, writer.append, tokens, lengths, learned)
        with timer.stage("spill"):
            return _spill_write(job, writer.finish, {"run_id": job.run_id, **meta()})
    except BaseException:
        writer.abort()
        raise


def _spill_meta(job: Job, outcome: Outcome, bad: BadRecords) -> dict[str, Any]:
    """The spill's record (counts, bad records, the --group-by table), its group ids saved first."""
    meta: dict[str, Any] = {"counts": outcome.counts.to_dict(), "bad": bad_dict(bad)}
    if job.groups is not None and job.segmenter is not None:
        ids = job.segmenter.group_ids
        save_group_ids(job.spill_dir, ids.take(ids.held))
        meta["groups"] = job.groups.to_dict()
    return meta


def _spill_write(job: Job, action: Callable[..., T], *args: Any) -> T:
    try:
        return action(*args)
    except OSError as exc:
        raise PackcliError(
            f"writing the token spill to {job.spill_dir} failed: {exc.strerror or exc}; no manifest was written "
            "(the spill needs about the output's size on disk: free some, or point --tmp-dir elsewhere)"
        ) from exc


def _plan_and_write(
    job: Job,
    spill: Spill,
    outcome: Outcome,
    writer: ShardWriter,
    timer: Timer,
    index: int,
    final: bool,
    groups: np.ndarray | None = None,
) -> Plan:

    opts = job.opts
    multiple = opts.pad_multiple
    bucketed = spill.directory is not None and by_bucket(opts, spill.tokens, spill.sequences)
    histogram = spill.histogram if bucketed and groups is None else None
    if histogram is not None and from_histogram(opts, spill.tokens, spill.sequences, histogram, grouped=False):
        plan: Plan = plan_histogram(job, outcome, timer, histogram, index)  # the lengths stay on disk
    elif opts.mode == "concat" and groups is None and final and opts.buffer_size is None and SPARSE_ENDS:
        plan = _sparse_stream(job, outcome, timer, spill)  # the lengths stay on disk
    else:
        plan = plan_segments(job, outcome, timer, spill.lengths, index, final, groups, bucketed)
    reader: BlockReader = spill
    buckets = plan.buckets if isinstance(plan, PatternPlan) else None
    if isinstance(plan, PatternPlan) and buckets is not None:
        parts = chunk_parts(spill, buckets) if spill.chunks is not None else None
        if parts is not None:  # written by length: no copy to make, the slots placed in the spill
            chunked = ChunkedSpill(spill, parts)
            plan, reader = chunked.placing(plan), chunked
        else:
            with timer.stage("write"):
                reader = sort_spill(spill, buckets, opts.seq_len, multiple, groups)
            job.spill_bytes = max(job.spill_bytes, spilling.spill_size(job.spill_dir))
    elif spill.chunks is not None:
        # written by length, planned through a slot map (rows of few sequences): the map
        # in the spill's own order
        if not isinstance(plan, PatternPlan) or plan.slot_start is None or plan.slot_real is not None:
            raise PackcliError(f"internal: a {type(plan).__name__} cannot read a spill written by length")
        with timer.stage("plan"):
            plan.slot_start = file_slot_starts(spill)
    try:
        _write_plan(job, spill, reader, plan, outcome, writer, timer, final)
    finally:
        if isinstance(reader, SortedSpill):
            reader.close()
    return plan


SPARSE_ENDS = 256  # concat of one whole input: one segment end in this many held in memory (0: all)


def _sparse_stream(job: Job, outcome: Outcome, timer: Timer, spill: Spill) -> Plan:
    """Concat mode's plan of one whole input without --group-by, its segment ends read from
    the spill's lengths on disk for the rows being gathered (stream.SparseEnds)."""
    s = plan_settings(job.opts)
    with timer.stage("plan"):
        spill.open_files()
        ends = SparseEnds.build(spill.length_chunks(SPARSE_ENDS << 12), SPARSE_ENDS, spill.read_lengths)
        plan = sparse_stream_plan(ends, spill.tokens, s.seq_len, s.remainder, shuffle=s.shuffle, seed=s.seed)
    account_plan(job, outcome, plan)
    return plan


def _write_plan(
    job: Job,
    spill: Spill,
    reader: BlockReader,
    plan: Plan,
    outcome: Outcome,
    writer: ShardWriter,
    timer: Timer,
    final: bool,
) -> None:
    """Gather the plan's rows from `reader` (the spill, or its sorted copy) and write them."""
    opts = job.opts
    multiple = opts.pad_multiple
    pad_id = job.setup.pad_id
    if SHARD_THREADS > 1 and final and not writer.started and plan.n_rows > job.rows_per_shard:
        with timer.stage("write"):
            _write_shards_at_once(job, spill, reader, plan, outcome, writer)
        return
    # Rows are built on a thread while the block before them is written here: the row
    # kernel and pyarrow's compression both run without the GIL.
    built = prefetch(
        timer.timed_iter("write", gather_rows(reader, plan, opts.seq_len, pad_id, multiple=multiple)), depth=1
    )
    first_row = 0
    try:
        for rows in built:
            with timer.stage("write"):
                outcome.stats.add(rows)
                row_group = None if plan.row_group is None else plan.row_group[first_row : first_row + len(rows)]
                finished = len(writer.shards)
                outdir.guarded(job.out_dir, writer.add, rows, row_group)
                first_row += len(rows)
                if len(writer.shards) > finished:
                    pause("shard-done")
                if writer.shards and writer.in_progress:
                    pause("mid-shard")
                if job.remote is not None:
                    publish(job, writer.hashed_shards())
    finally:
        built.close()


SHARD_THREADS = 2  # shards written at the same time by the one-plan path


def _write_shards_at_once(
    job: Job, spill: Spill, reader: BlockReader, plan: Plan, outcome: Outcome, writer: ShardWriter
) -> None:
    """Every shard of a whole plan, SHARD_THREADS at a time, each gathered and written on its
    own thread (the row kernel, Parquet's encoder and sha256 all release the GIL): one
    shard's rows are one after another, so its writer is a bottleneck no other thread can
    share. Shards are taken back in order; the bytes are those of one shard at a time."""
    shards = -(-plan.n_rows // job.rows_per_shard)
    order = plan.row_order()
    stop = threading.Event()
    spill.open_files()  # before the threads share them
    gathering = [shards]  # shards whose rows are still being read from the spill
    lock = threading.Lock()

    def gathered() -> None:
        """The last shard's rows are read: the spill goes while the shards are finished."""
        with lock:
            gathering[0] -= 1
            if gathering[0] == 0:
                pause("last-rows-read")
                if job.remote is None:
                    spill.close()
                    if isinstance(reader, SortedSpill):
                        reader.close()
                    job.spill_removal = spilling.start_removal(job.spill_dir)

    def one(index: int) -> tuple[ShardWriter, RowStats]:
        return _write_one_shard(job, reader, plan, writer.for_shard(index), order, stop, gathered)

    pool = ThreadPoolExecutor(max_workers=SHARD_THREADS, thread_name_prefix="packcli-shard")
    futures = [pool.submit(one, i) for i in range(shards)]
    try:
        for future in futures:
            part, stats = future.result()
            writer.absorb(part)
            outcome.stats.merge(stats)
            publish(job, writer.hashed_shards())
            pause("shard-done")
    except BaseException:
        stop.set()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _write_one_shard(
    job: Job,
    spill: BlockReader,
    plan: Plan,
    part: ShardWriter,
    order: RowOrder,
    stop: threading.Event,
    gathered: Callable[[], None],
) -> tuple[ShardWriter, RowStats]:
    opts, first = job.opts, part.first_shard * job.rows_per_shard
    end = min(first + job.rows_per_shard, plan.n_rows)
    stats = RowStats(opts.seq_len)
    buffers = RowBuffers() if opts.format == "npy" else None  # npy writes a block and keeps nothing of it
    multiple = opts.pad_multiple
    rows_of = gather_rows(spill, plan, opts.seq_len, job.setup.pad_id, first, multiple, end, order, buffers)
    try:
        for rows in rows_of:
            if stop.is_set():
                raise PackcliError("stopped")  # the run failed elsewhere; that error is the one shown
            stats.add(rows)
            row_group = None if plan.row_group is None else plan.row_group[first : first + len(rows)]
            outdir.guarded(job.out_dir, part.add, rows, row_group)
            first += len(rows)
        gathered()
        outdir.guarded(job.out_dir, part.close)
    except BaseException:
        part.abort()
        raise
    return part, stats


def _windows(job: Job, chunks: Chunks, outcome: Outcome, writer: ShardWriter, timer: Timer) -> None:
    """--buffer-size K: spill, plan and write K segments at a time; concat carries the
    tail of each window's stream (less than one row) into the next."""

    opts = job.opts
    masked = job.setup.builder.labels != "text"
    dtype = ids_dtype(job.setup.vocab_size)
    size = opts.buffer_size
    assert size is not None  # windows are what --buffer-size asks for
    carry = None
    pending = iter(_cut_windows(chunks, size))
    index = 0
    while True:
        window = _spill_write(job, SpillWriter, job.spill_dir, dtype, masked)
        try:
            if carry is not None:
                window.append(*carry)
            last = True
            for tokens, lengths, learned, closes in pending:
                with timer.stage("spill"):
                    _spill_write(job, window.append, tokens, lengths, learned)
                if closes:
                    last = False
                    break
            if window.sequences == 0:
                return
            with timer.stage("spill"):
                spill = _spill_write(job, window.finish, {"run_id": job.run_id})
        except BaseException:
            window.abort()
            raise
        job.spill_bytes = max(job.spill_bytes, spilling.spill_size(job.spill_dir))
        try:
            groups = (
                None if job.segmenter is None or job.groups is None else job.segmenter.group_ids.take(spill.sequences)
            )
            plan = _plan_and_write(job, spill, outcome, writer, timer, index, final=last, groups=groups)
            carry = _tail(spill, plan, opts.seq_len) if opts.mode == "concat" and not last else None
        finally:
            spill.close()
            remove_spill(job.spill_dir)
        index += 1
        if last:
            return


def _cut_windows(chunks: Chunks, size: int) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray | None, bool]]:
    """(tokens, lengths, learned, closes a window) with windows of exactly `size` segments,
    whatever the batches: windows never depend on how the input was read."""
    held = 0
    for tokens, lengths, learned in chunks:
        while len(lengths):
            take = min(len(lengths), size - held)
            n = int(lengths[:take].sum())
            part = (tokens[:n], lengths[:take], None if learned is None else learned[:n])
            tokens, lengths = tokens[n:], lengths[take:]
            learned = None if learned is None else learned[n:]
            held += take
            closes = held >= size
            if closes:
                held = 0
            yield (*part, closes)


def _tail(spill: Spill, plan: Plan, seq_len: int) -> Chunk | None:
    """The stream after the window's last full row, as segments to put first in the next."""
    cut = plan.n_rows * seq_len
    ends = np.cumsum(spill.lengths)
    first = int(np.searchsorted(ends, cut, side="right"))
    if first >= len(ends):
        return None
    lengths = ends[first:] - np.maximum(ends[first:] - spill.lengths[first:], cut)
    total = int(lengths.sum())
    block = spill.read_block(np.array([cut]), np.array([total]))
    tokens = block.tokens[block.token_at[0] : block.token_at[0] + total]
    learned = None
    if block.learned is not None:
        bits = np.unpackbits(block.learned, bitorder="little")
        learned = bits[block.bit_at[0] : block.bit_at[0] + total].astype(bool)
    return tokens, lengths, learned


def _finish(job: Job, outcome: Outcome, report: Report) -> None:
    """Report, then manifest (last: its presence means complete), while the spill goes (it
    may be going already: `_write_shards_at_once` starts its removal once every row is
    gathered). A run that fails from then on has no spill: --resume keeps the finished
    shards and reads the input again."""
    out = job.out_dir
    removal = job.spill_removal or spilling.start_removal(job.spill_dir)
    try:
        outdir.guarded(out, outdir.write_json_atomic, out / "report.json", report)
        pause("report.json")
        outdir.guarded(out, outdir.write_json_atomic, out / "manifest.json", run_manifest(job, outcome, report))
        if job.remote is not None:
            remote_output.finish(job.remote, out)
            job.published_manifest = True
        pause("manifest.json")
    finally:
        removal.join()


def _finished_report(job: Job) -> Report:
    """--resume on a run that had finished: nothing to do, the same report again."""
    where = str(job.remote) if job.remote is not None else str(job.out_dir)
    sys.stderr.write(f"{where} is already complete; nothing to resume\n")
    if job.remote is not None:
        remote_report: Report = job.remote.read_json("report.json")
        return remote_report
    report: Report = json.loads((job.out_dir / "report.json").read_text(encoding="utf-8"))
    return report
