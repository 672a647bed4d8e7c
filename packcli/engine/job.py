"""One run of `pack`, as both engines see it: its output (local or remote), identity and
resume state (Job), what its steps hand to the report (Outcome), and the plan step both
engines run (PlanStep: a window's plan from its lengths, or from its length histogram
alone), with the other pieces they share (the segmenter, the bad-record tally)."""

from __future__ import annotations

from collections.abc import Callable
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
from packcli.engine.pairs import value_columns, value_segmenter
from packcli.plan.contract import Plan
from packcli.plan.grouping import GroupEntry, GroupTable
from packcli.plan.pairs import PairPlan, plan_pairs, uncapped_pair_rows
from packcli.plan.patterns import PatternPlan, histogram_plan
from packcli.plan.planner import from_counts, plan_window, uncapped_rows
from packcli.plan.settings import plan_settings
from packcli.read.records import BadRecords
from packcli.tokenize.setup import TokenSetup
from packcli.write import outdir
from packcli.write import remote as remote_output
from packcli.write.columns import ids_dtype, npy_shard_files, shard_name
from packcli.write.manifest import FORMAT_VERSION, BadRecordCounts, SourceEntry
from packcli.write.report import RowStats
from packcli.write.shards import ShardInfo

SHARD_TOKENS = 1 << 25


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
    remote: storage.RemoteDir | None = None  # a remote --output; out_dir is then its local staging
    published: int = 0  # shards uploaded to the remote output so far
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
    """What a run's steps hand to the report and the manifest (engine/summary.py), which
    alone read it."""

    stats: RowStats
    counts: IngestCounts = field(default_factory=IngestCounts)
    bad: BadRecordCounts = field(default_factory=lambda: bad_dict(None))
    remainder_tokens: int = 0
    shards: list[ShardInfo] = field(default_factory=list)
    group_table: GroupTable | None = None  # --group-by: the values, once read (or from a reused spill)
    group_counts: np.ndarray = field(default_factory=lambda: np.zeros((0, 3), dtype=np.int64))
    group_entries: list[GroupEntry] = field(default_factory=list)  # the report's table of group_table
    windows: int = 0  # plans made (one per window of --buffer-size)
    placed: np.ndarray | None = None  # bin: segments per placed length, over every plan (the window cost)
    uncapped_rows: int = 0  # --max-sequences-per-row: rows of the same plans without the cap
    spill_bytes: int = 0  # the spill's size on disk at its largest
    spill_reused: bool = False  # --resume took a complete spill: nothing was read again
    engine: dict[str, Any] = field(default_factory=lambda: {"name": "local"})
    sources: list[SourceEntry] | None = None  # a mixture: the row per source of the report and the manifest
    mixture: dict[str, Any] | None = None  # a mixture: its seed, target and split, for the report


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
            job.finished = storage.is_complete(out_dir)
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
            job.finished = storage.is_complete(remote)
            if not job.finished and opts.engine == "local":  # Ray's shard tasks keep a ledger instead
                name = lambda i: shard_name(i, opts.format)  # noqa: E731
                segment_columns = ("segment_source",) if opts.mixed else value_columns(opts)
                files = npy_shard_files(
                    opts.pad_to_multiple_of is not None, opts.group_by is not None, segment_columns=segment_columns
                )
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
    if opts.per_segment_values:
        return value_segmenter(opts, counts, refuse_pad, groups, ids_dtype(setup.vocab_size))
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


# A plan from counts finds its slots by bucket (in the spill's sorted copy or its chunks
# written by length: write/by_length.py) when rows hold at least this many sequences on
# average: a row of short sequences is then a few ranges of the copy instead of as many
# pieces of the spill as it has sequences. Longer sequences are few pieces a row already,
# and the copy would cost more than it saves.
BY_BUCKET_SEQUENCES_PER_ROW = 8


