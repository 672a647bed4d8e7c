"""Read and tokenize: input records -> token sequences -> segments -> the spill.

Reading runs on a thread and tokenizing on another thread or on forked worker processes,
so batch k is spilled while the next ones are read and tokenized. Results are taken in
input order whatever the number of workers. `--overlong` is applied here, so the spill
holds exactly the segments the planner places, and nothing in memory grows with the corpus
but one length per segment.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Generator, Iterable, Iterator
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from packcli.core import storage
from packcli.core.errors import PackcliError
from packcli.core.flow import Timer, prefetch
from packcli.core.options import PackOptions
from packcli.plan.grouping import GroupIds, GroupTable
from packcli.plan.rows import cut_pieces, learned_bits
from packcli.read.batches import read_batches
from packcli.read.checks import FieldKind
from packcli.read.records import BadRecords
from packcli.tokenize.sequences import SequenceBatch
from packcli.tokenize.setup import TokenSetup, choose_backend
from packcli.tokenize.workers import WorkerPool, available_cores, can_fork
from packcli.write.values import SegmentValues

if TYPE_CHECKING:
    from packcli.read.records import BadRecords, RecordBatch
    from packcli.tokenize.fastbpe import Encoder

READ_BATCH = 1024
UNLEARNED_EXAMPLES = 10  # sequences with nothing to learn named in the report, as bad records are
Locate = Callable[[int], str]  # a sequence's index in its batch -> "file:line" or "file row N"


class SegmentBatch(NamedTuple):
    """The segments of one batch, in input order: what the segmenter makes of its
    sequences and the spill takes."""

    tokens: np.ndarray  # the segments' tokens, one after another
    lengths: np.ndarray  # int64 per segment
    learned: np.ndarray | None  # bool per token: whether it is learned (masked labels); None: every one is


@dataclass
class IngestCounts:
    """What the report says about sequences before they became rows."""

    sequences_in: int = 0
    tokens_in: int = 0  # tokens of every sequence tokenized, before --overlong and the unlearned rule
    unpacked_rows: int = 0  # rows if every sequence were padded to seq_len on its own
    overlong: int = 0
    overlong_tokens_lost: int = 0  # tokens cut off by truncate, or of sequences dropped by drop
    no_labels_dropped: int = 0  # overlong sequences that truncation left with nothing to learn
    special_token_records: int = 0
    # Segments with no learned token (bin mode, masked labels), by cause: dropped, or kept
    # with --keep-unlearned. no_labels: the sequence learns nothing at all; split_pieces:
    # pieces of a split sequence; truncated: what truncation kept of a sequence.
    unlearned_no_labels: int = 0
    unlearned_no_labels_tokens: int = 0
    unlearned_split_pieces: int = 0
    unlearned_split_pieces_tokens: int = 0
    unlearned_truncated: int = 0
    unlearned_truncated_tokens: int = 0
    # where the first few sequences with nothing to learn came from ("file:line"), for the summary
    unlearned_examples: list[str] = field(default_factory=list)
    zero_weight: int = 0  # records of --weight-field 0: dropped before they are counted as sequences
    pairs: int = 0  # preference pairs kept (two segments each)
    pairs_identical: int = 0  # pairs whose chosen and rejected were equal: skipped
    pairs_identical_examples: list[str] = field(default_factory=list)  # where the first few came from
    pairs_overlong_dropped: int = 0  # pairs longer than a row even with their prompts cut away: dropped

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Segmenter:
    """Turns tokenized sequences into the segments the planner places (SPEC section 4):
    applies `--overlong` in bin mode, drops segments with nothing to learn (unless
    `keep_unlearned`), checks labels and an explicit `--pad-id`, counts.

    `truncation_side` "left" cuts a truncated sequence from its start but keeps the
    token before its first learned one, so a completion is only cut when it is longer
    than the row on its own; "right" keeps the first `seq_len` tokens."""

    def __init__(
        self,
        seq_len: int,
        mode: str,
        overlong: str,
        refuse_pad: int | None,
        counts: IngestCounts,
        track_owners: bool = False,
        groups: GroupTable | None = None,
        *,
        keep_unlearned: bool = False,
        truncation_side: str = "right",
    ):
        self.seq_len, self.mode, self.overlong = seq_len, mode, overlong
        self.refuse_pad, self.counts = refuse_pad, counts
        self.keep_unlearned, self.truncation_side = keep_unlearned, truncation_side
        self.owners: np.ndarray | None = np.zeros(0, dtype=np.int64) if track_owners else None
        self.groups = groups  # --group-by: the table of values, and each segment's id in `group_ids`
        self.group_ids = GroupIds()
        self.batch_owners = np.zeros(0, dtype=np.int64)
        self._numbered = 0  # input units (sequences; pairs for pairs) of earlier batches, dropped ones too
        self.values: SegmentValues | None = None  # pairs, weights: each segment's values (engine/pairs.py)

    def __call__(self, seqs: SequenceBatch, location: Locate, group_values: list[Any] | None = None) -> SegmentBatch:
        """The segments of one batch, in input order. `group_values`: with --group-by, the
        field's value in each record of the batch."""
        segments, owners = self._segments(seqs, location, group_values)
        self._number(owners, len(seqs.lengths))
        return segments

    def _number(self, batch_owners: np.ndarray, batch_size: int) -> None:
        """Keep, per segment of the batch, the input unit of the batch it comes from
        (`batch_owners`) and, when tracked, the same numbered over the whole input (`owners`);
        then count the batch's `batch_size` units, those dropped before segmenting too."""
        self.batch_owners = batch_owners
        if self.owners is not None:
            self.owners = np.concatenate([self.owners, self._numbered + batch_owners])
        self._numbered += batch_size

    def _segments(
        self, seqs: SequenceBatch, location: Locate, group_values: list[Any] | None
    ) -> tuple[SegmentBatch, np.ndarray]:
        """The segments of one batch and, per segment, the sequence of the batch it comes from."""
        tokens, lengths = seqs.tokens, seqs.lengths
        self.counts.sequences_in += len(lengths)
        self.counts.tokens_in += int(lengths.sum())
        self.counts.special_token_records += seqs.special_token_records
        if self.refuse_pad is not None:
            refuse_pad_in_data(tokens, lengths, self.refuse_pad, location)
        learned = None
        if seqs.labels is not None:
            starts = np.cumsum(lengths) - lengths
            learned = learned_bits(tokens, seqs.labels, lambda i: location(owner_of(starts, i)))
        kept = None  # per segment, the sequence of the batch it comes from; None: one each
        if self.mode == "concat":
            self.counts.overlong += int((lengths > self.seq_len).sum())
            self.counts.unpacked_rows += int(((lengths + self.seq_len - 1) // self.seq_len).sum())
        else:
            learns = None if learned is None else learns_after_first(learned, starts, lengths)
            sequences = lengths
            tokens, lengths, learned, kept = self._overlong(tokens, lengths, learned, location)
            if learns is not None and learned is not None:
                same = lengths is sequences  # no sequence was cut: its segments are the sequences
                tokens, lengths, learned, kept = self._unlearned(tokens, lengths, learned, kept, learns, same, location)
            self.counts.unpacked_rows += len(lengths)
        if self.groups is not None:
            segment_groups = self._add_groups(group_values, len(seqs.lengths), kept)
            self.groups.add_tokens(tokens, lengths, segment_groups)
        owners = np.arange(len(lengths), dtype=np.int64) if kept is None else kept
        return SegmentBatch(tokens, lengths, learned), owners

    def _add_groups(self, values: list[Any] | None, n_sequences: int, kept: np.ndarray | None) -> np.ndarray:
        assert self.groups is not None
        if values is None or len(values) != n_sequences:
            raise PackcliError(
                f"--group-by {self.groups.field}: no value for each of the batch's {n_sequences} sequences"
            )
        ids = self.groups.ids_of(values)
        segment_groups = ids if kept is None else ids[kept]
        self.group_ids.append(segment_groups)
        return segment_groups

    def _overlong(
        self, tokens: np.ndarray, lengths: np.ndarray, learned: np.ndarray | None, location: Locate
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]:
        """--overlong in bin mode; the last item is, per segment kept, the sequence it came
        from (None when every sequence is one segment)."""
        seq_len = self.seq_len
        long = lengths > seq_len
        if not long.any():
            return tokens, lengths, learned, None
        self.counts.overlong += int(long.sum())
        starts = np.cumsum(lengths) - lengths
        if self.overlong == "error":
            first = int(np.argmax(long))
            raise PackcliError(
                f"{location(first)}: sequence has {int(lengths[first]):,} tokens, more than "
                f"--seq-len {seq_len:,} (--overlong error; use split, truncate or drop)"
            )
        if self.overlong == "split":
            _, pieces, owner = cut_pieces(starts, lengths, seq_len, aligned=False)
            return tokens, pieces, learned, owner
        if self.overlong == "truncate":
            kept = np.minimum(lengths, seq_len)
            begin = self._truncation_begin(learned, starts, lengths)
            self.counts.overlong_tokens_lost += int((lengths - kept).sum())
            within = np.arange(len(tokens)) - np.repeat(starts, lengths)
            mask = (within >= np.repeat(begin, lengths)) & (within < np.repeat(begin + kept, lengths))
            return tokens[mask], kept, (learned[mask] if learned is not None else None), None
        self.counts.overlong_tokens_lost += int(lengths[long].sum())  # drop
        mask = ~np.repeat(long, lengths)
        return tokens[mask], lengths[~long], (learned[mask] if learned is not None else None), np.flatnonzero(~long)

    def _truncation_begin(self, learned: np.ndarray | None, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """Where each truncated sequence's kept window starts (0 for those that fit)."""
        surplus: np.ndarray = np.maximum(lengths - self.seq_len, 0)
        if self.truncation_side == "right":
            return np.zeros(len(lengths), dtype=np.int64)
        if learned is None:
            return surplus
        # The token before the first learned one stays: it is the segment's first, whose label is masked.
        context = first_learned(learned, starts, lengths) - 1
        begin: np.ndarray = np.clip(np.minimum(surplus, context), 0, None)
        return begin

    def _unlearned(
        self,
        tokens: np.ndarray,
        lengths: np.ndarray,
        learned: np.ndarray,
        kept: np.ndarray | None,
        sequence_learns: np.ndarray,
        segments_are_sequences: bool,
        location: Locate,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
        """Segments with no learned token counted by cause, and dropped unless kept."""
        if segments_are_sequences:
            learns = sequence_learns
        else:
            learns = learns_after_first(learned, np.cumsum(lengths) - lengths, lengths)
        if learns.all():
            return tokens, lengths, learned, kept
        owner = np.arange(len(lengths), dtype=np.int64) if kept is None else kept
        idle = ~learns
        no_labels = idle & ~sequence_learns[owner]
        piece = idle & ~no_labels & (self.overlong == "split")
        cut = idle & ~no_labels & ~piece
        c = self.counts
        idle_sequences = np.unique(owner[no_labels])
        c.unlearned_no_labels += len(idle_sequences)
        for index in idle_sequences[: max(0, UNLEARNED_EXAMPLES - len(c.unlearned_examples))].tolist():
            c.unlearned_examples.append(location(index))
        c.unlearned_no_labels_tokens += int(lengths[no_labels].sum())
        c.unlearned_split_pieces += int(piece.sum())
        c.unlearned_split_pieces_tokens += int(lengths[piece].sum())
        c.unlearned_truncated += int(cut.sum())
        c.unlearned_truncated_tokens += int(lengths[cut].sum())
        if self.keep_unlearned:
            return tokens, lengths, learned, kept
        c.no_labels_dropped += int(cut.sum())
        mask = np.repeat(learns, lengths)
        return tokens[mask], lengths[learns], learned[mask], owner[learns]


def owner_of(starts: np.ndarray, token_index: int) -> int:
    """The index of the span (spans given by their starts, in order) a token index falls in."""
    return int(np.searchsorted(starts, token_index, side="right")) - 1


def learns_after_first(learned: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Whether each span keeps a learned token once its first token (a segment start) is masked."""
    total = np.concatenate([[0], np.cumsum(learned)])
    learns: np.ndarray = (total[starts + lengths] - total[np.minimum(starts + 1, starts + lengths)]) > 0
    return learns


def first_learned(learned: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Index, inside its span, of each span's first learned token (its length if none)."""
    found = np.flatnonzero(learned)
    span = np.searchsorted(starts, found, side="right") - 1
    inside = found < (starts + lengths)[span]
    found, span = found[inside], span[inside]
    first = lengths.astype(np.int64).copy()
    spans, at = np.unique(span, return_index=True)
    first[spans] = found[at] - starts[spans]
    return first


def refuse_pad_in_data(tokens: np.ndarray, lengths: np.ndarray, pad_id: int, location: Locate) -> None:
    """An explicit --pad-id promises padding can be told from data by its id alone."""
    hits = np.flatnonzero(tokens == pad_id)
    if len(hits):
        raise PackcliError(
            f"{location(owner_of(np.cumsum(lengths) - lengths, int(hits[0])))}: --pad-id {pad_id} occurs in the data; choose an id that does not "
            "(or leave --pad-id out to pad with EOS)"
        )


# ----------------------------------------------------------------------------- workers


def use_workers(workers: int | None) -> None:
    """Tokenizer threads: the Rust thread pool reads these once, when it starts."""
    if workers is not None:
        os.environ["RAYON_NUM_THREADS"] = str(workers)
        os.environ["RAYON_RS_NUM_CPUS"] = str(workers)


def worker_count(opts: PackOptions) -> int:
    """--workers, or the cores this process may use."""
    return opts.workers if opts.workers is not None else available_cores()


def worker_processes(opts: PackOptions, backend: str | None = None) -> int:
    """How many tokenizer processes to fork for `backend`, or 0 to tokenize in this process;
    without a backend, how many any backend might get.

    Processes: tiktoken and chat templates hold the GIL for much of their work (tiktoken:
    two threads 1.50x one, two processes 1.97x); one-thread processes each run whole
    batches, so no core waits on another (docs/tokenizer-backends.md). Plain text on the
    HF tokenizer is the exception: its own Rust threads were faster than forked processes
    (10M tokens on 2 cores: 15.1-15.5 s against 18.2-20.0 s with the 151k byte-level BPE,
    15.2-16.0 against 16.1-17.3 with a Unigram tokenizer)."""
    if opts.input_kind == "ids" or (backend == "hf" and opts.input_kind == "text"):
        return 0
    count = worker_count(opts)
    return count if count > 1 and can_fork() else 0


def workers_used(opts: PackOptions, processes: int, threads: int | None) -> dict[str, Any]:
    """For the report: what tokenized (nothing does for token ids given as input; else the
    processes, or the encoder's threads, None meaning --workers' (the HF tokenizer's own))."""
    if processes:
        return {"kind": "processes", "count": processes}
    if opts.input_kind == "ids":
        return {"kind": "none", "count": 0}
    return {"kind": "threads", "count": threads if threads is not None else worker_count(opts)}


class TokenStream:
    """(record batch, sequence batch) pairs in input order.

    Created before the output directory is touched: it reads the first two batches and
    picks the tokenizer backend on the first, so a refusal leaves the output as it was. An
    input of one batch is tokenized here, with no fork (and, if small, without gigatoken:
    setup.SMALL_INPUT_CHARS). Iterating forks the workers (before any thread of ours
    starts) and starts the threads."""

    def __init__(
        self,
        opts: PackOptions,
        setup: TokenSetup,
        paths: list[str],
        bad: BadRecords,
        timer: Timer,
        sections: dict[str, tuple[int, ...]] | None = None,
        extra_fields: dict[str, FieldKind] | None = None,
        shared_encoder: Encoder | None = None,
    ):
        """sections: read only this part of a path (read_batches); extra_fields: more
        fields to read, with their kinds (a mixture's --holdout-key); shared_encoder: an
        encoder another source of the run chose (setup.choose_backend)."""
        self.opts, self.setup, self.timer, self.bad = opts, setup, timer, bad
        self.cleanup = ExitStack()  # closed last-in first-out: tokenizing, reading, workers, encoder
        self.cleanup.callback(setup.close)
        try:
            fields = dict(setup.builder.fields)
            if opts.group_by is not None:
                fields[opts.group_by] = "scalar"
            for name, kind in (extra_fields or {}).items():
                fields.setdefault(name, kind)
            self.records = read_batches(
                paths,
                fields,
                batch_size=READ_BATCH,
                on_bad_record=opts.on_bad_record,
                bad=bad,
                sections=sections,
            )
            self.cleanup.callback(self.records.close)
            threads = 1 if worker_processes(opts) else opts.workers  # a worker's encoder, or this process's
            with timer.stage("read"):
                self.first = next(self.records, None)
                self.second = None if self.first is None else next(self.records, None)
            whole = self.first is not None and self.second is None  # the input is one batch
            with timer.stage("tokenize"):
                if setup.encoder is None:  # a setup reused across runs (the Ray engine's tasks) has one
                    choose_backend(opts, setup, self.first, threads=threads, whole_input=whole, shared=shared_encoder)
            # one batch in all: a worker would run it alone, after a fork
            self.processes = 0 if whole else worker_processes(opts, setup.backend)
            self.workers = workers_used(opts, self.processes, getattr(setup.encoder, "threads", None))
        except BaseException:
            self.cleanup.close()
            raise

    def __iter__(self) -> Iterator[tuple[RecordBatch, SequenceBatch]]:
        timer, builder = self.timer, self.setup.builder
        pool: WorkerPool | None = None
        if self.processes and self.first is not None:
            pool = WorkerPool(builder.build, self.processes)  # it forks: before any thread of ours starts
            self.cleanup.callback(pool.close)
        batches = prefetch(timer.timed_iter("read", self.records))
        self.cleanup.callback(batches.close)
        read_ahead = [batch for batch in (self.first, self.second) if batch is not None]
        with_first = itertools.chain(read_ahead, batches)

        def here() -> Iterator[
            tuple[RecordBatch, SequenceBatch]
        ]:  # in a thread: the tokenizers release the GIL for most of their work
            try:
                for batch in with_first:
                    with timer.stage("tokenize"):
                        sequences = builder.build(batch)
                    yield batch, sequences
            finally:
                batches.close()  # in the thread that iterates it

        def in_workers(pool: WorkerPool) -> Generator[tuple[RecordBatch, SequenceBatch], None, None]:
            for batch, sequences, seconds in pool.map(with_first, ahead=2 * pool.workers):
                timer.seconds["tokenize"] += seconds
                yield batch, sequences
            pool.close()  # the workers' memory goes before the plan and the shards need theirs

        tokenized = in_workers(pool) if pool is not None else prefetch(here())
        self.cleanup.callback(tokenized.close)
        for batch, sequences in tokenized:
            for record, reason, problem in sequences.problems:  # records the builder refused
                if self.opts.on_bad_record == "fail":
                    raise PackcliError(f"{batch.location(record)}: {problem}")
                self.bad.add(batch.location(record), reason, problem)
            yield batch, sequences

    def close(self) -> None:
        self.cleanup.close()


class InputProgress:
    """Bytes of the input done so far, and in all, for the progress bar's ETA (None for stdin)."""

    def __init__(self, paths: list[str]):
        self.sizes = {p: storage.size(p) for p in paths if p != "-"}
        self.total = sum(self.sizes.values()) if "-" not in paths else None
        self.finished: set[str] = set()
        self.current: str | None = None
        self.done_before = 0

    def update(self, batch: RecordBatch) -> tuple[int, int | None]:
        source = batch.source
        if source != self.current:
            if self.current in self.sizes and self.current not in self.finished:
                self.finished.add(self.current)
                self.done_before += self.sizes[self.current]
            self.current = source
        return self.done_before + batch.source_bytes, self.total


def segments(
    stream: TokenStream,
    segmenter: Segmenter,
    paths: list[str],
    progress: Callable[[int, int, int, int | None], None] | None = None,
) -> Iterator[SegmentBatch]:
    """The segments of each batch, in input order, with the progress bar fed."""
    tracker = InputProgress(paths)
    field = segmenter.groups.field if segmenter.groups is not None else None
    for batch, sequences in stream:
        yield segmenter(sequences, batch.location, None if field is None else batch.columns[field])
        if progress is not None:
            progress(len(sequences.lengths), int(sequences.lengths.sum()), *tracker.update(batch))


@dataclass
class SegmentSource:
    """What a spill step reads: batches of segments in input order, and the tallies made
    while they are read (complete once every batch is taken). `segments` over the input
    is one; batches taken from other spills, with their counts, are another."""

    batches: Iterable[SegmentBatch]
    counts: IngestCounts
    bad: BadRecords | None = None  # the readers' tally (None: no records were read)
    group_table: GroupTable | None = None  # --group-by: the values the ids number
    group_ids: GroupIds | None = None  # --group-by: each segment's id, in input order, as batches are taken
    values: SegmentValues | None = None  # pairs, --weight-field: each segment's values, as batches are taken
