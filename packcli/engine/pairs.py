"""Segments with values of their own: preference pairs (two sequences placed as one unit)
and loss weights (--weight-field), from the sequences a builder made to the spill.

`PairSegmenter` turns each pair's two sequences (chosen, then rejected) into one spill
segment, the chosen one's length kept beside it (write/values.py), with --overlong
applied to the pair as a whole: never split; truncated by cutting both prompts from their
start by the same number of tokens (dropped and counted when even that leaves it longer
than a row); dropped; or an error. `WeightedSegmenter` is the plain segmenter with each
segment's weight kept beside it. Both drop the records of weight 0 and count them.

A run with such values plans per piece from a spill in input order (the local engine's
Run.plan, the Ray driver): pairs with plan/pairs.py, weighted segments with the usual
plan of their lengths, never from the length histogram, a spill written by length or
its sorted copy; the rows' per-segment columns come from the pieces' places in the spill
(`value_tags`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from packcli.core.errors import PackcliError
from packcli.core.options import PackOptions
from packcli.engine.ingest import (
    UNLEARNED_EXAMPLES,
    IngestCounts,
    Locate,
    SegmentBatch,
    Segmenter,
    learns_after_first,
    owner_of,
    refuse_pad_in_data,
)
from packcli.plan.contract import Plan
from packcli.plan.grouping import GroupTable
from packcli.plan.pairs import start_warming
from packcli.plan.rows import learned_bits, padded_lengths
from packcli.plan.settings import plan_settings
from packcli.tokenize.sequences import SequenceBatch
from packcli.write.gather import PieceTags
from packcli.write.spill import Spill
from packcli.write.values import CHOSEN_COLUMN, PAIR_COLUMN, WEIGHT_COLUMN, SegmentValues, SpillValues


def value_segmenter(
    opts: PackOptions,
    counts: IngestCounts,
    refuse_pad: int | None,
    groups: GroupTable | None = None,
    token_dtype: np.dtype | None = None,
) -> Segmenter:
    """The segmenter of a run whose segments carry values (opts.per_segment_values);
    `token_dtype`: the spill's, whose rows a run of pairs loads the kernels of ahead."""
    values = SegmentValues(opts.pairs, opts.weight_field is not None)
    settings: dict[str, Any] = {
        "groups": groups,
        "keep_unlearned": opts.keep_unlearned,
        "truncation_side": opts.resolved_truncation_side,
    }
    segmenter: Segmenter
    if opts.pairs:
        pairs = PairSegmenter(
            opts.seq_len, opts.mode, opts.resolved_overlong, refuse_pad, counts, multiple=opts.pad_multiple, **settings
        )
        if token_dtype is not None:
            pairs.warm = functools.partial(start_warming, plan_settings(opts), token_dtype)
        segmenter = pairs
    else:
        segmenter = WeightedSegmenter(opts.seq_len, opts.mode, opts.resolved_overlong, refuse_pad, counts, **settings)
    segmenter.values = values
    return segmenter


def _select(seqs: SequenceBatch, keep: np.ndarray) -> SequenceBatch:
    """The sequences `keep` (bool per sequence) of a batch, in order, with their records and weights."""
    tokens = np.repeat(keep, seqs.lengths)
    records = np.arange(len(seqs.lengths), dtype=np.int64) if seqs.records is None else seqs.records
    return SequenceBatch(
        seqs.tokens[tokens],
        seqs.lengths[keep],
        None if seqs.labels is None else seqs.labels[tokens],
        seqs.special_token_records,
        records[keep],
        None if seqs.weights is None else seqs.weights[keep],
    )


class WeightedSegmenter(Segmenter):
    """The plain segmenter, each segment's weight (its record's) kept in `values`; records
    of weight 0 dropped first and counted (`zero_weight`), so no other count sees them."""

    def __call__(self, seqs: SequenceBatch, location: Locate, group_values: list[Any] | None = None) -> SegmentBatch:
        assert seqs.weights is not None and self.values is not None  # a WeightedSequences builder's
        zero = seqs.weights == 0
        self.counts.zero_weight += int(zero.sum())
        kept = _select(seqs, ~zero)
        records = kept.records
        assert records is not None
        values = None if group_values is None else [group_values[int(r)] for r in records]
        segments, owners = self._segments(kept, lambda i: location(int(records[i])), values)
        self._number(np.flatnonzero(~zero)[owners], len(seqs.lengths))  # numbered by the input's sequences
        self.values.append(None, seqs.weights[self.batch_owners])
        return segments


