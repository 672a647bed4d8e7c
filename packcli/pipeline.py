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
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from packcli import __version__, outdir, reading, remote_output, storage
from packcli import spill as spilling
from packcli.errors import PackcliError
from packcli.flow import Timer, prefetch, signals_raise
from packcli.grouping import GroupTable, group_entries, load_group_ids, save_group_ids
from packcli.ingest import IngestCounts, Segmenter, TokenStream, segments, use_workers
from packcli.kernels import bfd_rows_from_counts
from packcli.manifest import (
    FORMAT_VERSION,
    BadRecordCounts,
    GroupEntry,
    Manifest,
    Report,
    buffer_section,
    build_manifest,
    build_report,
)
from packcli.options import PackOptions
from packcli.plan import Plan, RowOrder, RowPlan, gather_rows, plan_window, uncapped_rows
from packcli.plan_patterns import PatternPlan
from packcli.reading import BadRecords
from packcli.report import RowStats, no_packing_baseline
from packcli.rows import RowBuffers, padded_lengths
from packcli.shards import ShardInfo, ShardWriter, ids_dtype, shard_name
from packcli.spill import Spill, SpillWriter, remove_spill
from packcli.tokensetup import TokenSetup, setup_tokens

SHARD_TOKENS = 1 << 25
T = TypeVar("T")
Chunk = tuple[np.ndarray, np.ndarray, "np.ndarray | None"]  # tokens, segment lengths, learned flags
Chunks = Iterator[Chunk]
Progress = Callable[..., None]


@dataclass
class Job:
    """One run's output directory, identity and resume state."""

    opts: PackOptions
    setup: TokenSetup
    out_dir: Path
    lock: outdir.OutputLock
    identity: dict[str, Any]
    rows_per_shard: int
    done_shards: int = 0
    finished: bool = False
    windows: int = 0
    spill_bytes: int = 0
    spill_reused: bool = False
    histogram: np.ndarray | None = None  # packed segment lengths (bin), for the window cost
    segmenter: Segmenter | None = None
    groups: GroupTable | None = None  # --group-by: the values, once read (or from a reused spill)
    uncapped_rows: int = 0  # --max-sequences-per-row: rows of the same plan without the cap
    remote: storage.RemoteDir | None = None  # a remote --output; out_dir is then its local staging
    published: int = 0  # shards uploaded to the remote output so far
    engine: dict[str, Any] = field(default_factory=lambda: {"name": "local"})  # for the report
    spill_removal: threading.Thread | None = None  # the spill going, once every row is gathered

    @property
    def run_id(self) -> str:
        return outdir.identity_hash(self.identity)

    @property
    def spill_dir(self) -> Path:
        if self.opts.tmp_dir:
            return Path(self.opts.tmp_dir) / f"packcli-spill-{self.run_id}"
        return self.out_dir / outdir.SPILL_DIR


@dataclass
class Outcome:
    """What the stages hand to the report."""

    stats: RowStats
    counts: IngestCounts = field(default_factory=IngestCounts)
    bad: BadRecordCounts = field(default_factory=lambda: bad_dict(None))
    remainder_tokens: int = 0
    shards: list[ShardInfo] = field(default_factory=list)
    group_counts: np.ndarray = field(default_factory=lambda: np.zeros((0, 3), dtype=np.int64))
    groups: list[GroupEntry] = field(default_factory=list)


def run_pack(opts: PackOptions, progress: Progress | None = None) -> Report:
    """Pack the inputs into opts.output; returns the report. Raises PackcliError."""
    opts.validate()
    use_workers(opts.workers)
    started = time.perf_counter()
    paths = reading.expand_inputs(opts.inputs)
    if opts.engine != "ray":
        return _run_pack(opts, paths, started, progress)
    from packcli.engine_ray_driver import ray_session  # the workers start while this process loads the tokenizer

    with ray_session(opts, paths):
        return _run_pack(opts, paths, started, progress)


def _run_pack(opts: PackOptions, paths: list[str], started: float, progress: Progress | None) -> Report:
    timer = Timer()
    setup = setup_tokens(opts)
    bad = reading.BadRecords()
    stream = TokenStream(opts, setup, paths, bad, timer)
    try:
        job = _open_job(opts, setup, paths)
    except BaseException:
        stream.close()
        raise
    try:
        if job.finished:
            stream.close()
            return _finished_report(job)
        with signals_raise():
            if opts.engine == "ray":
                stream.close()  # it checked the first batch and chose the backend; tasks read the rest
                from packcli.engine_ray_driver import execute_ray

                outcome = execute_ray(job, paths, timer, progress)
            else:
                outcome = _execute(job, stream, bad, paths, timer, progress)
            report = _report(job, outcome, stream.workers, timer, time.perf_counter() - started)
            _finish(job, outcome, report)
        return report
    finally:
        stream.close()
        job.lock.release()
        if job.remote is not None and (job.finished or _complete(job)):
            outdir.remove_path(job.out_dir)  # the staging directory: everything is uploaded


