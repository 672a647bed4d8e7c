"""packcli as a library: pack token sequences in memory with the engine the CLI uses.

    from packcli import pack_sequences
    packed = pack_sequences([[1, 2, 3], [4, 5]], seq_len=8, pad_id=0)
    packed.input_ids, packed.labels, packed.position_ids, packed.cu_seqlens_per_row()

Labels are NOT shifted (Hugging Face convention: the model shifts them); they are -100
on the first token of every segment and on padding, so nothing is predicted across a
boundary.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from packcli.core.choices import TRUNCATION_SIDES
from packcli.core.errors import PackcliError
from packcli.core.options import check_choice, check_pad_multiple
from packcli.engine.ingest import IngestCounts, Segmenter
from packcli.engine.memory_input import check_settings, checked_weights, empty_rows, flatten_sequences, memory_report
from packcli.engine.pairs import WeightedSegmenter
from packcli.engine.summary import unlearned_section
from packcli.plan.contract import Plan
from packcli.plan.grouping import GroupTable, group_counts, group_entries
from packcli.plan.patterns import PatternPlan
from packcli.plan.planner import RowPlan, plan_rows, uncapped_rows
from packcli.plan.rows import Rows
from packcli.plan.settings import PlanSettings
from packcli.plan.strategy import Strategy, is_custom
from packcli.plan.stream import StreamPlan
from packcli.tokenize.sequences import SequenceBatch
from packcli.write.gather import gather_rows
from packcli.write.report import RowStats
from packcli.write.spill import Spill
from packcli.write.values import SegmentValues, SpillValues


@dataclass
class PackedSequences:
    """Packed rows (NumPy) with where every sequence went and the efficiency figures."""

    rows: Rows
    placement: dict[str, np.ndarray]  # sequence, row, offset, length: one entry per packed piece
    report: dict[str, Any]
    row_group: np.ndarray | None = None  # with `groups`: int32 group id of each row (report["groups"])

    @property
    def input_ids(self) -> np.ndarray:
        return self.rows.input_ids

    @property
    def labels(self) -> np.ndarray:
        """Unshifted: labels[i] belongs to input_ids[i]; the model does the shift."""
        return self.rows.labels

    @property
    def position_ids(self) -> np.ndarray:
        return self.rows.position_ids

    @property
    def cu_seqlens(self) -> np.ndarray:
        """Flat int32 CSR values; row r is cu_seqlens[cu_offsets[r]:cu_offsets[r + 1]]."""
        return self.rows.cu_seqlens

    @property
    def cu_offsets(self) -> np.ndarray:
        return self.rows.cu_offsets

    def cu_seqlens_per_row(self) -> list[np.ndarray]:
        offsets = self.rows.cu_offsets
        return [self.rows.cu_seqlens[offsets[r] : offsets[r + 1]] for r in range(len(self.rows))]

    @property
    def segment_source(self) -> np.ndarray | None:
        """A mixture's: each real segment's source (an index into report["sources"]),
        rows in order, CSR by rows.num_segments; None for a list of sequences."""
        return self.rows.segment_columns.get("segment_source")

    @property
    def efficiency(self) -> float:
        return float(self.report["efficiency"])

    @property
    def num_rows(self) -> int:
        return len(self.rows)


def pack_sequences(
    sequences: Sequence[Sequence[int]],
    seq_len: int,
    *,
    algorithm: str | Strategy = "bfd",
    pad_id: int = 0,
    labels: Sequence[Sequence[int]] | None = None,
    mode: str = "bin",
    overlong: str = "split",
    remainder: str = "pad",
    buffer_size: int | None = None,
    shuffle: bool = True,
    seed: int = 0,
    groups: Sequence[Any] | None = None,
    max_sequences_per_row: int | None = None,
    keep_unlearned: bool = False,
    truncation_side: str | None = None,
    pad_to_multiple_of: int | None = None,
    weights: Mapping[str, float] | None = None,
    epochs: Mapping[str, float] | None = None,
    target_tokens: int | None = None,
    max_epochs: float | None = None,
    sample_weights: Sequence[float] | None = None,
) -> PackedSequences:
    """Pack token sequences (BOS/EOS already in place) into rows of exactly `seq_len`.

    `sequences` may also be a mixture: a mapping of source names to their sequences (and
    `labels` the same mapping of their labels), taken as `packcli pack --mix` takes
    sources: `weights` (shares of the weighted sources' tokens) or `epochs` per name
    (neither: every sequence once), `target_tokens` and `max_epochs` as in a mixture
    file, sampled by `seed`. Each row's segments then carry their source
    (`segment_source`, indices into `report["sources"]`), and `placement` the source of
    every piece.

    `labels`, if given, holds one label per token: the token itself, or -100 where nothing
    is learned; without it every token is learned. `buffer_size` packs windows of that many
    segments (one plan over all of them by default). `groups`: one JSON scalar per sequence
    (as `--group-by` reads from a field); rows never mix two values, and `row_group` says
    which group each row holds. `algorithm` may also be "module:function" or a callable
    (a user strategy, see packcli.plan.strategy). Same inputs and settings give the same rows as
    `packcli pack`: the planner and the row kernel are the same code.

    With `labels`, a segment left with no learned token is dropped (and counted in
    `report["unlearned"]`) unless `keep_unlearned`; `truncation_side` (`overlong="truncate"`)
    is "left" with labels (cut the start, keep the learned end) and "right" without.
    Rows come in a shuffled order by `seed`, as `packcli pack` writes them; `shuffle=False`
    keeps the plan's order. `pad_to_multiple_of` (bin mode) pads every segment to a
    multiple of it inside its row and fills `rows.cu_seqlens_unpadded`. `sample_weights`:
    a loss weight per sequence (0 drops it), in `rows.segment_columns["segment_weight"]`,
    as `--weight-field` gives it. Preference pairs: `packcli.pack_pairs`.
    """

    check_settings(seq_len, algorithm, mode, overlong, remainder, buffer_size, max_sequences_per_row, groups)
    if isinstance(sequences, Mapping):
        if sample_weights is not None:
            raise PackcliError("sample_weights apply to a list of sequences, not to a mixture", usage=True)
        if groups is not None:
            raise PackcliError("groups apply to a list of sequences, not to a mixture", usage=True)
        mixture = Mixture(weights, epochs, target_tokens, max_epochs)
        return _pack_mixture(sequences, labels, seq_len, mixture, locals())
    if weights is not None or epochs is not None or target_tokens is not None or max_epochs is not None:
        raise PackcliError(
            "weights, epochs, target_tokens and max_epochs go with a mixture (a mapping of sources)", usage=True
        )
    if truncation_side is not None:
        check_choice("truncation_side", truncation_side, TRUNCATION_SIDES)
    check_pad_multiple(pad_to_multiple_of, seq_len, mode, "pad_to_multiple_of", "seq_len")
    multiple = pad_to_multiple_of or 1
    tokens, lengths, flat_labels = flatten_sequences(sequences, labels)
    counts = IngestCounts()
    side = truncation_side or ("left" if labels is not None else "right")
    table = GroupTable("groups") if groups is not None else None
    weighted = sample_weights is not None
    segmenter = (WeightedSegmenter if weighted else Segmenter)(
        seq_len,
        mode,
        overlong,
        None,
        counts,
        track_owners=True,
        groups=table,
        keep_unlearned=keep_unlearned,
        truncation_side=side,
    )
    seqs = SequenceBatch(tokens, lengths, flat_labels, weights=checked_weights(sample_weights, len(lengths)))
    segmenter.values = SegmentValues(False, True) if weighted else None
    values = None if groups is None else list(groups)
    seg_tokens, seg_lengths, learned = segmenter(seqs, lambda i: f"sequence {i}", values)
    spill = Spill.in_memory(seg_tokens, seg_lengths, learned)
    tags = None
    if segmenter.values is not None:  # sample_weights: each segment's, as --weight-field gives it
        weight = np.concatenate(segmenter.values.weight) if segmenter.values.weight else np.zeros(0, np.float32)
        tags = SpillValues(None, weight).tags(seg_lengths)
    segment_groups = None if table is None else segmenter.group_ids.take(len(seg_lengths))
    settings = PlanSettings(
        seq_len, mode, algorithm, remainder, buffer_size, shuffle, seed, max_sequences_per_row, multiple
    )
    plan = plan_rows(seg_lengths, settings, segment_groups)
    blocks = list(gather_rows(spill, plan, seq_len, pad_id, multiple=multiple, tags=tags))
    rows = Rows.concat(blocks) if blocks else empty_rows(seq_len)
    stats = RowStats(seq_len)
    for block in blocks:
        stats.add(block)
    report = memory_report(stats.summary(), counts, seq_len, mode, overlong)
    if weighted:
        report["zero_weight"] = counts.zero_weight
    report["unlearned"] = unlearned_section(counts, keep_unlearned)
    report["tokens_read"] = counts.tokens_in
    if mode == "concat":
        report["remainder"] = {"policy": remainder, "tokens": plan.remainder_tokens}
    _add_groups_and_cap(report, rows, plan, table, settings, seg_lengths, segment_groups)
    owners = segmenter.owners
    assert owners is not None  # track_owners=True
    pieces = _placed_pieces(plan, seg_lengths)
    placement = {
        "sequence": owners[pieces["source"]],
        "row": pieces["row"],
        "offset": pieces["offset"],
        "length": pieces["length"],
    }
    return PackedSequences(rows=rows, placement=placement, report=report, row_group=plan.row_group)


@dataclass
class Mixture:
    """What pack_sequences takes of a mixture besides its sources."""

    weights: Mapping[str, float] | None
    epochs: Mapping[str, float] | None
    target_tokens: int | None
    max_epochs: float | None


def _pack_mixture(
    sequences: Mapping[str, Sequence[Sequence[int]]],
    labels: Any,
    seq_len: int,
    mixture: Mixture,
    arguments: dict[str, Any],
) -> PackedSequences:
    """pack_sequences of a mixture (see there)."""
    from packcli.engine.memory_mixture import SourceSegments, mixture_spec, pack_mixture

    if labels is not None and not isinstance(labels, Mapping):
        raise PackcliError("labels of a mixture are a mapping of source names to labels, as its sequences are")
    a = arguments
    side = a["truncation_side"] or ("left" if labels is not None else "right")
    segmented = []
    for name, own in sequences.items():
        own_labels = None if labels is None else labels.get(name)
        tokens, lengths, flat_labels = flatten_sequences(own, own_labels)
        counts = IngestCounts()
        segmenter = Segmenter(
            seq_len, a["mode"], a["overlong"], None, counts, keep_unlearned=a["keep_unlearned"], truncation_side=side
        )
        seg = segmenter(SequenceBatch(tokens, lengths, flat_labels), functools.partial(_sequence_of, str(name)))
        segmented.append(SourceSegments(str(name), *seg, segmenter.batch_owners.copy(), len(lengths), counts))
    spec = mixture_spec(
        [s.name for s in segmented],
        mixture.weights,
        mixture.epochs,
        mixture.target_tokens,
        mixture.max_epochs,
        a["seed"],
    )
    multiple = a["pad_to_multiple_of"] or 1
    settings = PlanSettings(
        seq_len, a["mode"], a["algorithm"], a["remainder"], a["buffer_size"], a["shuffle"], a["seed"],
        a["max_sequences_per_row"], multiple,
    )  # fmt: skip
    packed = pack_mixture(segmented, spec, settings, a["pad_id"])
    counts = IngestCounts()
    for source in segmented:
        counts.tokens_in += source.counts.tokens_in
        counts.overlong += source.counts.overlong
        counts.overlong_tokens_lost += source.counts.overlong_tokens_lost
    counts.unpacked_rows = len(packed.lengths) if a["mode"] == "bin" else int((-(-packed.lengths // seq_len)).sum())
    report = memory_report(packed.stats.summary(), counts, seq_len, a["mode"], a["overlong"])
    report["tokens_read"] = counts.tokens_in
    report["sources"] = packed.table
    if a["mode"] == "concat":
        report["remainder"] = {"policy": a["remainder"], "tokens": packed.plan.remainder_tokens}
    pieces = _placed_pieces(packed.plan, packed.lengths)
    placement = {
        "source": packed.source[pieces["source"]],
        "sequence": packed.sequence[pieces["source"]],
        "row": pieces["row"],
        "offset": pieces["offset"],
        "length": pieces["length"],
    }
    return PackedSequences(rows=packed.rows, placement=placement, report=report)


def _sequence_of(source: str, i: int) -> str:
    return f"{source} sequence {i}"


def _placed_pieces(plan: Plan, lengths: np.ndarray) -> dict[str, np.ndarray]:
    """Every placed piece: its segment (`source`), `row`, `offset` and `length`. The plan's
    contract gives pieces by row, for gathering; this lists each kind's own way, in the
    order its kind keeps them. `lengths`: the segments'."""
    if isinstance(plan, RowPlan):
        return {"source": plan.source, "row": plan.row, "offset": plan.offset, "length": plan.piece_len}
    if isinstance(plan, PatternPlan):
        return plan.placement(np.cumsum(lengths) - lengths)
    if isinstance(plan, StreamPlan):
        return plan.placement()
    raise PackcliError(f"internal: no placement of a {type(plan).__name__}")


def _add_groups_and_cap(
    report: dict[str, Any],
    rows: Rows,
    plan: Plan,
    table: GroupTable | None,
    settings: PlanSettings,
    lengths: np.ndarray,
    groups: np.ndarray | None,
) -> None:
    """The report's group table and the cap's cost, as `packcli pack` gives them."""
    if table is not None and plan.row_group is not None:
        counts = group_counts(plan.row_group, rows.num_segments, rows.real_lengths(), len(table.values))
        every_token = settings.mode == "bin" or settings.remainder == "pad"
        report["groups"] = group_entries(table, counts, settings.seq_len, hashed=every_token)
    if settings.max_per_row is not None and not is_custom(settings.algorithm):
        uncapped = uncapped_rows(lengths, settings, groups)
        report["max_sequences_per_row"] = {
            "cap": settings.max_per_row,
            "rows": len(rows),
            "uncapped_rows": uncapped,
            "extra_rows": len(rows) - uncapped,
        }