class PairSegmenter(Segmenter):
    """Each preference pair (two sequences of a batch, chosen then rejected) made one
    segment of the spill; see the module docstring. The counts are those of sequences
    (two per pair), but `overlong` counts pairs; `pairs` counts those kept."""

    def __init__(self, *args: Any, multiple: int = 1, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.multiple = multiple
        self.warm: Callable[[], None] | None = None  # the plan's kernels loaded ahead, on the first batch

    def __call__(self, seqs: SequenceBatch, location: Locate, group_values: list[Any] | None = None) -> SegmentBatch:
        assert seqs.records is not None and seqs.labels is not None  # a PairSequences builder's
        if self.warm is not None:  # the input is being read: the workers are forked
            self.warm()
            self.warm = None
        c = self.counts
        for record in seqs.identical:
            c.pairs_identical += 1
            if len(c.pairs_identical_examples) < UNLEARNED_EXAMPLES:
                c.pairs_identical_examples.append(location(record))
        built = len(seqs.lengths) // 2
        pair_index = np.arange(built, dtype=np.int64)  # the pairs of the batch, as built
        if seqs.weights is not None:
            zero = seqs.weights == 0
            c.zero_weight += int(zero.sum()) // 2
            pair_index = pair_index[~zero[0::2]]
            seqs = _select(seqs, ~zero)
        records = seqs.records
        assert records is not None and seqs.labels is not None
        tokens, lengths = seqs.tokens, seqs.lengths
        c.sequences_in += len(lengths)
        c.tokens_in += int(lengths.sum())
        c.special_token_records += seqs.special_token_records
        pair_record = records[0::2]
        where: Locate = lambda k: location(int(pair_record[k]))  # noqa: E731 (k: a pair of the batch)
        starts = np.cumsum(lengths) - lengths
        if self.refuse_pad is not None:
            refuse_pad_in_data(tokens, lengths, self.refuse_pad, lambda i: location(int(records[i])))
        learned = learned_bits(tokens, seqs.labels, lambda i: location(int(records[owner_of(starts, i)])))
        keep = self._learning(learned, starts, lengths, where)
        cut = self._pair_overlong(tokens, learned, starts, lengths, keep, where)
        chosen, rejected = lengths[0::2] - cut, lengths[1::2] - cut
        out_tokens, out_learned = tokens, learned
        sides = np.repeat(keep, 2)
        if not sides.all() or cut.any():
            # each side's tokens from its first kept one on; a dropped side's "first" is its end
            begin = np.where(sides, starts + np.repeat(cut, 2), starts + lengths)
            mask = np.arange(len(tokens)) >= np.repeat(begin, lengths)
            out_tokens, out_learned = tokens[mask], learned[mask]
        unit_lengths = (chosen + rejected)[keep]
        c.pairs += int(keep.sum())
        c.unpacked_rows += int(keep.sum())  # no packing: a pair alone in a row
        self._number(pair_index[keep], built)  # pack_pairs' owners number pairs
        if self.groups is not None:
            if group_values is None:
                raise PackcliError(f"--group-by {self.groups.field}: no value for the batch's records")
            ids = self.groups.ids_of([group_values[int(r)] for r in pair_record[keep]])
            self.group_ids.append(ids)
            self.groups.add_tokens(out_tokens, unit_lengths, ids)
        assert self.values is not None
        weights = None if seqs.weights is None else seqs.weights[0::2][keep]
        self.values.append(chosen[keep], weights)
        return SegmentBatch(out_tokens, unit_lengths, out_learned)

    def _learning(self, learned: np.ndarray, starts: np.ndarray, lengths: np.ndarray, where: Locate) -> np.ndarray:
        """Per pair, whether it is kept: both sides learn a token after their first, or
        --keep-unlearned. Pairs that do not are counted (no_labels: two sequences each)."""
        learns = learns_after_first(learned, starts, lengths)
        both = learns[0::2] & learns[1::2]
        idle = np.flatnonzero(~both)
        c = self.counts
        if len(idle):
            c.unlearned_no_labels += 2 * len(idle)
            c.unlearned_no_labels_tokens += int((lengths[0::2][idle] + lengths[1::2][idle]).sum())
            for k in idle[: max(0, UNLEARNED_EXAMPLES - len(c.unlearned_examples))].tolist():
                c.unlearned_examples.append(where(k))
        return both | self.keep_unlearned

    def _pair_overlong(
        self,
        tokens: np.ndarray,
        learned: np.ndarray,
        starts: np.ndarray,
        lengths: np.ndarray,
        keep: np.ndarray,
        where: Locate,
    ) -> np.ndarray:
        """--overlong on each kept pair longer than a row (its two segments, each padded to
        --pad-to-multiple-of): the tokens cut from the start of both its sides, or the pair
        dropped (`keep` cleared). Returns the cut per pair."""
        c, seq_len, multiple = self.counts, self.seq_len, self.multiple
        chosen, rejected = lengths[0::2], lengths[1::2]
        cut = np.zeros(len(chosen), dtype=np.int64)
        room = padded_lengths(chosen, multiple) + padded_lengths(rejected, multiple)
        for k in np.flatnonzero(keep & (room > seq_len)).tolist():
            c.overlong += 1
            total = int(chosen[k] + rejected[k])
            if self.overlong == "error":
                raise PackcliError(
                    f"{where(k)}: pair has {total:,} tokens ({int(chosen[k]):,} + {int(rejected[k]):,}), more than "
                    f"--seq-len {seq_len:,} (--overlong error; a pair is never split: use truncate or drop)"
                )
            found = self._cut(tokens, learned, starts, 2 * k, int(chosen[k]), int(rejected[k]))
            if self.overlong == "truncate" and found is not None:
                cut[k] = found
                c.overlong_tokens_lost += 2 * found
                continue
            if self.overlong == "truncate":
                c.pairs_overlong_dropped += 1
            keep[k] = False
            c.overlong_tokens_lost += total
        return cut

    def _cut(
        self, tokens: np.ndarray, learned: np.ndarray, starts: np.ndarray, first: int, chosen: int, rejected: int
    ) -> int | None:
        """The fewest tokens cut from the start of both sides (sequences `first` and
        `first + 1`) that make the pair fit a row, within their shared prompt: up to the
        token before either side's first learned one (as SFT truncation keeps it); None
        when no cut makes it fit."""
        a = tokens[starts[first] : starts[first] + chosen]
        b = tokens[starts[first + 1] : starts[first + 1] + rejected]
        shared = min(chosen, rejected)
        differ = np.flatnonzero(a[:shared] != b[:shared])
        common = int(differ[0]) if len(differ) else shared
        firsts = [
            int(np.argmax(learned[s : s + n])) if learned[s : s + n].any() else n
            for s, n in ((starts[first], chosen), (starts[first + 1], rejected))
        ]
        most = max(0, min(common, *firsts) - 1)
        multiple, seq_len = self.multiple, self.seq_len
        for k in range(max(0, -(-(chosen + rejected - seq_len) // 2)), most + 1):
            room = -(-(chosen - k) // multiple) * multiple + -(-(rejected - k) // multiple) * multiple
            if room <= seq_len:
                return k
        return None


# ----------------------------------------------------------------------------- plan and gather


def value_columns(opts: PackOptions) -> tuple[str, ...]:
    """The per-segment columns an output of these options has (besides segment_source)."""
    names = (CHOSEN_COLUMN, PAIR_COLUMN) if opts.pairs else ()
    return names + ((WEIGHT_COLUMN,) if opts.weight_field is not None else ())


def spill_values(opts: PackOptions, directories: list[Path], counts: list[int]) -> SpillValues:
    """The values of a complete spill (its parts, in order, for the Ray engine)."""
    return SpillValues.load(directories, counts, opts.pairs, opts.weight_field is not None)


def value_tags(opts: PackOptions) -> Callable[[Plan, Spill, np.ndarray | None], PieceTags]:
    """The Run's tagging of a run with values: the rows' segment_pair, segment_chosen and
    segment_weight, from the spill's values."""

    def tags(plan: Plan, spill: Spill, groups: np.ndarray | None) -> PieceTags:
        assert spill.directory is not None  # the engines' spills are on disk
        found = spill_values(opts, [spill.directory], [spill.sequences]).tags(spill.lengths)
        assert found is not None  # opts.per_segment_values
        return found

    return tags