def _complete(job: Job) -> bool:
    return (job.out_dir / "manifest.json").is_file()


def _open_job(opts: PackOptions, setup: TokenSetup, paths: list[str]) -> Job:
    """Claim the output directory; on --resume, check it is this run's and keep what is done."""
    rows_per_shard = opts.rows_per_shard or max(1, SHARD_TOKENS // opts.seq_len)
    # the format is part of the version a run is resumed by: shards of another row order never mix
    version = f"{__version__} (format {FORMAT_VERSION})"
    identity = outdir.run_identity(resolved_options(opts, setup, rows_per_shard), paths, setup.fingerprint, version)
    if storage.is_remote(opts.output):
        return _open_remote_job(opts, setup, identity, rows_per_shard)
    out_dir = Path(storage.local_path(opts.output))
    lock = outdir.claim_output(out_dir)
    try:
        job = Job(opts, setup, out_dir, lock, identity, rows_per_shard)
        if opts.resume and outdir.has_entries(out_dir):
            outdir.check_resumable(out_dir, identity)
            job.finished = (out_dir / "manifest.json").is_file()
            if not job.finished and opts.engine == "local":  # Ray's shard tasks keep a ledger instead
                job.done_shards = outdir.completed_shards(out_dir, lambda i: shard_name(i, opts.format))
        else:
            outdir.prepare_output(out_dir, opts.overwrite)
            outdir.guarded(out_dir, outdir.save_run, out_dir, identity)
        return job
    except BaseException:
        lock.release(remove=False)
        raise


def _open_remote_job(opts: PackOptions, setup: TokenSetup, identity: dict[str, Any], rows_per_shard: int) -> Job:
    """A remote --output: the lock and the shards being built live in a local staging directory."""
    remote = storage.RemoteDir(opts.output)
    staging = storage.staging_dir(opts.output, opts.tmp_dir)
    lock = outdir.claim_output(staging)
    try:
        job = Job(opts, setup, staging, lock, identity, rows_per_shard, remote=remote)
        if opts.resume and remote.names():
            remote_output.check_resumable(remote, identity)
            job.finished = remote.exists("manifest.json")
            if not job.finished and opts.engine == "local":  # Ray's shard tasks keep a ledger instead
                name = lambda i: shard_name(i, opts.format)  # noqa: E731
                job.done_shards = remote_output.completed_shards(remote, staging, opts.format, name)
        else:
            remote_output.prepare(remote, staging, identity, opts.overwrite)
        return job
    except BaseException:
        lock.release(remove=False)
        raise


def publish(job: Job, shards: list[ShardInfo]) -> None:
    """Finished shards of a remote output go up as each completes."""
    if job.remote is not None and len(shards) > job.published:
        job.published = remote_output.publish(job.remote, job.out_dir, shards, job.published, job.done_shards)


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
        check_documents(outcome)
        with timer.stage("write"):
            outcome.shards = outdir.guarded(job.out_dir, writer.close)
            publish(job, outcome.shards)
        outcome.group_counts = writer.group_counts
        return outcome
    except BaseException:
        writer.abort()
        raise


def make_segmenter(
    opts: PackOptions, setup: TokenSetup, counts: IngestCounts, groups: GroupTable | None = None
) -> Segmenter:
    """The segmenter both engines run: an explicit --pad-id other than EOS/BOS is refused in data."""
    refuse_pad = opts.pad_id if opts.pad_id is not None and opts.pad_id not in (setup.eos_id, setup.bos_id) else None
    return Segmenter(
        opts.seq_len,
        opts.mode,
        opts.resolved_overlong,
        refuse_pad,
        counts,
        groups=groups,
        keep_unlearned=opts.keep_unlearned,
        truncation_side=opts.resolved_truncation_side,
    )


def check_documents(outcome: Outcome) -> None:
    if outcome.counts.sequences_in == 0:
        skipped = outcome.bad["skipped"]
        raise PackcliError(
            f"no documents to pack in the input{f' ({skipped:,} bad records skipped)' if skipped else ''}"
        )


def _one_plan(job: Job, chunks: Chunks, outcome: Outcome, writer: ShardWriter, bad: BadRecords, timer: Timer) -> None:
    """The default: spill everything, plan every row at once, then gather and write."""
    spill = spilling.open_complete(job.spill_dir, job.run_id) if job.opts.resume else None
    if spill is not None:
        job.spill_reused = True
        outcome.counts = IngestCounts(**spill.meta["counts"])
        outcome.bad = spill.meta["bad"]
        if job.opts.group_by is not None:
            job.groups = GroupTable.from_dict(spill.meta["groups"])
            group_ids = load_group_ids(job.spill_dir, len(spill.lengths))
    else:
        spill = _spill_all(job, chunks, timer, lambda: _spill_meta(job, outcome, bad))
        outcome.bad = spill.meta["bad"]
        if job.groups is not None:
            group_ids = load_group_ids(job.spill_dir, len(spill.lengths))
    job.spill_bytes = spilling.spill_size(job.spill_dir)
    try:
        groups = group_ids if job.opts.group_by is not None else None
        _plan_and_write(job, spill, outcome, writer, timer, index=0, final=True, groups=groups)
    finally:
        spill.close()


def _spill_all(job: Job, chunks: Chunks, timer: Timer, meta: Callable[[], dict[str, Any]]) -> Spill:
    """Every segment into the spill; `meta()` (the counts, once all is read) goes in its record."""
    masked = job.setup.builder.labels != "text"
    writer = outdir.guarded(job.spill_dir, SpillWriter, job.spill_dir, ids_dtype(job.setup.vocab_size), masked)
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
    plan = plan_segments(job, outcome, timer, spill.lengths, index, final, groups)
    pad_id = job.setup.pad_id
    if SHARD_THREADS > 1 and final and not writer.started and plan.n_rows > job.rows_per_shard:
        with timer.stage("write"):
            _write_shards_at_once(job, spill, plan, outcome, writer)
        return plan
    # Rows are built on a thread while the block before them is written here: the row
    # kernel and pyarrow's compression both run without the GIL.
    built = prefetch(
        timer.timed_iter("write", gather_rows(spill, plan, opts.seq_len, pad_id, multiple=multiple)), depth=1
    )
    first_row = 0
    try:
        for rows in built:
            with timer.stage("write"):
                outcome.stats.add(rows)
                row_group = None if plan.row_group is None else plan.row_group[first_row : first_row + len(rows)]
                outdir.guarded(job.out_dir, writer.add, rows, row_group)
                first_row += len(rows)
                if job.remote is not None:
                    publish(job, writer.hashed_shards())
    finally:
        built.close()
    return plan


SHARD_THREADS = 2  # shards written at the same time by the one-plan path


def _write_shards_at_once(job: Job, spill: Spill, plan: Plan, outcome: Outcome, writer: ShardWriter) -> None:
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
            if gathering[0] == 0 and job.remote is None:
                spill.close()
                job.spill_removal = spilling.start_removal(job.spill_dir)

    def one(index: int) -> tuple[ShardWriter, RowStats]:
        return _write_one_shard(job, spill, plan, writer.for_shard(index), order, stop, gathered)

    pool = ThreadPoolExecutor(max_workers=SHARD_THREADS, thread_name_prefix="packcli-shard")
    futures = [pool.submit(one, i) for i in range(shards)]
    try:
        for future in futures:
            part, stats = future.result()
            writer.absorb(part)
            outcome.stats.merge(stats)
            publish(job, writer.hashed_shards())
    except BaseException:
        stop.set()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _write_one_shard(
    job: Job,
    spill: Spill,
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


def plan_segments(
    job: Job,
    outcome: Outcome,
    timer: Timer,
    lengths: np.ndarray,
    index: int = 0,
    final: bool = True,
    groups: np.ndarray | None = None,
) -> Plan:
    """The plan both engines make of a window's segment lengths (the whole input without
    --buffer-size), with what --max-sequences-per-row cost and what the report needs."""
    opts = job.opts
    with timer.stage("plan"):
        plan = plan_window(lengths, opts.plan_settings(), index, final, groups)
    if opts.max_sequences_per_row is not None:
        job.uncapped_rows += uncapped_rows(lengths, opts.plan_settings(), groups)
    account_plan(job, outcome, plan)
    return plan


def account_plan(job: Job, outcome: Outcome, plan: Plan) -> None:
    """What the report needs from a plan: the packed lengths (bin) and the remainder."""
    seq_len = job.opts.seq_len
    counts = None
    if isinstance(plan, RowPlan):  # bin mode
        placed = padded_lengths(plan.piece_len, job.opts.pad_multiple)  # the room each one took
        counts = np.bincount(placed, minlength=seq_len + 1)[: seq_len + 1]
    elif isinstance(plan, PatternPlan):
        counts = plan.placed_histogram()
    if counts is not None:
        job.histogram = counts if job.histogram is None else job.histogram + counts
    outcome.remainder_tokens += plan.remainder_tokens
    job.windows += 1


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
                None
                if job.segmenter is None or job.groups is None
                else job.segmenter.group_ids.take(len(spill.lengths))
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


def bad_dict(bad: BadRecords | None) -> BadRecordCounts:
    """The reader's tally for the report and the spill record (None: nothing read yet)."""
    if bad is None:
        return {"read": 0, "skipped": 0, "by_reason": {}, "examples": []}
    return {
        "read": bad.records_seen,
        "skipped": bad.total,
        "by_reason": dict(bad.counts),
        "examples": list(bad.examples),
    }


def _report(job: Job, outcome: Outcome, workers: dict[str, Any], timer: Timer, total: float) -> Report:

    opts, counts = job.opts, outcome.counts
    summary = outcome.stats.summary()
    buffer = None
    if opts.mode == "bin":
        one = bfd_rows_from_counts(job.histogram, opts.seq_len) if job.histogram is not None else 0
        buffer = buffer_section(opts, summary, windows=job.windows, bfd_rows_in_one_window=one)
    report = build_report(
        opts,
        job.setup,
        summary=summary,
        no_packing=no_packing_baseline(counts.unpacked_rows, summary["real_tokens"], opts.seq_len),
        counts=counts,
        bad=outcome.bad,
        workers=workers,
        remainder_tokens=outcome.remainder_tokens,
        buffer=buffer,
        spill={"bytes": job.spill_bytes, "reused": job.spill_reused, "tmp_dir": opts.tmp_dir},
        timings=timer.seconds,
        total_seconds=total,
    )
    _add_groups_and_cap(job, outcome, report)
    report["engine"] = job.engine
    if "workers" in job.engine:
        report["workers"] = job.engine["workers"]
    return report


def _add_groups_and_cap(job: Job, outcome: Outcome, report: Report) -> None:
    """The --group-by table and what --max-sequences-per-row cost, when they were asked for."""
    if job.groups is not None:
        every_token = job.opts.mode == "bin" or job.opts.remainder == "pad"
        outcome.groups = group_entries(job.groups, outcome.group_counts, job.opts.seq_len, hashed=every_token)
        report["groups"] = outcome.groups
    cap = job.opts.max_sequences_per_row
    if cap is not None:
        custom = ":" in job.opts.algorithm
        report["max_sequences_per_row"] = {
            "cap": cap,
            "rows": report["rows"],
            "uncapped_rows": None if custom else job.uncapped_rows,
            "extra_rows": None if custom else report["rows"] - job.uncapped_rows,
        }


def _manifest(job: Job, outcome: Outcome, report: Report) -> Manifest:

    opts, setup = job.opts, job.setup
    return build_manifest(
        opts,
        setup,
        labels=setup.builder.labels,
        options=resolved_options(opts, setup, job.rows_per_shard),
        npy_ids_dtype=ids_dtype(setup.vocab_size).name,
        totals={"rows": report["rows"], "sequences": report["sequences_packed"], "real_tokens": report["real_tokens"]},
        shards=[s.to_dict() for s in outcome.shards],
        groups=outcome.groups if opts.group_by is not None else None,
    )


def _finish(job: Job, outcome: Outcome, report: Report) -> None:
    """Report, then manifest (last: its presence means complete), while the spill goes (it
    may be going already: `_write_shards_at_once` starts its removal once every row is
    gathered). A run that fails from then on has no spill: --resume keeps the finished
    shards and reads the input again."""
    out = job.out_dir
    removal = job.spill_removal or spilling.start_removal(job.spill_dir)
    try:
        outdir.guarded(out, outdir.write_json_atomic, out / "report.json", report)
        outdir.guarded(out, outdir.write_json_atomic, out / "manifest.json", _manifest(job, outcome, report))
        if job.remote is not None:
            remote_output.finish(job.remote, out)
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


def resolved_options(opts: PackOptions, setup: TokenSetup, rows_per_shard: int) -> dict[str, Any]:
    resolved = asdict(opts)
    resolved.update(
        input=opts.input_kind,
        text_field=(opts.text_field or "text") if opts.input_kind == "text" else None,
        bos=setup.add_bos,
        overlong=opts.resolved_overlong if opts.mode == "bin" else None,
        truncation_side=opts.resolved_truncation_side,
        pad_id=setup.pad_id,
        rows_per_shard=rows_per_shard,
    )
    for name in (
        "workers",
        "overwrite",
        "resume",
        "output",
        "tmp_dir",
        "engine",
        "ray_address",
        "no_cache",
    ):  # none changes the shards
        resolved.pop(name)
    return resolved
