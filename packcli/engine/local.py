"""`packcli pack`: options -> read+tokenize -> spill -> plan -> gather+write -> report.

Each stage is its own module; this one runs them in order and owns the output
directory for the length of the run. A Run holds one output's state and runs its three
steps: `spill` (segments to disk), `plan` and `write` (rows gathered and written into
shards). By default every segment is spilled and one plan covers the whole corpus;
`--buffer-size K` instead spills, plans and writes windows of K segments (bounded
temporary disk, for streams that never end). Bytes depend only on the input and the
options: never on workers, batch sizes or an interruption.
"""

from __future__ import annotations

import contextlib
import json
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple, TypeVar

import numpy as np

from packcli.core import storage
from packcli.core.errors import Interrupted, PackcliError
from packcli.core.flow import Timer, prefetch, signals_raise
from packcli.core.options import PackOptions
from packcli.core.pause import pause
from packcli.engine.ingest import IngestCounts, SegmentBatch, SegmentSource, TokenStream, segments, use_workers
from packcli.engine.job import (
    Job,
    Outcome,
    PlanStep,
    Progress,
    bad_dict,
    check_documents,
    make_segmenter,
    open_job,
    publish,
    spills_by_length,
)
from packcli.engine.pairs import spill_values, value_tags
from packcli.engine.summary import run_manifest, run_report
from packcli.plan.contract import Plan, RowOrder
from packcli.plan.grouping import GroupTable, load_group_ids, save_group_ids
from packcli.plan.rows import RowBuffers, Rows
from packcli.plan.stream import SparseEnds, sparse_stream_plan
from packcli.read.inputs import expand_inputs
from packcli.read.records import BadRecords
from packcli.tokenize.setup import setup_tokens
from packcli.write import outdir
from packcli.write import remote as remote_output
from packcli.write import spill as spilling
from packcli.write.by_length import Reader, open_reader
from packcli.write.columns import ids_dtype
from packcli.write.gather import PieceTags, gather_rows
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
    if opts.mixed:
        raise PackcliError("internal: a mixture runs through engine.pack.run_pack")
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
            return finished_report(job)
        with signals_raise():
            pause("claimed")
            removal = None
            if opts.engine == "ray":
                stream.close()  # it checked the first batch and chose the backend; tasks read the rest
                from packcli.engine.ray_driver import execute_ray

                outcome = execute_ray(job, paths, timer, progress)
            else:
                run = Run(job, timer, tagging=value_tags(opts) if opts.per_segment_values else None)
                run.execute(_input_source(job, stream, bad, paths, progress), paths)
                outcome, removal = run.outcome, run.spill_removal
            report = run_report(job, outcome, stream.workers, timer, time.perf_counter() - started)
            finish_output(job, outcome, report, removal)
        return report
    except KeyboardInterrupt as stop:  # SIGINT stays a KeyboardInterrupt for callers; it tells whether it came late
        stop.output_complete = output_complete(job)  # type: ignore[attr-defined]
        raise
    except Interrupted as stop:
        if output_complete(job):  # it came after the manifest: the output is whole
            raise stop.completed() from None
        raise
    finally:
        stream.close()
        job.lock.release()
        if job.remote is not None and (job.finished or storage.is_complete(job.out_dir)):
            outdir.remove_path(job.out_dir)  # the staging directory: everything is uploaded


def _input_source(
    job: Job, stream: TokenStream, bad: BadRecords, paths: list[str], progress: Progress | None
) -> SegmentSource:
    """The input's segments as `stream` reads and tokenizes them, with the counts, the bad
    records and the --group-by ids made on the way."""
    opts = job.opts
    table = GroupTable(opts.group_by) if opts.group_by is not None else None
    segmenter = make_segmenter(opts, job.setup, IngestCounts(), table)
    batches = segments(stream, segmenter, paths, progress)
    group_ids = segmenter.group_ids if table is not None else None
    return SegmentSource(batches, segmenter.counts, bad, table, group_ids, segmenter.values)


def output_complete(job: Job) -> bool:
    """Whether the output is complete: its manifest written (for a remote output, uploaded)."""
    return job.finished or (job.published_manifest if job.remote is not None else storage.is_complete(job.out_dir))


class Gathering(NamedTuple):
    """What the write step gathers rows from: a reader and the plan placed in it, with the
    rows' per-segment columns (None: none)."""

    reader: Reader
    plan: Plan
    tags: PieceTags | None = None