def spills_by_length(opts: PackOptions) -> bool:
    """Whether one plan of the whole input may read its sequences by (length, rank): bin
    mode from counts, each length its own bucket (no --group-by or --pad-to-multiple-of).
    The local engine then writes its spill by length (SpillWriter's `by_length`) when
    its first chunk's rows would be many sequences each (PlanStep.gathers_by_bucket), so
    that the gather needs no sorted copy of it. The whole input decides only once it is
    spilled: a plan not by bucket reads a spill written by length through its slot map
    (by_length.file_slot_starts), and one by bucket copies a spill in input order."""
    return (
        opts.mode == "bin"
        and opts.buffer_size is None
        and opts.group_by is None
        and opts.pad_multiple == 1
        and not opts.per_segment_values  # found by their places in a spill in input order
        and from_counts(opts.algorithm, opts.max_sequences_per_row)
    )


class PlanStep:
    """The plan step both engines run: the plan of a window (the whole input without
    --buffer-size) from its segment lengths, or, for rows of many short sequences, from
    its length histogram alone; what the report needs of each plan goes into `outcome`.
    The plan settings are computed once, here."""

    def __init__(self, opts: PackOptions, outcome: Outcome, timer: Timer):
        self.opts, self.outcome, self.timer = opts, outcome, timer
        self.settings = plan_settings(opts)

    def gathers_by_bucket(self, tokens: int, sequences: int) -> bool:
        """Whether a window of `sequences` segments and `tokens` tokens is gathered by bucket
        (from the spill's sorted copy or its chunks): bin mode planned from counts, rows of
        many sequences; never with per-segment values, found by their places in a spill in
        input order."""
        s = self.settings
        if s.mode != "bin" or not from_counts(s.algorithm, s.max_per_row) or self.opts.per_segment_values:
            return False
        return tokens * BY_BUCKET_SEQUENCES_PER_ROW <= sequences * s.seq_len

    def histogram_suffices(self, histogram: np.ndarray) -> bool:
        """Whether a window gathered by bucket is planned from its length histogram alone
        (`plan_histogram`), the lengths left on disk: without --group-by,
        --pad-to-multiple-of or --max-sequences-per-row, every length within --seq-len."""
        s = self.settings
        return (
            self.opts.group_by is None and s.multiple == 1 and s.max_per_row is None and len(histogram) <= s.seq_len + 1
        )

    def plan_lengths(
        self,
        lengths: np.ndarray,
        window: int = 0,
        final: bool = True,
        groups: np.ndarray | None = None,
        by_bucket: bool = False,
    ) -> Plan:
        """The plan of a window's segment lengths, with what --max-sequences-per-row cost.
        `by_bucket`: see planner.plan_window."""
        with self.timer.stage("plan"):
            plan = plan_window(lengths, self.settings, window, final, groups, by_bucket)
        if self.settings.max_per_row is not None:
            self.outcome.uncapped_rows += uncapped_rows(lengths, self.settings, groups)
        self.account(plan)
        return plan

    def plan_pairs(self, first: np.ndarray, lengths: np.ndarray, groups: np.ndarray | None = None) -> PairPlan:
        """The plan of preference pairs placed whole (plan/pairs.py): `first`, each pair's
        chosen length, and `lengths`, its two segments', in spill order."""
        with self.timer.stage("plan"):
            plan = plan_pairs(first, lengths, self.settings, groups)
        if self.opts.max_sequences_per_row is not None:
            self.outcome.uncapped_rows += uncapped_pair_rows(first, lengths, self.settings, groups)
        self.account(plan)
        return plan

    def plan_histogram(self, histogram: np.ndarray, window: int = 0) -> PatternPlan:
        """The plan of a window from its length histogram alone (patterns.histogram_plan),
        its slots found by bucket (see `histogram_suffices`)."""
        s = self.settings
        with self.timer.stage("plan"):
            plan = histogram_plan(histogram, s.seq_len, str(s.algorithm), shuffle=s.shuffle, seed=s.seed, window=window)
        self.account(plan)
        return plan

    def account(self, plan: Plan) -> None:
        """What the report needs from a plan: the placed lengths (bin) and the remainder."""
        outcome = self.outcome
        counts = plan.placed_histogram()
        if counts is not None:
            outcome.placed = counts if outcome.placed is None else outcome.placed + counts
        outcome.remainder_tokens += plan.remainder_tokens
        outcome.windows += 1


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
        mix=None if opts.mix is None else opts.mix.to_dict(),
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
