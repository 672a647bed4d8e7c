"""`packcli stats` on raw input: what packing would save, before packing.

It tokenizes and segments the way pack does (pack's own Segmenter), then runs every
packer and the no-packing baselines on the sequence lengths: a what-if table. Nothing
is written.
"""

from __future__ import annotations

import time
from contextlib import closing
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from packcli.core.choices import DEFAULT_BATCH_SIZE
from packcli.core.errors import PackcliError
from packcli.core.flow import Timer
from packcli.core.options import PackOptions, check_positive
from packcli.engine.ingest import IngestCounts, Segmenter, TokenStream, use_workers
from packcli.engine.pairs import PairSegmenter, WeightedSegmenter
from packcli.engine.summary import unlearned_section
from packcli.inspect.stats import distribution
from packcli.plan.grouping import GroupTable
from packcli.plan.kernels.pack import ALGORITHMS, pack_lengths
from packcli.plan.pairs import placed_lengths
from packcli.plan.planner import place, uncapped_rows
from packcli.plan.rows import padded_lengths
from packcli.plan.settings import PlanSettings
from packcli.read.inputs import expand_inputs
from packcli.read.records import BadRecords
from packcli.tokenize.setup import setup_tokens
from packcli.write.manifest import Unlearned
from packcli.write.values import SegmentValues


@dataclass
class WhatIfOptions:
    """pack's options for the input, the --seq-len values to compare, and the baseline's batch size.

    `input` carries every input option of pack (fields, tokenizer, BOS/EOS, backend, bad
    records, workers, overlong, buffer size); its seq_len and output are not used."""

    input: PackOptions
    seq_lens: list[int]
    batch_size: int = DEFAULT_BATCH_SIZE

    @property
    def inputs(self) -> list[str]:
        return self.input.inputs

    def pack_options(self, seq_len: int) -> PackOptions:
        """pack's own options for these inputs, so checks, messages and tokens are pack's."""
        return replace(self.input, seq_len=seq_len, output="")

    def validate(self) -> None:
        if not self.seq_lens:
            raise PackcliError("--seq-len is needed for raw input (repeat it to compare several)", usage=True)
        check_positive("--batch-size", self.batch_size)
        for seq_len in self.seq_lens:
            self.pack_options(seq_len).validate()


@dataclass
class Segmented:
    """The segments pack's bin mode places for one seq_len: their real lengths in input
    order, the sequence each comes from, and the ingest counts (overlong, unlearned)."""

    lengths: np.ndarray
    owners: np.ndarray
    counts: IngestCounts
    keep_unlearned: bool = False
    first: np.ndarray | None = None  # preference pairs: each pair's chosen length (lengths: both sides')

    def placed(self, multiple: int) -> np.ndarray:
        """The room each takes in a row: its length, or a pair's two sides, padded to `multiple`."""
        if self.first is not None:
            return placed_lengths(self.first, self.lengths, multiple)
        return padded_lengths(self.lengths, multiple)

    def unlearned(self) -> Unlearned:
        return unlearned_section(self.counts, self.keep_unlearned)


@dataclass
class Corpus:
    """Sequence lengths of the input, in input order, as pack would see them."""

    lengths: np.ndarray
    documents_read: int
    skipped: dict
    first_longer_than: dict = field(default_factory=dict)  # seq_len -> (location, length)
    segmented: dict[int, Segmented] = field(default_factory=dict)  # seq_len -> pack's segments
    seconds: float = 0.0
    bos: bool = False
    eos: bool = True
    groups: np.ndarray | None = None  # --group-by: group id of each sequence
    group_table: GroupTable | None = None