# What gives an output's rows their per-segment columns, from the plan placed in its reader,
# the spill and the --group-by ids (a mixture's segment_source)
Tagging = Callable[[Plan, Spill, "np.ndarray | None"], PieceTags]


SPARSE_ENDS = 256  # concat of one whole input: one segment end in this many held in memory (0: all)
SHARD_THREADS = 2  # shards written at the same time by the one-plan path


class Run:
    """One output of the local engine: its Job, the Outcome its report is made from, its
    shard writer and its plan step (which holds the plan settings, computed once). The
    steps run in order, once or once per window: `spill` (segments to disk), `plan`
    (PlanStep's, with the choices of the local engine) and `write` (rows gathered from the
    spill and written into shards)."""

    def __init__(self, job: Job, timer: Timer, tagging: Tagging | None = None):
        self.job, self.opts, self.timer = job, job.opts, timer
        self.tagging = tagging
        self.outcome = Outcome(stats=RowStats(job.opts.seq_len))
        self.plan_step = PlanStep(job.opts, self.outcome, timer)
        self.writer = ShardWriter(
            job.out_dir,
            job.opts.format,
            job.opts.seq_len,
            job.rows_per_shard,
            job.setup.vocab_size,
            job.done_shards,
            grouped=job.opts.group_by is not None,
        )
        self.spill_removal: threading.Thread | None = None  # the spill going, once every row is gathered

    def execute(self, source: SegmentSource, paths: list[str]) -> None:
        """Every step over `source`: one plan of the whole input, or one per window of
        --buffer-size; then the shards closed. `paths`: the inputs, as an error names them."""
        outcome = self.outcome
        try:
            if self.opts.buffer_size is None:
                self._one_plan(source)
            else:
                self._windows(source)
                outcome.bad = bad_dict(source.bad)
            check_documents(outcome, paths)
            with self.timer.stage("write"):
                outcome.shards = outdir.guarded(self.job.out_dir, self.writer.close)
                publish(self.job, outcome.shards)
            pause("written")
            outcome.group_counts = self.writer.group_counts
        except BaseException:
            self.writer.abort()
            raise

    def _one_plan(self, source: SegmentSource) -> None:
        """The default: spill everything, plan every row at once, then gather and write."""
        spill = self.spill(source)
        try:
            groups = load_group_ids(self.job.spill_dir, spill.sequences) if self.opts.group_by is not None else None
            plan = self.plan(spill, groups=groups)
            self.write(spill, plan, groups=groups)
        finally:
            spill.close()

    def _windows(self, source: SegmentSource) -> None:
        """--buffer-size K: spill, plan and write K segments at a time; concat carries the
        tail of each window's stream (less than one row) into the next."""
        size = self.opts.buffer_size
        assert size is not None  # windows are what --buffer-size asks for
        self.outcome.counts, self.outcome.group_table = source.counts, source.group_table
        spill_dir = self.job.spill_dir
        carry = None
        pending = iter(_cut_windows(source.batches, size))
        window = 0
        while True:
            writer = self.open_spill()
            try:
                if carry is not None:
                    writer.append(*carry)
                last = True
                for batch, closes in pending:
                    with self.timer.stage("spill"):
                        self._spill_io(writer.append, *batch)
                    if closes:
                        last = False
                        break
                if writer.sequences == 0:
                    return
                with self.timer.stage("spill"):
                    spill = self._spill_io(writer.finish, {"run_id": self.job.run_id})
            except BaseException:
                writer.abort()
                raise
            self.outcome.spill_bytes = max(self.outcome.spill_bytes, spilling.spill_size(spill_dir))
            try:
                groups = None if source.group_ids is None else source.group_ids.take(spill.sequences)
                plan = self.plan(spill, window, final=last, groups=groups)
                self.write(spill, plan, final=last, groups=groups)
                carry = _tail(spill, plan, self.opts.seq_len) if self.opts.mode == "concat" and not last else None
            finally:
                spill.close()
                remove_spill(spill_dir)
            window += 1
            if last:
                return

    # ------------------------------------------------------------------------- spill

    def spill(self, source: SegmentSource) -> Spill:
        """The spill step of one plan: every segment of `source` on disk, its tallies in the
        spill's record; on --resume, the complete spill of the interrupted run instead, its
        tallies read back (nothing is read or tokenized again)."""
        job, outcome = self.job, self.outcome
        spill = spilling.open_complete(job.spill_dir, job.run_id) if self.opts.resume else None
        if spill is not None:
            outcome.spill_reused = True
            outcome.counts = IngestCounts(**spill.meta["counts"])
            if self.opts.group_by is not None:
                outcome.group_table = GroupTable.from_dict(spill.meta["groups"])
        else:
            spill = self._spill_all(source)
            pause("spilled")
            outcome.counts, outcome.group_table = source.counts, source.group_table
        outcome.bad = spill.meta["bad"]
        outcome.spill_bytes = spilling.spill_size(job.spill_dir)
        return spill

    def _spill_all(self, source: SegmentSource) -> Spill:
        """Every segment of `source` into the spill, its counts (once all is read) in the record."""
        # by length if the first chunk's rows would hold many sequences (a guess the plan
        # corrects: it copies a spill in input order, or maps one written by length)
        writer = self.open_spill(spills_by_length(self.opts) and self.plan_step.gathers_by_bucket)
        try:
            for batch in source.batches:
                with self.timer.stage("spill"):
                    self._spill_io(writer.append, *batch)
            with self.timer.stage("spill"):
                return self._spill_io(writer.finish, self._record(source))
        except BaseException:
            writer.abort()
            raise

    def open_spill(self, by_length: bool | Callable[[int, int], bool] = False) -> SpillWriter:
        """A writer of this run's spill (whatever was in its directory goes first), in the
        output's id dtype, with learned bits where labels are masked."""
        setup = self.job.setup
        masked = setup.builder.labels != "text"
        return self._spill_io(SpillWriter, self.job.spill_dir, ids_dtype(setup.vocab_size), masked, False, by_length)

    def _record(self, source: SegmentSource) -> dict[str, Any]:
        """The spill's record of one plan: the counts, the bad records and the --group-by
        table, the segments' group ids saved beside it first."""
        record: dict[str, Any] = {
            "run_id": self.job.run_id,
            "counts": source.counts.to_dict(),
            "bad": bad_dict(source.bad),
        }
        if source.group_table is not None and source.group_ids is not None:
            ids = source.group_ids
            save_group_ids(self.job.spill_dir, ids.take(ids.held))
            record["groups"] = source.group_table.to_dict()
        if source.values is not None:
            source.values.save(self.job.spill_dir)
        return record

    def _spill_io(self, action: Callable[..., T], *args: Any) -> T:
        try:
            return action(*args)
        except OSError as exc:
            raise PackcliError(
                f"writing the token spill to {self.job.spill_dir} failed: {exc.strerror or exc}; no manifest was written "
                "(the spill needs about the output's size on disk: free some, or point --tmp-dir elsewhere)"
            ) from exc

    # ------------------------------------------------------------------------- plan

    def plan(self, spill: Spill, window: int = 0, final: bool = True, groups: np.ndarray | None = None) -> Plan:
        """The plan step: a window's plan (the whole input's without --buffer-size) from
        the spill's length histogram alone where that suffices, from its segment ends read
        from disk in concat mode of one whole input, else from its lengths. `groups`: each
        segment's --group-by id."""
        step, opts = self.plan_step, self.opts
        if opts.per_segment_values:  # pairs, weights: per piece, found by their places in the spill
            return self._plan_with_values(spill, window, final, groups)
        by_bucket = spill.directory is not None and step.gathers_by_bucket(spill.tokens, spill.sequences)
        if by_bucket and groups is None:
            histogram = spill.histogram
            if step.histogram_suffices(histogram):
                return step.plan_histogram(histogram, window)  # the lengths stay on disk
        if opts.mode == "concat" and groups is None and final and opts.buffer_size is None and SPARSE_ENDS:
            return self._sparse_stream(spill)  # the lengths stay on disk
        return step.plan_lengths(spill.lengths, window, final, groups, by_bucket)

    def _plan_with_values(self, spill: Spill, window: int, final: bool, groups: np.ndarray | None) -> Plan:
        """The plan of a spill whose segments carry values (engine/pairs.py): pairs placed
        whole, weighted segments as any others, from their lengths in input order."""
        if not self.opts.pairs:
            return self.plan_step.plan_lengths(spill.lengths, window, final, groups)
        assert spill.directory is not None  # the engines' spills are on disk
        first = spill_values(self.opts, [spill.directory], [spill.sequences]).first
        assert first is not None  # pairs
        return self.plan_step.plan_pairs(first, spill.lengths, groups)

    def _sparse_stream(self, spill: Spill) -> Plan:
        """Concat mode's plan of one whole input without --group-by, its segment ends read
        from the spill's lengths on disk for the rows being gathered (stream.SparseEnds)."""
        s = self.plan_step.settings
        with self.timer.stage("plan"):
            spill.open_files()
            ends = SparseEnds.build(spill.length_batches(SPARSE_ENDS << 12), SPARSE_ENDS, spill.read_lengths)
            plan = sparse_stream_plan(ends, spill.tokens, s.seq_len, s.remainder, shuffle=s.shuffle, seed=s.seed)
        self.plan_step.account(plan)
        return plan

    # ------------------------------------------------------------------------- write

    def write(self, spill: Spill, plan: Plan, final: bool = True, groups: np.ndarray | None = None) -> None:
        """The write step: the plan's rows gathered from the spill (or from its chunks or its
        sorted copy: by_length.open_reader) and written into shards, SHARD_THREADS at a
        time where one plan has them all. `groups`: each segment's --group-by id."""
        with self.timer.stage("write"):
            reader, plan = open_reader(spill, plan, self.opts.seq_len, self.opts.pad_multiple, groups)
        assert spill.directory is not None  # the local engine's spills are on disk
        self.outcome.spill_bytes = max(self.outcome.spill_bytes, spilling.spill_size(spill.directory))
        source = Gathering(reader, plan, None if self.tagging is None else self.tagging(plan, spill, groups))
        try:
            if SHARD_THREADS > 1 and final and not self.writer.started and plan.n_rows > self.job.rows_per_shard:
                with self.timer.stage("write"):
                    self._write_shards_at_once(spill, source)
            else:
                self._write_in_order(source)
        finally:
            reader.close()

    def _gather(
        self,
        source: Gathering,
        first: int = 0,
        end: int | None = None,
        order: RowOrder = None,
        buffers: RowBuffers | None = None,
    ) -> Iterator[Rows]:
        """The plan's rows [first, end), read from the reader a block at a time."""
        opts, pad_id = self.opts, self.job.setup.pad_id
        plan = source.plan
        return gather_rows(
            source.reader, plan, opts.seq_len, pad_id, first, opts.pad_multiple, end, order, buffers, source.tags
        )

    def _write_rows(
        self,
        blocks: Iterable[Rows],
        writer: ShardWriter,
        stats: RowStats,
        plan: Plan,
        first: int,
        block_done: Callable[[int], None],
        timed: bool = False,
    ) -> None:
        """The row-writing loop of both paths: each block counted for the report and added
        to `writer` with its rows' --group-by ids (the plan's rows from `first` on), then
        `block_done(shards the writer had finished before it)`. `timed`: each block's
        writing counts as the write stage."""
        for rows in blocks:
            with self.timer.stage("write") if timed else contextlib.nullcontext():
                finished = len(writer.shards)
                stats.add(rows)
                row_group = None if plan.row_group is None else plan.row_group[first : first + len(rows)]
                outdir.guarded(self.job.out_dir, writer.add, rows, row_group)
                first += len(rows)
                block_done(finished)

    def _write_in_order(self, source: Gathering) -> None:
        """The rows in order: built on a thread while the block before them is written here
        (the row kernel and pyarrow's compression both run without the GIL)."""
        built = prefetch(self.timer.timed_iter("write", self._gather(source)), depth=1)
        try:
            self._write_rows(built, self.writer, self.outcome.stats, source.plan, 0, self._block_written, timed=True)
        finally:
            built.close()

    def _block_written(self, finished: int) -> None:
        """After a block of the in-order path: the pause points of a shard finished and of
        one under way; a remote output's finished shards go up."""
        writer = self.writer
        if len(writer.shards) > finished:
            pause("shard-done")
        if writer.shards and writer.in_progress:
            pause("mid-shard")
        if self.job.remote is not None:
            publish(self.job, writer.hashed_shards())

    def _write_shards_at_once(self, spill: Spill, source: Gathering) -> None:
        """Every shard of a whole plan, SHARD_THREADS at a time, each gathered and written on
        its own thread (the row kernel, Parquet's encoder and sha256 all release the GIL):
        one shard's rows are one after another, so its writer is a bottleneck no other
        thread can share. Shards are taken back in order; the bytes are those of one shard
        at a time."""
        job, writer, plan = self.job, self.writer, source.plan
        shards = -(-plan.n_rows // job.rows_per_shard)
        order = plan.row_order()
        stop = threading.Event()
        spill.open_files()  # before the threads share them
        gathering = shards  # shards whose rows are still being read from the spill
        lock = threading.Lock()

        def gathered() -> None:
            """The last shard's rows are read: the spill goes while the shards are finished."""
            nonlocal gathering
            with lock:
                gathering -= 1
                if gathering == 0:
                    pause("last-rows-read")
                    if job.remote is None and spill.directory is not None:
                        spill.close()
                        source.reader.close()
                        self.spill_removal = spilling.start_removal(spill.directory)

        def one(index: int) -> tuple[ShardWriter, RowStats]:
            return self._write_one_shard(source, writer.for_shard(index), order, stop, gathered)

        pool = ThreadPoolExecutor(max_workers=SHARD_THREADS, thread_name_prefix="packcli-shard")
        futures = [pool.submit(one, i) for i in range(shards)]
        try:
            for future in futures:
                shard_writer, stats = future.result()
                writer.absorb(shard_writer)
                self.outcome.stats.merge(stats)
                publish(job, writer.hashed_shards())
                pause("shard-done")
        except BaseException:
            stop.set()
            raise
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    def _write_one_shard(
        self,
        source: Gathering,
        shard_writer: ShardWriter,
        order: RowOrder,
        stop: threading.Event,
        gathered: Callable[[], None],
    ) -> tuple[ShardWriter, RowStats]:
        """One shard of the plan, its rows gathered and written by `shard_writer` (its
        ShardWriter.for_shard); with its rows' figures for the report."""
        job, opts = self.job, self.opts
        first = shard_writer.first_shard * job.rows_per_shard
        end = min(first + job.rows_per_shard, source.plan.n_rows)
        stats = RowStats(opts.seq_len)
        buffers = RowBuffers() if opts.format == "npy" else None  # npy writes a block and keeps nothing of it

        def stop_here(finished: int) -> None:
            if stop.is_set():
                raise PackcliError("stopped")  # the run failed elsewhere; that error is the one shown

        try:
            rows = self._gather(source, first, end, order, buffers)
            self._write_rows(rows, shard_writer, stats, source.plan, first, stop_here)
            gathered()
            outdir.guarded(job.out_dir, shard_writer.close)
        except BaseException:
            shard_writer.abort()
            raise
        return shard_writer, stats


class WindowBatch(NamedTuple):
    """Segments of a window, and whether they are its last (windows of exactly
    --buffer-size segments, cut from batches of any size)."""

    batch: SegmentBatch
    closes: bool


def _cut_windows(batches: Iterable[SegmentBatch], size: int) -> Iterator[WindowBatch]:
    """The batches cut into windows of exactly `size` segments, whatever their sizes:
    windows never depend on how the input was read."""
    held = 0
    for tokens, lengths, learned in batches:
        while len(lengths):
            take = min(len(lengths), size - held)
            n = int(lengths[:take].sum())
            batch = SegmentBatch(tokens[:n], lengths[:take], None if learned is None else learned[:n])
            tokens, lengths = tokens[n:], lengths[take:]
            learned = None if learned is None else learned[n:]
            held += take
            closes = held >= size
            if closes:
                held = 0
            yield WindowBatch(batch, closes)


def _tail(spill: Spill, plan: Plan, seq_len: int) -> SegmentBatch | None:
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
    return SegmentBatch(tokens, lengths, learned)


def finish_output(job: Job, outcome: Outcome, report: Report, removal: threading.Thread | None = None) -> None:
    """Report, then manifest (last: its presence means complete), while the spill goes (it
    may be going already, `removal`: the one-plan path starts it once every row is
    gathered). A run that fails from then on has no spill: --resume keeps the finished
    shards and reads the input again."""
    out = job.out_dir
    removal = removal or spilling.start_removal(job.spill_dir)
    try:
        outdir.guarded(out, outdir.write_json_atomic, out / "report.json", report)
        pause("report.json")
        manifest = run_manifest(job, outcome, report)
        outdir.guarded(out, outdir.write_json_atomic, out / storage.MANIFEST_FILE, manifest)
        if job.remote is not None:
            remote_output.finish(job.remote, out)
            job.published_manifest = True
        pause(storage.MANIFEST_FILE)
    finally:
        removal.join()


def finished_report(job: Job) -> Report:
    """--resume on a run that had finished: nothing to do, the same report again."""
    where = str(job.remote) if job.remote is not None else str(job.out_dir)
    sys.stderr.write(f"{where} is already complete; nothing to resume\n")
    if job.remote is not None:
        remote_report: Report = job.remote.read_json("report.json")
        return remote_report
    report: Report = json.loads((job.out_dir / "report.json").read_text(encoding="utf-8"))
    return report
