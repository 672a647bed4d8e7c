"""A training mixture: every source read and tokenized once, then taken as the mixture
says into one output, or, with --holdout, into DIR/train/ and DIR/validation/.

1. Read: each source with its own input fields, into a spill per side of the split
   (write/sources.py: each segment's document ordinal beside it). A document's side is a
   hash of its key (read/keys.py), never of its place in the input.
2. Resolve: each source's whole epochs and the prefix of its permutation the partial
   epoch takes (plan/mixture.py), from the training side's tokens.
3. Write each output with the local engine's own Run: its batches are the source
   spills taken source after source, round after round (so copies of a document lie an
   epoch of its source apart in the spill), and its segments tagged with their source
   (segment_source): by spill range, or by rank for a plan of row patterns.

The source spills live beside the outputs (or under --tmp-dir) until every output is
complete, so --resume reads nothing again once they are; an output's own spill is reused
as a plain run's is.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from packcli.core import storage
from packcli.core.errors import Interrupted, PackcliError
from packcli.core.flow import Timer, signals_raise
from packcli.core.mixture import MixSpec
from packcli.core.options import PackOptions
from packcli.core.pause import pause
from packcli.engine.ingest import IngestCounts, SegmentBatch, SegmentSource, TokenStream
from packcli.engine.job import Job, Outcome, Progress, open_job
from packcli.engine.local import Run, finish_output, finished_report, output_complete
from packcli.engine.sources import (
    TRAIN,
    VALIDATION,
    Side,
    SourceRead,
    SourceReader,
    SourcesToRead,
    complete_sides,
    key_fields,
    merged_bad,
    merged_counts,
    side_dir,
    side_of_record,
)
from packcli.engine.summary import run_report
from packcli.plan.contract import Plan
from packcli.plan.grouping import GroupIds, GroupTable
from packcli.plan.mixture import SegmentStream, SourceTotals, Take, resolve
from packcli.plan.patterns import PatternPlan
from packcli.read.inputs import expand_inputs
from packcli.read.records import BadRecords
from packcli.tokenize.setup import Borrowed, TokenSetup, setup_sources
from packcli.write import outdir
from packcli.write import spill as spilling
from packcli.write.gather import PieceTags, RankRanges, SpillRanges
from packcli.write.manifest import Report, SourceEntry
from packcli.write.spill import Spill

if TYPE_CHECKING:
    from packcli.tokenize.fastbpe import Encoder

SOURCE_COLUMN = "segment_source"
SOURCES_DIR = ".packcli-spill-sources"  # beside the outputs: owned, as every .packcli-spill* is


class Mixture:
    """One mixture run: its sources' options and setups, where its source spills go, and
    its outputs (one, or train and validation)."""

    def __init__(self, opts: PackOptions):
        self.opts = opts
        self.spec: MixSpec = opts.sources()
        self.seed = self.spec.seed if self.spec.seed is not None else opts.seed
        self.source_opts = [opts.source_options(i) for i in range(len(self.spec.sources))]
        self.paths = [expand_inputs(o.inputs) for o in self.source_opts]
        self.sides = (TRAIN, VALIDATION) if opts.holdout is not None else (TRAIN,)
        self.setups: list[TokenSetup] = []
        self.encoders: list[Encoder] = []  # the sources' own encoders, closed at the end of the run

    @property
    def output_setup(self) -> TokenSetup:
        """The setup an output is written with: a source's whose labels are masked, if any
        (the output's spill then keeps learned bits), else the first's."""
        return next((s for s in self.setups if s.builder.labels != "text"), self.setups[0])

    @property
    def all_paths(self) -> list[str]:
        return [path for paths in self.paths for path in paths]

    def output_options(self, side: str) -> PackOptions:
        """The options of one output: DIR itself, or DIR/train and DIR/validation."""
        if self.opts.holdout is None:
            return self.opts
        base = self.opts.output.rstrip("/")
        output = f"{base}/{side}" if storage.is_remote(base) else str(Path(base) / side)
        return replace(self.opts, output=output, split=side)

    def sources_dir(self, job: Job) -> Path:
        """Where the source spills go: beside the outputs, or under --tmp-dir."""
        if self.opts.tmp_dir:
            return Path(self.opts.tmp_dir) / f"packcli-sources-{job.run_id}"
        root = job.out_dir.parent if self.opts.holdout is not None and job.remote is None else job.out_dir
        return root / SOURCES_DIR


def run_mixture(opts: PackOptions, started: float, progress: Progress | None) -> Report:
    """Pack a mixture (or one input with --holdout); the report of its one output, or
    {"splits": {"train": ..., "validation": ...}}."""
    mixture = Mixture(opts)
    timer = Timer()
    mixture.setups = setup_sources(mixture.source_opts)
    bads = [BadRecords() for _ in mixture.source_opts]
    streams = _open_streams(mixture, bads, timer)
    top = _claim_top(mixture) if opts.holdout is not None else None
    jobs: dict[str, Job] = {}
    try:
        for side in mixture.sides:
            jobs[side] = open_job(mixture.output_options(side), mixture.output_setup, mixture.all_paths)
        if all(job.finished for job in jobs.values()):
            _close(streams)
            reports = {side: finished_report(job) for side, job in jobs.items()}
            return _joined(reports)
        with signals_raise():
            pause("claimed")
            sources_dir = mixture.sources_dir(jobs[TRAIN])
            reads = _read_sources(mixture, streams, bads, sources_dir, jobs[TRAIN].run_id, timer, progress)
            takes = _resolve(mixture, reads)
            workers = (
                next(s for s in streams if s is not None).workers if any(streams) else {"kind": "none", "count": 0}
            )
            reports = {}
            for side in reversed(mixture.sides):  # validation first: DIR/train's manifest, last, means all is done
                job = jobs[side]
                reports[side] = (
                    finished_report(job)
                    if job.finished
                    else _write_output(mixture, job, side, reads, takes[side], timer, started, workers)
                )
            spilling.remove_spill(sources_dir)
        return _joined({side: reports[side] for side in mixture.sides})
    except KeyboardInterrupt as stop:
        stop.output_complete = all(output_complete(j) for j in jobs.values()) and bool(jobs)  # type: ignore[attr-defined]
        raise
    except Interrupted as stop:
        if jobs and all(output_complete(j) for j in jobs.values()):
            raise stop.completed() from None
        raise
    finally:
        _close(streams)
        for encoder in mixture.encoders:
            getattr(encoder, "close", lambda: None)()
        for job in jobs.values():
            job.lock.release()
            if job.remote is not None and (job.finished or storage.is_complete(job.out_dir)):
                outdir.remove_path(job.out_dir)
        if top is not None:
            top.release()


def _joined(reports: dict[str, Report]) -> Report:
    if list(reports) == [TRAIN] and len(reports) == 1:
        return reports[TRAIN]
    joined: Report = {"splits": reports}  # type: ignore[typeddict-item]  # the rows' figures are each split's
    return joined


def _close(streams: list[TokenStream | None]) -> None:
    for stream in streams:
        if stream is not None:
            stream.close()


# ----------------------------------------------------------------------------- the top directory


def _claim_top(mixture: Mixture) -> outdir.OutputLock | None:
    """With --holdout, DIR holds the two outputs: locked for the run, emptied by --overwrite,
    refused when it holds anything else (remote outputs lock their staging instead)."""
    opts = mixture.opts
    if storage.is_remote(opts.output):
        return None
    top = Path(opts.output)
    lock = outdir.claim_output(top)
    try:
        entries = sorted(p.name for p in top.iterdir() if p.name != outdir.LOCK_FILE)
        foreign = [n for n in entries if n not in (TRAIN, VALIDATION) and not n.startswith(outdir.SPILL_DIR)]
        if foreign:
            raise PackcliError(
                f"output directory {top} holds files packcli did not write ({', '.join(foreign[:3])}); "
                "--holdout writes DIR/train and DIR/validation into an empty directory: choose another --output"
            )
        if entries and not (opts.overwrite or opts.resume):
            raise PackcliError(
                f"output directory {top} is not empty; pass --overwrite to replace it, or --resume to continue an interrupted run"
            )
        if opts.overwrite:
            for name in sorted(entries, key=lambda n: n not in (TRAIN, VALIDATION)):
                outdir.remove_path(top / name)
        return lock
    except BaseException:
        lock.release(remove=False)
        raise


# ----------------------------------------------------------------------------- reading


def _open_streams(mixture: Mixture, bads: list[BadRecords], timer: Timer) -> list[TokenStream | None]:
    """Every source's reader and tokenizer, opened before any output is touched: a first
    batch that is refused leaves them as they were (the Ray engine's tasks read the rest).
    The text sources share one encoder where it serves each (one vocabulary in memory),
    closed by the mixture once every source is read (`mixture.encoders`)."""
    streams: list[TokenStream | None] = []
    try:
        for opts, setup, paths, bad in zip(mixture.source_opts, mixture.setups, mixture.paths, bads):
            shared = mixture.encoders[0] if mixture.encoders else None
            stream = TokenStream(opts, setup, paths, bad, timer, extra_fields=key_fields(opts), shared_encoder=shared)
            streams.append(stream)
            if setup.encoder is not None and not isinstance(setup.encoder, Borrowed):
                mixture.encoders.append(setup.encoder)  # the mixture's to close; the stream borrows it
                setup.encoder = Borrowed(setup.encoder)
    except BaseException:
        _close(streams)
        raise
    return streams


def _read_sources(
    mixture: Mixture,
    streams: list[TokenStream | None],
    bads: list[BadRecords],
    directory: Path,
    run_id: str,
    timer: Timer,
    progress: Progress | None,
) -> list[SourceRead]:
    """Every source into its side spills; on --resume, the complete ones of the
    interrupted run are taken as they are (sources are read in order, so a group table
    continues from the last one taken)."""
    opts = mixture.opts
    if opts.engine == "ray":
        _close(streams)  # they checked each source's first batch and chose its backend; tasks read the rest
        from packcli.engine.ray_driver import read_sources

        named = [
            (s.name, own, paths, setup.backend)
            for s, own, paths, setup in zip(mixture.spec.sources, mixture.source_opts, mixture.paths, mixture.setups)
        ]
        request = SourcesToRead(named, mixture.sides, directory, run_id, mixture.setups[0].fingerprint)
        return read_sources(opts, request, progress)
    groups = GroupTable(opts.group_by) if opts.group_by is not None else None
    reads: list[SourceRead] = []
    reusing = opts.resume
    for i, (source, own) in enumerate(zip(mixture.spec.sources, mixture.source_opts)):
        dirs = {side: side_dir(directory, i, side) for side in mixture.sides}
        found = complete_sides(dirs, run_id) if reusing else None
        stream = streams[i]
        if found is None:
            reusing = False
            assert stream is not None
            reader = SourceReader(own, mixture.setups[i], dirs, run_id, groups, timer)
            found = reader.read(stream, bads[i], progress)
            pause("source-spilled")
        elif stream is not None:
            stream.close()
        meta = next(iter(found.values())).meta
        if groups is not None:
            groups = GroupTable.from_dict(meta["groups"])
        sides = {side: side_of_record(spill) for side, spill in found.items()}
        reads.append(SourceRead(source.name, own.input_kind, mixture.paths[i], meta["bad"], sides, meta.get("groups")))
    return reads


# ----------------------------------------------------------------------------- resolving


def _resolve(mixture: Mixture, reads: list[SourceRead]) -> dict[str, list[Take]]:
    """Each output's takes: the training side's by the mixture, the held-out side's every
    document once."""
    train = [read.sides[TRAIN] for read in reads]
    totals = [SourceTotals(side.documents, side.tokens) for side in train]
    streams: list[SegmentStream] = [side.stream for side in train]
    takes = {TRAIN: resolve(mixture.spec, totals, streams, mixture.seed)}
    if VALIDATION in mixture.sides:
        held = [read.sides[VALIDATION] for read in reads]
        if sum(side.sequences for side in held) == 0:
            documents = sum(side.documents for side in train)
            raise PackcliError(
                f"--holdout {mixture.opts.holdout:g} held out none of the {documents:,} documents: "
                "nothing to write to the validation output (hold out a larger fraction)"
            )
        takes[VALIDATION] = [Take(i, side.documents, side.tokens, 1, 0, 0, mixture.seed) for i, side in enumerate(held)]
    return takes


# ----------------------------------------------------------------------------- one output


@dataclass
class Layout:
    """Where each source lies in one output's spill, worked out from the side spills'
    documents and lengths alone (no token is read), so a resumed run that reuses the
    output's spill has it too: each source's first token and first segment, its
    placed-length histogram (for the tags), the documents taken (copies counted, and
    once) and the rows of no packing."""

    token_bounds: np.ndarray  # int64 [sources + 1]
    segment_bounds: np.ndarray  # int64 [sources + 1]
    histograms: np.ndarray  # int64 [sources, seq_len + 1]: segments per placed length
    taken: np.ndarray  # int64 [sources]: copies of documents with a segment
    unique: np.ndarray  # int64 [sources]: documents with a segment taken at least once
    unpacked_rows: int


def layout(
    streams: list[SegmentStream], takes: list[Take], seq_len: int, multiple: int = 1, concat: bool = False
) -> Layout:
    """The Layout of one output (see there): `streams[i]`, source i's (document, length)
    per segment, read once per round."""
    n = len(streams)
    out = Layout(
        np.zeros(n + 1, dtype=np.int64),
        np.zeros(n + 1, dtype=np.int64),
        np.zeros((n, seq_len + 1), dtype=np.int64),
        np.zeros(n, dtype=np.int64),
        np.zeros(n, dtype=np.int64),
        0,
    )
    tokens, segments = 0, 0
    for i, (stream, take) in enumerate(zip(streams, takes)):
        out.token_bounds[i], out.segment_bounds[i] = tokens, segments
        for epoch in range(take.rounds):
            last = -1  # the document of the round's last segment taken so far: documents are contiguous
            count = 0
            for documents, lengths in stream():
                keep = take.taken(documents, epoch)
                documents, lengths = documents[keep], lengths[keep]
                if not len(lengths):
                    continue
                count += int((np.diff(documents) != 0).sum()) + int(documents[0] != last)
                last = int(documents[-1])
                placed = np.minimum(-(-lengths // multiple) * multiple, seq_len)
                out.histograms[i] += np.bincount(placed, minlength=seq_len + 1)[: seq_len + 1]
                rows = -(-lengths // seq_len) if concat else np.ones(len(lengths), dtype=np.int64)
                out.unpacked_rows += int(rows.sum())
                tokens += int(lengths.sum())
                segments += len(lengths)
            out.taken[i] += count
            if epoch == 0:
                out.unique[i] = count
    out.token_bounds[-1], out.segment_bounds[-1] = tokens, segments
    return out


def mixed_batches(
    sides: list[Side],
    takes: list[Take],
    masked: bool,
    group_table: GroupTable | None = None,
    group_ids: GroupIds | None = None,
) -> Iterator[SegmentBatch]:
    """One output's segments: each source's side spill taken round after round by its
    take, sources in order (so copies of a document are a round of its source apart);
    every token of a source without masked labels learned where the output's are masked;
    with --group-by, each segment's group id into `group_ids` and its tokens into the
    table's hashes, as the local engine's segmenter does."""
    for side, take in zip(sides, takes):
        for epoch in range(take.rounds):
            for chunk in side.chunks():
                if epoch >= take.full:
                    chunk = chunk.select(take.taken(chunk.documents, epoch))
                if not len(chunk.lengths):
                    continue
                if group_table is not None and group_ids is not None and chunk.groups is not None:
                    group_ids.append(chunk.groups)
                    group_table.add_tokens(chunk.tokens, chunk.lengths, chunk.groups)
                learned = chunk.learned
                if masked and learned is None:
                    learned = np.ones(len(chunk.tokens), dtype=bool)
                yield SegmentBatch(chunk.tokens, chunk.lengths, learned)


def _output_counts(sides: list[Side]) -> IngestCounts:
    """The output's counts: its sources' sides added up, the rows of no packing left to be
    counted over its own segments (copies included)."""
    total = merged_counts([side.counts for side in sides])
    total.unpacked_rows = 0
    return total


def _output_bad(reads: list[SourceRead]) -> BadRecords:
    """The readers' tallies of every source, as one."""
    merged = merged_bad([read.bad for read in reads])
    bad = BadRecords(records_seen=int(merged["read"]), counts=dict(merged["by_reason"]))
    bad.examples = list(merged["examples"])
    return bad


def _write_output(
    mixture: Mixture,
    job: Job,
    side: str,
    reads: list[SourceRead],
    takes: list[Take],
    timer: Timer,
    started: float,
    workers: dict[str, Any],
) -> Report:
    """One output of the mixture, written by the local engine's Run; its report."""
    opts = job.opts
    sides = [read.sides[side] for read in reads]
    streams: list[SegmentStream] = [side.stream for side in sides]
    placed = layout(streams, takes, opts.seq_len, opts.pad_multiple, opts.mode == "concat")
    counts = _output_counts(sides)
    counts.unpacked_rows = placed.unpacked_rows
    table, ids = None, None
    if opts.group_by is not None:
        table = GroupTable.from_dict(reads[-1].groups or {})
        table.hashes = np.zeros(0, dtype=np.uint64)  # this output's own tokens, copies included
        ids = GroupIds()
    tagging = functools.partial(source_tags, placed, seq_len=opts.seq_len, multiple=opts.pad_multiple)
    run = Run(job, timer, tagging=tagging)
    masked = job.setup.builder.labels != "text"
    batches = mixed_batches(sides, takes, masked, table, ids)
    source = SegmentSource(batches, counts, _output_bad(reads), table, ids)
    run.execute(source, mixture.all_paths)
    outcome = run.outcome
    outcome.sources = _sources_table(mixture, side, reads, takes, placed, outcome)
    outcome.mixture = {
        "seed": mixture.seed,
        "target_tokens": mixture.spec.target_tokens,
        "max_epochs": mixture.spec.max_epochs,
        "holdout": opts.holdout,
        "split": opts.split,
    }
    report = run_report(job, outcome, workers, timer, time.perf_counter() - started)
    finish_output(job, outcome, report, run.spill_removal)
    return report


def source_tags(
    placed: Layout, plan: Plan, spill: Spill, groups: np.ndarray | None, *, seq_len: int, multiple: int
) -> PieceTags:
    """What gives each segment its source: the source's range of the spill, or, for a
    plan of row patterns (its slots may be read from a sorted copy or chunks), the range
    of ranks the source holds in each (group, placed length) bucket."""
    if not isinstance(plan, PatternPlan):
        return SpillRanges(SOURCE_COLUMN, placed.token_bounds[:-1])
    sources = len(placed.histograms)
    if groups is None:  # a bucket per placed length, every length listed
        counts = placed.histograms.T
        return RankRanges.from_cells(SOURCE_COLUMN, counts.reshape(-1), np.tile(np.arange(sources), len(counts)))
    lengths = spill.lengths
    length_of = np.minimum(-(-lengths // multiple) * multiple, seq_len)
    present = np.unique(groups)
    position = np.zeros(int(present.max(initial=0)) + 1, dtype=np.int64)
    position[present] = np.arange(len(present))  # buckets of groups in increasing id, as the plan counts ranks
    source = np.repeat(np.arange(sources), np.diff(placed.segment_bounds))
    key = (position[groups] * (seq_len + 1) + length_of) * sources + source
    cells, count = np.unique(key, return_counts=True)
    return RankRanges.from_cells(SOURCE_COLUMN, count, cells % sources)


def _sources_table(
    mixture: Mixture, side: str, reads: list[SourceRead], takes: list[Take], placed: Layout, outcome: Outcome
) -> list[SourceEntry]:
    """The report's and the manifest's row per source."""
    measured = outcome.stats.per_source(len(reads))
    out_total = int(measured[:, 1].sum())
    planned = sum(take.target_tokens if take.target_tokens is not None else take.tokens for take in takes)
    entries: list[SourceEntry] = []
    for i, (read, take) in enumerate(zip(reads, takes)):
        source = mixture.spec.sources[i]
        own = read.sides[side]
        taken, unique = int(placed.taken[i]), int(placed.unique[i])
        weighted = side == TRAIN and take.target_tokens is not None
        held = read.sides[VALIDATION].documents if VALIDATION in read.sides else 0
        entries.append(
            {
                "name": read.name,
                "index": i,
                "paths": read.paths,
                "input": read.kind,
                "weight": source.weight if side == TRAIN else None,
                "epochs": take.epochs,
                "target_share": (take.target_tokens or 0.0) / planned if weighted and planned else None,
                "achieved_share": int(measured[i, 1]) / out_total if out_total else 0.0,
                "documents": {
                    "read": int(read.bad["read"]),
                    "skipped": int(read.bad["skipped"]),
                    "skipped_by_reason": dict(read.bad["by_reason"]),
                    "dropped": own.documents - own.kept,
                    "dropped_by_reason": _dropped_by_reason(own, mixture.source_opts[i]),
                    "held_out": held,
                    "available": own.documents,
                    "taken": taken,
                    "repeated": taken - unique,
                },
                "tokens": {"in": own.counts.tokens_in, "out": int(measured[i, 1]), "learned": int(measured[i, 2])},
            }
        )
    return entries


def _dropped_by_reason(side: Side, opts: PackOptions) -> dict[str, int]:
    """Documents left with no segment, by the rule that dropped them."""
    counts = side.counts
    reasons: dict[str, int] = {}
    if opts.mode == "bin" and opts.resolved_overlong == "drop" and counts.overlong:
        reasons["overlong"] = counts.overlong
    if counts.no_labels_dropped:
        reasons["truncated_without_labels"] = counts.no_labels_dropped
    if not opts.keep_unlearned and counts.unlearned_no_labels:
        reasons["no_labels"] = counts.unlearned_no_labels
    other = side.documents - side.kept - sum(reasons.values())
    if other > 0:
        reasons["other"] = other
    return reasons