def read_lengths(opts: WhatIfOptions, progress=None) -> Corpus:
    """Read and tokenize with pack's own setup, backend choice and sequence builder; then,
    per seq_len, cut segments with pack's own segmenter (overlong policy, unlearned rule)."""
    pack_opts = opts.pack_options(opts.seq_lens[0])
    use_workers(pack_opts.workers)
    started = time.perf_counter()
    paths = expand_inputs(pack_opts.inputs)
    setup = setup_tokens(pack_opts)
    bad = BadRecords()
    chunks, first_longer = [], {}
    segmenters = _segmenters(opts)
    pieces: dict[int, list[np.ndarray]] = {seq_len: [] for seq_len in segmenters}
    stream = TokenStream(pack_opts, setup, paths, bad, Timer())  # pack's backend choice and workers
    table = GroupTable(pack_opts.group_by) if pack_opts.group_by is not None else None
    group_chunks = []
    with closing(stream):
        for batch, sequences in stream:
            lengths = sequences.lengths.astype(np.int64)
            if pack_opts.pairs:  # a pair is one unit: both its sides
                lengths = lengths[0::2] + lengths[1::2]
            chunks.append(lengths)
            if table is not None:
                ids = table.ids_of(batch.columns[table.field])
                group_chunks.append(ids if sequences.records is None else ids[sequences.records[0::2]])
            for seq_len in opts.seq_lens:
                if seq_len not in first_longer and (lengths > seq_len).any():
                    i = int(np.argmax(lengths > seq_len))
                    first_longer[seq_len] = (batch.location(i), int(lengths[i]))
            for seq_len, segmenter in segmenters.items():
                pieces[seq_len].append(segmenter(sequences, batch.location)[1].astype(np.int64))
            if progress is not None:
                progress(len(lengths), int(lengths.sum()))
    lengths = np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.int64)
    if not len(lengths):
        skipped = f" ({bad.total:,} bad records skipped)" if bad.total else ""
        from packcli.engine.job import input_names

        raise PackcliError(f"no documents in {input_names(list(paths))}{skipped}")
    return Corpus(
        lengths=lengths,
        documents_read=bad.records_seen,
        skipped=dict(bad.counts),
        first_longer_than=first_longer,
        segmented={
            seq_len: Segmented(
                np.concatenate(pieces[seq_len]),
                _owners(segmenter),
                segmenter.counts,
                segmenter.keep_unlearned,
                _firsts(segmenter),
            )
            for seq_len, segmenter in segmenters.items()
        },
        seconds=time.perf_counter() - started,
        bos=setup.add_bos,
        eos=pack_opts.eos,
        groups=np.concatenate(group_chunks) if table is not None else None,
        group_table=table,
    )


def _segmenters(opts: WhatIfOptions) -> dict[int, Segmenter]:
    """pack's bin-mode segmenter for each seq_len; none under --overlong error, which
    the what-if refuses itself, naming the first sequence too long."""
    segmenters = {}
    for seq_len in opts.seq_lens:
        pack_opts = opts.pack_options(seq_len)
        if pack_opts.resolved_overlong == "error":
            continue
        settings: dict[str, Any] = {
            "track_owners": True,
            "keep_unlearned": pack_opts.keep_unlearned,
            "truncation_side": pack_opts.resolved_truncation_side,
        }
        policy = pack_opts.resolved_overlong
        segmenter: Segmenter
        if pack_opts.pairs:
            segmenter = PairSegmenter(
                seq_len, "bin", policy, None, IngestCounts(), multiple=pack_opts.pad_multiple, **settings
            )
        elif pack_opts.weight_field is not None:
            segmenter = WeightedSegmenter(seq_len, "bin", policy, None, IngestCounts(), **settings)
        else:
            segmenter = Segmenter(seq_len, "bin", policy, None, IngestCounts(), **settings)
        if pack_opts.per_segment_values:
            segmenter.values = SegmentValues(pack_opts.pairs, pack_opts.weight_field is not None)
        segmenters[seq_len] = segmenter
    return segmenters


def _owners(segmenter: Segmenter) -> np.ndarray:
    assert segmenter.owners is not None  # track_owners=True
    return segmenter.owners


def _firsts(segmenter: Segmenter) -> np.ndarray | None:
    """Preference pairs: each segment's (pair's) chosen length; None for other input."""
    values = segmenter.values
    if values is None or not values.pairs:
        return None
    return np.concatenate(values.first) if values.first else np.zeros(0, dtype=np.int64)


