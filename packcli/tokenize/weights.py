"""A loss weight per record (`--weight-field`), carried beside the sequences it makes."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from packcli.tokenize.sequences import SequenceBatch, SequenceBuilder

if TYPE_CHECKING:
    from packcli.read.checks import FieldKind
    from packcli.read.records import RecordBatch


class WeightedSequences:
    """Another builder's sequences, each with its record's weight (`SequenceBatch.weights`).

    The reader checks the field (a finite number, 0 or more; else a bad record named by
    file and line); a record without it, or with null, takes `default`, or is a bad
    record when there is none. Weights of 0 are kept here: the engine drops and counts
    their records."""

    def __init__(self, inner: SequenceBuilder, field: str, default: float | None):
        self.inner, self.field, self.default = inner, field, default
        kind: FieldKind = "weight" if default is None else "weight_or_absent"
        self.fields: dict[str, FieldKind] = {**inner.fields, field: kind}
        self.labels = inner.labels

    def build(self, batch: RecordBatch) -> SequenceBatch:
        sequences = self.inner.build(batch)
        default = 0.0 if self.default is None else self.default  # None occurs only with a default
        values = np.fromiter(
            (default if v is None else v for v in batch.columns[self.field]), dtype=np.float64, count=len(batch)
        )
        sequences.weights = values if sequences.records is None else values[sequences.records]
        return sequences
