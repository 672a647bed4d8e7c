"""packcli as a library for preference pairs: pack (chosen, rejected) token sequences in
memory with the engine `packcli pack` runs on pairs.

    from packcli import pack_pairs
    packed = pack_pairs(chosen, rejected, seq_len=2048, chosen_labels=..., rejected_labels=..., pad_id=0)
    packed.rows.segment_columns["segment_pair"], packed.rows.segment_columns["segment_chosen"]

Each pair becomes two segments next to each other in one row, chosen then rejected; the
prompt (the tokens both sides share before what they learn) is masked by the labels the
caller gives, exactly as SFT masks it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from packcli.core.choices import OVERLONG_POLICIES
from packcli.core.errors import PackcliError
from packcli.core.options import check_choice, check_pad_multiple
from packcli.engine.ingest import IngestCounts
from packcli.engine.memory import PackedSequences
from packcli.engine.memory_input import check_settings, checked_weights, empty_rows, flatten_sequences, memory_report
from packcli.engine.pairs import PairSegmenter
from packcli.engine.summary import pairs_section, unlearned_section
from packcli.plan.pairs import plan_pairs
from packcli.plan.rows import Rows
from packcli.plan.settings import PlanSettings
from packcli.plan.strategy import Strategy
from packcli.tokenize.sequences import SequenceBatch
from packcli.write.gather import gather_rows
from packcli.write.report import RowStats
from packcli.write.spill import Spill
from packcli.write.values import SegmentValues, SpillValues


def pack_pairs(
    chosen: Sequence[Sequence[int]],
    rejected: Sequence[Sequence[int]],
    seq_len: int,
    *,
    chosen_labels: Sequence[Sequence[int]] | None = None,
    rejected_labels: Sequence[Sequence[int]] | None = None,
    sample_weights: Sequence[float] | None = None,
    algorithm: str | Strategy = "bfd",
    mode: str = "bin",
    overlong: str = "truncate",
    pad_id: int = 0,
    shuffle: bool = True,
    seed: int = 0,
    max_sequences_per_row: int | None = None,
    keep_unlearned: bool = False,
    pad_to_multiple_of: int | None = None,
) -> PackedSequences:
    """Pack preference pairs (each side its prompt and completion, BOS/EOS in place) into
    rows of exactly `seq_len`, as `packcli pack --chosen-field ... --rejected-field ...` packs them.

    `chosen_labels` / `rejected_labels` hold one label per token (the token, or -100 on the
    prompt), both or neither; without them every token is learned. `sample_weights`: a
    loss weight per pair (0 drops it), in column `segment_weight`. `overlong`: truncate
    (cut both prompts from their start by the same number of tokens; a pair that still
    does not fit is dropped and counted), drop or error; a pair is never split.
    `max_sequences_per_row` counts a pair as two. `placement` lists each pair's row and
    offset (`sequence`: the pair's index in the input), `report["pairs"]` the pairs kept."""
    check_settings(seq_len, algorithm, mode, "drop", "pad", None, max_sequences_per_row)
    check_choice("overlong", overlong, tuple(o for o in OVERLONG_POLICIES if o != "split"))
    check_pad_multiple(pad_to_multiple_of, seq_len, mode, "pad_to_multiple_of", "seq_len")
    if len(chosen) != len(rejected):
        raise PackcliError(f"{len(chosen)} chosen sequences for {len(rejected)} rejected ones", usage=True)
    if (chosen_labels is None) != (rejected_labels is None):
        raise PackcliError("chosen_labels and rejected_labels go together", usage=True)
    if max_sequences_per_row is not None and max_sequences_per_row < 2:
        raise PackcliError("max_sequences_per_row must be at least 2 with pairs (a pair is two sequences)", usage=True)
    multiple = pad_to_multiple_of or 1
    sides = [s for pair in zip(chosen, rejected) for s in pair]
    labels = None
    if chosen_labels is not None and rejected_labels is not None:
        labels = [s for pair in zip(chosen_labels, rejected_labels) for s in pair]
    tokens, lengths, flat_labels = flatten_sequences(sides, labels)
    if flat_labels is None:
        flat_labels = tokens.copy()
    weights = checked_weights(sample_weights, len(chosen))
    seqs = SequenceBatch(
        tokens,
        lengths,
        flat_labels,
        records=np.repeat(np.arange(len(chosen), dtype=np.int64), 2),
        weights=None if weights is None else np.repeat(weights, 2),
    )
    counts = IngestCounts()
    segmenter = PairSegmenter(
        seq_len, mode, overlong, None, counts, track_owners=True, keep_unlearned=keep_unlearned, multiple=multiple
    )
    segmenter.values = SegmentValues(True, weights is not None)
    unit_tokens, unit_lengths, learned = segmenter(seqs, lambda i: f"pair {i}")
    values = segmenter.values
    first = np.concatenate(values.first) if values.first else np.zeros(0, dtype=np.int64)
    weight = np.concatenate(values.weight) if values.weight else (None if weights is None else np.zeros(0, np.float32))
    settings = PlanSettings(seq_len, mode, algorithm, "pad", None, shuffle, seed, max_sequences_per_row, multiple)
    plan = plan_pairs(first, unit_lengths, settings)
    spill = Spill.in_memory(unit_tokens, unit_lengths, learned)
    tags = SpillValues(first, weight).tags(unit_lengths)
    blocks = list(gather_rows(spill, plan, seq_len, pad_id, multiple=multiple, tags=tags))
    rows = Rows.concat(blocks) if blocks else empty_rows(seq_len)
    stats = RowStats(seq_len)
    for block in blocks:
        stats.add(block)
    report: dict[str, Any] = memory_report(stats.summary(), counts, seq_len, "bin", overlong)
    report["unlearned"] = unlearned_section(counts, keep_unlearned)
    report["tokens_read"] = counts.tokens_in
    report["pairs"] = pairs_section(counts)
    owners = segmenter.owners
    assert owners is not None  # track_owners=True
    placement = {
        "sequence": owners,
        "row": plan.row,
        "offset": plan.offset,
        "length": plan.length,
        "chosen_length": plan.first,
    }
    return PackedSequences(rows=rows, placement=placement, report=report)
