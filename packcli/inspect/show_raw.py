"""`packcli show` on raw input: each record as the segments `pack` would make of it.

Records are read and tokenized by pack's own readers and sequence builder
(`tokensetup.setup_tokens`), and cut by pack's own segmenter (`pipeline.make_segmenter`:
--overlong, --truncation-side, the unlearned rule), one record at a time, so a record
pack would refuse is shown with the reason instead of ending the view. What pack would
do to a record (skip, drop, cut) is said in the view's notes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from packcli.core.errors import PackcliError
from packcli.core.options import MAX_SEQ_LEN, PackOptions
from packcli.engine.ingest import IngestCounts
from packcli.inspect.show import IGNORE_INDEX, Decoder, Segment, View, load_decoder
from packcli.read.batches import read_batches
from packcli.read.inputs import expand_inputs
from packcli.read.records import BadRecords
from packcli.tokenize.sequences import SequenceBatch

READ_BATCH = 64


class _Listed(BadRecords):
    """BadRecords that keeps every location and problem, not the first ten."""

    def __init__(self) -> None:
        super().__init__()
        self.listed: list[tuple[str, str]] = []

    def add(self, location: str, reason: str, problem: str) -> None:
        super().add(location, reason, problem)
        self.listed.append((location, problem))


@dataclass
class RawShow:
    views: list[View]
    bad: list[dict[str, str]]  # records pack would skip (or stop at): location, problem, what pack does
    decoder: Decoder | None


def raw_views(opts: PackOptions, start: int, stop: int) -> RawShow:
    """Records start..stop-1 (good records, in input order) as pack would segment them;
    the bad records met on the way; and the decoder of --tokenizer."""
    from packcli.engine.job import make_segmenter
    from packcli.tokenize.setup import setup_tokens

    given_seq_len = opts.seq_len or None
    opts = replace(opts, seq_len=given_seq_len or MAX_SEQ_LEN, output="")
    opts.validate()
    paths = expand_inputs(opts.inputs)
    setup = setup_tokens(opts)
    decoder = load_decoder(opts.tokenizer) if opts.tokenizer else None
    bad = _Listed()
    fields = dict(setup.builder.fields)
    batches = read_batches(paths, fields, batch_size=READ_BATCH, on_bad_record="skip", bad=bad)
    views: list[View] = []
    seen = 0
    try:
        for batch in batches:
            if seen >= stop:
                break
            wanted = [j for j in range(len(batch)) if start <= seen + j < stop]
            first = seen
            seen += len(batch)
            if not wanted:
                continue
            sequences = setup.builder.build(batch)
            offsets = np.concatenate([[0], np.cumsum(sequences.lengths)])
            for j in wanted:
                header = {"record": first + j, "location": batch.location(j)}
                refused = _refused(sequences, j)
                if refused is not None:
                    views.append(_unwritten(np.zeros(0, np.int64), None, header, [refused]))
                    continue
                one = _one(sequences, offsets, j)
                segmenter = make_segmenter(opts, setup, IngestCounts())
                segmenter.owners = np.zeros(0, dtype=np.int64)  # track which sequence each segment is of
                views.append(_record_view(one, segmenter, batch.location, header, opts, given_seq_len))
    finally:
        batches.close()
        setup.close()
    verb = "pack stops here (--on-bad-record fail)" if opts.on_bad_record == "fail" else "skipped by pack"
    listed = [{"location": where, "problem": problem, "pack": verb} for where, problem in bad.listed]
    return RawShow(views, listed, decoder)


def _refused(sequences: SequenceBatch, j: int) -> str | None:
    """Why the builder made no sequence of record j (a refused pair, one with equal sides), or None."""
    for record, _, problem in sequences.problems:
        if record == j:
            return f"refused: {problem}"
    if j in sequences.identical:
        return "skipped and counted: the pair's chosen and rejected are the same"
    return None


def _one(sequences: SequenceBatch, offsets: np.ndarray, j: int) -> SequenceBatch:
    """Record j's sequences (one, or a preference pair's two), as a batch of their own."""
    picked = np.array([j]) if sequences.records is None else np.flatnonzero(sequences.records == j)
    lo, hi = int(offsets[picked[0]]), int(offsets[picked[-1] + 1])
    labels = None if sequences.labels is None else sequences.labels[lo:hi]
    weights = None if sequences.weights is None else sequences.weights[picked]
    records = None if sequences.records is None else np.zeros(len(picked), dtype=np.int64)
    return SequenceBatch(sequences.tokens[lo:hi], sequences.lengths[picked], labels, records=records, weights=weights)


def _record_view(
    sequence: SequenceBatch, segmenter: Any, locate: Any, header: dict[str, Any], opts: PackOptions, seq_len: int | None
) -> View:
    tokens = np.asarray(sequence.tokens, dtype=np.int64)
    length = len(tokens)
    header = {**header, "tokens": length}
    try:
        kept, lengths, learned = segmenter(sequence, lambda _: header["location"])
    except PackcliError as exc:
        return _unwritten(tokens, sequence.labels, header, [f"pack stops here: {exc}"])
    if sequence.weights is not None and not len(lengths) and (sequence.weights == 0).all():
        return _unwritten(tokens, sequence.labels, header, ["dropped and counted: its weight is 0"])
    if opts.pairs:
        notes = _pair_notes(length, lengths, opts, segmenter.counts)
        assert segmenter.values is not None  # pairs keep their chosen lengths
        first = segmenter.values.first[-1] if segmenter.values.first else np.zeros(0, np.int64)
        lengths = np.stack([first, lengths - first], axis=1).reshape(-1)  # a pair's two segments
    else:
        notes = _notes(length, lengths, opts, seq_len, tokens, kept)
    if not len(lengths):
        return _unwritten(tokens, sequence.labels, header, notes)
    ids: list[np.ndarray] = []
    labels: list[np.ndarray] = []
    positions: list[np.ndarray] = []
    segments: list[Segment] = []
    at = 0
    for k, n in enumerate(int(n) for n in lengths):
        piece = np.asarray(kept[at : at + n], dtype=np.int64)
        bits = np.ones(n, dtype=bool) if learned is None else np.asarray(learned[at : at + n], dtype=bool)
        label = np.where(bits, piece, IGNORE_INDEX)
        label[0] = IGNORE_INDEX  # a segment's first token is never learned
        start = at
        segment = Segment(k, start, start + n, start + n)
        if opts.pairs:
            segment.pair, segment.chosen = header["record"], k % 2 == 0
        if sequence.weights is not None:
            segment.weight = float(sequence.weights[0])
        segments.append(segment)
        ids.append(piece)
        labels.append(label)
        positions.append(np.arange(n, dtype=np.int64))
        at += n
    if opts.keep_unlearned:
        idle = [s.index for s, lab in zip(segments, labels) if not (lab != IGNORE_INDEX).any()]
        if idle:
            notes.append(f"segment(s) {', '.join(map(str, idle))} learn nothing; kept (--keep-unlearned)")
    all_labels = np.concatenate(labels)
    header.update(num_segments=len(segments), learned_tokens=int((all_labels != IGNORE_INDEX).sum()), written=True)
    return View("record", header, np.concatenate(ids), all_labels, np.concatenate(positions), segments, notes)


def _unwritten(tokens: np.ndarray, labels: np.ndarray | None, header: dict[str, Any], notes: list[str]) -> View:
    """A record pack writes nothing of: its sequence as tokenized, shown with why."""
    n = len(tokens)
    shown = tokens.copy() if labels is None else np.asarray(labels, dtype=np.int64)
    if n:
        shown[0] = IGNORE_INDEX
    header = {**header, "num_segments": 0, "learned_tokens": 0, "written": False}
    segments = [Segment(0, 0, n, n)] if n else []
    return View("record", header, tokens, shown, np.arange(n, dtype=np.int64), segments, notes)


def _pair_notes(length: int, lengths: np.ndarray, opts: PackOptions, counts: IngestCounts) -> list[str]:
    """What pack does to a preference pair of `length` tokens (both sides) that became
    units of `lengths` (one, or none when dropped)."""
    limit, policy = opts.seq_len, opts.resolved_overlong
    if counts.overlong:
        if not len(lengths) and counts.pairs_overlong_dropped:
            return [f"dropped and counted: {length:,} tokens do not fit --seq-len {limit:,} even with the prompts cut"]
        if not len(lengths):
            return [f"dropped: {length:,} tokens, more than --seq-len {limit:,} (--overlong {policy})"]
        cut = (length - int(lengths[0])) // 2
        return [f"truncated: {cut:,} tokens cut from the start of both sides' prompt (--overlong truncate)"]
    if not len(lengths):
        return ["dropped: a side learns nothing (--keep-unlearned keeps it)"]
    return []


def _notes(
    length: int, lengths: np.ndarray, opts: PackOptions, seq_len: int | None, tokens: np.ndarray, kept: np.ndarray
) -> list[str]:
    """What pack does to a record of `length` tokens that became segments of `lengths`."""
    policy, side = opts.resolved_overlong, opts.resolved_truncation_side
    limit = opts.seq_len
    if length > limit:
        if policy == "drop":
            return [f"dropped: {length:,} tokens, more than --seq-len {limit:,} (--overlong drop)"]
        if policy == "split":
            pieces = -(-length // limit)
            notes = [f"split into {pieces} pieces of at most {limit:,} tokens (--overlong split)"]
            if len(lengths) < pieces:
                notes.append(
                    f"{pieces - len(lengths)} piece(s) with nothing to learn dropped (--keep-unlearned keeps them)"
                )
            return notes
        if not len(lengths):
            return [f"dropped: truncated to {limit:,} tokens, nothing learned is left (--overlong truncate)"]
        begin = next(b for b in range(length - limit + 1) if np.array_equal(tokens[b : b + limit], kept))
        cut = []
        if begin:
            cut.append(f"{begin:,} cut from the start")
        if length - limit - begin:
            cut.append(f"{length - limit - begin:,} from the end")
        return [f"truncated to {limit:,} tokens, {' and '.join(cut)} (--overlong truncate, --truncation-side {side})"]
    if not len(lengths):
        return ["dropped: no token is learned (--keep-unlearned keeps it)"]
    return []
