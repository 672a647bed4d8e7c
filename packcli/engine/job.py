"""One run of `pack`, as both engines see it: its output (local or remote), identity and
resume state, what its stages hand to the report, and the steps both engines share
(the segmenter, the plan of a window, the bad-record tally)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from packcli.core import storage
from packcli.core.errors import PackcliError
from packcli.core.flow import Timer
from packcli.core.options import PackOptions
from packcli.core.version import __version__
from packcli.engine.ingest import IngestCounts, Segmenter
from packcli.plan.grouping import GroupEntry, GroupTable
from packcli.plan.patterns import histogram_plan
from packcli.plan.planner import Plan, from_counts, plan_window, uncapped_rows
from packcli.plan.settings import plan_settings
from packcli.read.records import BadRecords
from packcli.tokenize.setup import TokenSetup
from packcli.write import outdir
from packcli.write import remote as remote_output
from packcli.write.columns import npy_shard_files, shard_name
from packcli.write.manifest import FORMAT_VERSION, BadRecordCounts
from packcli.write.report import RowStats
from packcli.write.shards import ShardInfo

SHARD_TOKENS = 1 << 25


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
    published_manifest: bool = False  # a remote output's manifest is uploaded: the output is complete

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


def open_job(opts: PackOptions, setup: TokenSetup, paths: list[str]) -> Job:
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
                files = npy_shard_files(opts.pad_to_multiple_of is not None, opts.group_by is not None)
                job.done_shards = remote_output.completed_shards(remote, staging, opts.format, name, files)
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


def check_documents(outcome: Outcome, paths: list[str]) -> None:
    if outcome.counts.sequences_in == 0:
        skipped = outcome.bad["skipped"]
        raise PackcliError(
            f"no documents to pack in {input_names(paths)}{f' ({skipped:,} bad records skipped)' if skipped else ''}"
        )


def input_names(paths: list[str], shown: int = 3) -> str:
    """The inputs an error is about: `a.jsonl`, `a.jsonl, b.jsonl`, `a.jsonl, ... (12 files)`."""
    names = ["stdin" if path == "-" else path for path in paths]
    if not names:
        return "the input"
    if len(names) <= shown:
        return ", ".join(names)
    return f"{', '.join(names[:shown])}, ... ({len(names):,} files)"


def plan_segments(
    job: Job,
    outcome: Outcome,
    timer: Timer,
    lengths: np.ndarray,
    index: int = 0,
    final: bool = True,
    groups: np.ndarray | None = None,
    by_bucket: bool = False,
) -> Plan:
    """The plan both engines make of a window's segment lengths (the whole input without
    --buffer-size), with what --max-sequences-per-row cost and what the report needs.
    `by_bucket`: see planner.plan_window."""
    opts = job.opts
    with timer.stage("plan"):
        plan = plan_window(lengths, plan_settings(opts), index, final, groups, by_bucket)
    if opts.max_sequences_per_row is not None:
        job.uncapped_rows += uncapped_rows(lengths, plan_settings(opts), groups)
    account_plan(job, outcome, plan)
    return plan


# Bin mode plans from counts read a spill sorted by bucket (write/by_length.py) when rows
# hold at least this many sequences on average: a row of short sequences is then a few
# ranges of that file instead of as many pieces of the spill as it has sequences. Longer
# sequences are few pieces a row already, and the copy would cost more than it saves.
BY_BUCKET_SEQUENCES_PER_ROW = 8


def by_bucket(opts: PackOptions, tokens: int, sequences: int) -> bool:
    """Whether a window of `sequences` segments and `tokens` tokens is gathered from the
    spill sorted by bucket: bin mode planned from counts, rows of many sequences."""
    if opts.mode != "bin" or not from_counts(plan_settings(opts)):
        return False
    return tokens * BY_BUCKET_SEQUENCES_PER_ROW <= sequences * opts.seq_len


def spills_by_length(opts: PackOptions) -> bool:
    """Whether one plan of the whole input may read its sequences by (length, rank): bin
    mode from counts, each length its own bucket (no --group-by or --pad-to-multiple-of).
    The local engine then writes its spill by length (SpillWriter's `by_length`) when
    its first chunk's rows would be many sequences each (`by_bucket`), so that the gather
    needs no sorted copy of it. The whole input decides only once it is spilled: a plan
    not by bucket reads a spill written by length through its slot map
    (by_length.file_slot_starts), and one by bucket copies a spill in input order."""
    return (
        opts.mode == "bin"
        and opts.buffer_size is None
        and opts.group_by is None
        and opts.pad_multiple == 1
        and from_counts(plan_settings(opts))
    )


def from_histogram(opts: PackOptions, tokens: int, sequences: int, histogram: np.ndarray, grouped: bool) -> bool:
    """Whether both engines plan a window from its length histogram alone (plan_histogram),
    the lengths left on disk: by bucket, without --group-by, --pad-to-multiple-of or
    --max-sequences-per-row, every length within --seq-len."""
    return (
        by_bucket(opts, tokens, sequences)
        and not grouped
        and opts.pad_multiple == 1
        and opts.max_sequences_per_row is None
        and len(histogram) <= opts.seq_len + 1
    )


def plan_histogram(job: Job, outcome: Outcome, timer: Timer, histogram: np.ndarray, index: int = 0) -> Plan:
    """plan_segments for a bin-mode plan from counts without --group-by,
    --pad-to-multiple-of or --max-sequences-per-row: from the window's length histogram
    alone (patterns.histogram_plan), for the spill sorted by length."""
    s = plan_settings(job.opts)
    with timer.stage("plan"):
        plan = histogram_plan(histogram, s.seq_len, str(s.algorithm), shuffle=s.shuffle, seed=s.seed, window=index)
    account_plan(job, outcome, plan)
    return plan


def account_plan(job: Job, outcome: Outcome, plan: Plan) -> None:
    """What the report needs from a plan: the packed lengths (bin) and the remainder."""
    counts = plan.placed_histogram(job.opts.seq_len, job.opts.pad_multiple)
    if counts is not None:
        job.histogram = counts if job.histogram is None else job.histogram + counts
    outcome.remainder_tokens += plan.remainder_tokens
    job.windows += 1


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