def overlong_groups(lengths: np.ndarray, seq_len: int, policy: str, groups: np.ndarray) -> np.ndarray:
    """The group of each length `apply_overlong` gives, in the same order."""
    long = lengths > seq_len
    if not long.any():
        return groups
    if policy == "truncate":
        return groups
    if policy == "drop":
        return groups[~long]
    return np.repeat(groups, -(-lengths // seq_len))


def apply_overlong(lengths: np.ndarray, seq_len: int, policy: str) -> tuple[np.ndarray, int]:
    """Lengths as bin mode packs them (pieces of split sequences in place), and tokens lost.
    Without labels to look at (pack's own segments are in `what_if`'s `segmented`)."""
    long = lengths > seq_len
    if not long.any():
        return lengths, 0
    if policy == "truncate":
        return np.minimum(lengths, seq_len), int((lengths[long] - seq_len).sum())
    if policy == "drop":
        return lengths[~long], int(lengths[long].sum())
    pieces_per = -(-lengths // seq_len)
    pieces = np.full(int(pieces_per.sum()), seq_len, dtype=np.int64)
    pieces[np.cumsum(pieces_per) - 1] = lengths - (pieces_per - 1) * seq_len
    return pieces, 0


def pad_to_longest_tokens(lengths: np.ndarray, batch_size: int) -> int:
    """Tokens a model processes when each batch (in input order) is padded to its longest."""
    if not len(lengths):
        return 0
    starts = np.arange(0, len(lengths), batch_size)
    sizes = np.diff(np.append(starts, len(lengths)))
    return int((np.maximum.reduceat(lengths, starts) * sizes).sum())


def what_if(
    lengths: np.ndarray,
    seq_len: int,
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    buffer_size: int | None = None,
    overlong: str | None = None,
    first_longer: tuple[str, int] | None = None,
    groups: np.ndarray | None = None,
    max_per_row: int | None = None,
    segmented: Segmented | None = None,
    multiple: int = 1,
) -> dict:
    """Rows and efficiency of every packer and of no packing, for one seq_len.

    Packers see what `pack` would give them: `segmented` (pack's own segments), else
    overlong sequences handled by the policy; each length rounded up to `multiple`
    (--pad-to-multiple-of; efficiency counts real tokens), then windows of `buffer_size`
    sequences. Tokens processed count padding, since a model computes on it; the
    speed-up is the ratio of tokens processed, which leaves out attention's cost that
    grows with the square of the segment length. `groups` (a group id per length):
    every packer plans each group alone, as `--group-by` does; `max_per_row`: as
    --max-sequences-per-row."""
    policy = overlong or "split"
    n_long = int((lengths > seq_len).sum())
    if n_long and policy == "error":
        _refuse_overlong(lengths, seq_len, first_longer)
    if segmented is not None:
        sequences, lost = segmented.lengths, segmented.counts.overlong_tokens_lost
        piece_groups = None if groups is None else groups[segmented.owners]
        no_labels = segmented.counts.no_labels_dropped
    else:
        sequences, lost = apply_overlong(lengths, seq_len, policy)
        piece_groups = None if groups is None else overlong_groups(lengths, seq_len, policy, groups)
        no_labels = 0
    scale = _Scale(
        real=int(sequences.sum()),
        pad_tokens=len(sequences) * seq_len,
        longest_tokens=pad_to_longest_tokens(sequences, batch_size),
    )
    pairs = segmented is not None and segmented.first is not None
    if pairs and segmented is not None:  # a pair is too long by its sides' room (--pad-to-multiple-of)
        n_long = segmented.counts.overlong
    placed = segmented.placed(multiple) if segmented is not None else padded_lengths(sequences, multiple)
    cap = max_per_row // 2 if pairs and max_per_row is not None else max_per_row  # a pair is two sequences
    methods = [
        scale.entry("pad to seq_len", len(sequences), scale.pad_tokens, None, "no packing"),
        scale.entry(f"pad to longest/{batch_size}", len(sequences), scale.longest_tokens, None, "no packing"),
        *_packer_entries(scale, placed, seq_len, buffer_size, piece_groups, cap),
    ]
    if pairs:  # concat never cuts a pair: next fit over the pairs in input order, each row padded
        concat_rows = place(sequences, PlanSettings(seq_len, algorithm="nf"), piece_groups)[2]
        concat = scale.entry("concat", concat_rows, concat_rows * seq_len, None, "concat")
    else:
        # concat joins whole documents (no overlong policy) and pads the last row.
        concat_rows = -(-int(lengths.sum()) // seq_len)
        if groups is not None and len(groups):  # one stream per group, each with its own last row
            concat_rows = int((-(-np.bincount(groups, weights=lengths).astype(np.int64) // seq_len)).sum())
        concat = scale.entry("concat", concat_rows, concat_rows * seq_len, None, "concat")
        concat["efficiency"] = int(lengths.sum()) / (concat_rows * seq_len)
    methods.append(concat)
    bound = -(-scale.real // seq_len)
    methods.append(scale.entry("lower bound", bound, bound * seq_len, None, "bound"))
    result = {
        "seq_len": seq_len,
        "sequences": len(sequences),
        "real_tokens": scale.real,
        "overlong": {"policy": policy, "count": n_long, "tokens_lost": lost, "dropped_without_labels": no_labels},
        "batch_size": batch_size,
        "buffer_size": buffer_size,
        "pad_to_multiple_of": multiple if multiple > 1 else None,
        "lower_bound_rows": bound,
        "methods": methods,
    }
    if segmented is not None:
        result["unlearned"] = segmented.unlearned()
    if pairs:
        result["pairs"] = len(sequences)  # the units every method places
    return result


@dataclass
class _Scale:
    """The real tokens and the two no-packing baselines every method is measured against."""

    real: int
    pad_tokens: int
    longest_tokens: int

    def entry(self, method: str, rows: int, processed: int, seconds: float | None, kind: str) -> dict:
        return {
            "method": method,
            "kind": kind,
            "rows": rows,
            "tokens_processed": processed,
            "efficiency": self.real / processed if processed else 0.0,
            "speedup_vs_pad_to_seq_len": self.pad_tokens / processed if processed else 0.0,
            "speedup_vs_pad_to_longest": self.longest_tokens / processed if processed else 0.0,
            "seconds": seconds,
        }


def _packer_entries(
    scale: _Scale,
    sequences: np.ndarray,
    seq_len: int,
    buffer_size: int | None,
    groups: np.ndarray | None = None,
    max_per_row: int | None = None,
) -> list[dict]:
    """Every bin packer on the sequences, in windows of `buffer_size` (and each group
    alone) as pack plans them, timed; with a cap, also the rows without it. With groups,
    each entry's `group_rows` are its rows per group id."""
    _warm_up_packers()
    entries = []
    window = buffer_size or max(1, len(sequences))
    n_groups = int(groups.max()) + 1 if groups is not None and len(groups) else 0
    for algorithm in ALGORITHMS:
        started, rows = time.perf_counter(), 0
        group_rows = np.zeros(n_groups, dtype=np.int64)
        settings = PlanSettings(seq_len, algorithm=algorithm, max_per_row=max_per_row)
        for start in range(0, len(sequences), window):
            part = None if groups is None else groups[start : start + window]
            _, _, n_rows, row_group = place(sequences[start : start + window], settings, part)
            rows += n_rows
            if row_group is not None:
                group_rows += np.bincount(row_group, minlength=n_groups)
        entry = scale.entry(algorithm, rows, rows * seq_len, time.perf_counter() - started, "bin")
        if max_per_row is not None:
            entry["uncapped_rows"] = uncapped_rows(sequences, replace(settings, buffer_size=buffer_size), groups)
        if groups is not None:
            entry["group_rows"] = group_rows.tolist()
        entries.append(entry)
    return entries


def group_what_if(result: dict, table: GroupTable, sequences: np.ndarray, groups: np.ndarray) -> list[dict]:
    """Per group: documents, sequences, real tokens, lower bound, and each packer's rows and efficiency."""
    seq_len = result["seq_len"]
    n = len(table.values)
    counts = np.bincount(groups, minlength=n)
    tokens = np.bincount(groups, weights=sequences, minlength=n).astype(np.int64)
    out = []
    for g, value in enumerate(table.values):
        rows = {m["method"]: m["group_rows"][g] for m in result["methods"] if "group_rows" in m}
        out.append(
            {
                "id": g,
                "value": value,
                "documents": table.documents[g],
                "sequences": int(counts[g]),
                "real_tokens": int(tokens[g]),
                "lower_bound_rows": -(-int(tokens[g]) // seq_len),
                "rows": rows,
                "efficiency": {k: int(tokens[g]) / (r * seq_len) if r else 0.0 for k, r in rows.items()},
            }
        )
    return out


def _refuse_overlong(lengths: np.ndarray, seq_len: int, first_longer: tuple[str, int] | None) -> None:
    where, length = first_longer or ("input", int(lengths[np.argmax(lengths > seq_len)]))
    raise PackcliError(
        f"{where}: document has {length:,} tokens, more than --seq-len {seq_len:,} "
        "(--overlong error; use split, truncate or drop)"
    )


_warmed = False


def _warm_up_packers() -> None:
    """Load (or compile) every kernel before timing, so no packer is charged for it."""
    global _warmed
    if not _warmed:
        for algorithm in ALGORITHMS:
            pack_lengths(np.array([3, 2, 1], dtype=np.int64), 4, algorithm)
        _warmed = True


def _what_if_for(opts: WhatIfOptions, corpus: Corpus, seq_len: int) -> dict:
    """One seq_len's what-if with pack's options; per group too with --group-by."""
    segmented = corpus.segmented.get(seq_len)
    result = what_if(
        corpus.lengths,
        seq_len,
        batch_size=opts.batch_size,
        buffer_size=opts.input.buffer_size,
        overlong=opts.input.resolved_overlong,
        first_longer=corpus.first_longer_than.get(seq_len),
        groups=corpus.groups,
        max_per_row=opts.input.max_sequences_per_row,
        segmented=segmented,
        multiple=opts.input.pad_multiple,
    )
    if corpus.groups is not None and corpus.group_table is not None:
        if segmented is None:  # --overlong error with nothing too long: every sequence is one segment
            sequences, groups = corpus.lengths, corpus.groups
        else:
            sequences, groups = segmented.lengths, corpus.groups[segmented.owners]
        result["groups"] = group_what_if(result, corpus.group_table, sequences, groups)
    return result


def stats_raw(opts: WhatIfOptions, progress=None) -> dict:
    opts.validate()
    corpus = read_lengths(opts, progress=progress)
    lengths = corpus.lengths
    hist = np.bincount(lengths)
    return {
        "inputs": list(opts.inputs),
        "tokenizer": opts.input.tokenizer,
        "bos": corpus.bos,
        "eos": corpus.eos,
        "documents": {
            "read": corpus.documents_read,
            "skipped": sum(corpus.skipped.values()),
            "skipped_by_reason": corpus.skipped,
        },
        "tokens": int(lengths.sum()),
        "sequence_length": {
            "min": int(lengths.min()),
            "median": float(np.median(lengths)),
            "mean": float(lengths.mean()),
            "max": int(lengths.max()),
        },
        "distributions": {"sequence_length": distribution("sequence_length", hist)},
        "what_if": [_what_if_for(opts, corpus, seq_len) for seq_len in opts.seq_lens],
        "timings": {"read_and_tokenize": round(corpus.seconds, 4)},
        "_lengths": lengths,  # for --plot; the CLI drops it before printing JSON
    }
