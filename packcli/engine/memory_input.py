"""What the in-memory entry points (`pack_sequences`, `pack_pairs`) share: checking their
arguments as the CLI checks its options, turning Python sequences into flat arrays, and
the report's figures for rows packed in memory."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from packcli.core.choices import MODES, OVERLONG_POLICIES, REMAINDER_POLICIES
from packcli.core.errors import PackcliError
from packcli.core.options import check_algorithm, check_choice, check_positive, check_seq_len
from packcli.engine.ingest import IngestCounts
from packcli.plan.rows import Rows
from packcli.plan.strategy import Strategy
from packcli.write.report import no_packing_baseline


def memory_report(
    summary: Mapping[str, Any], counts: IngestCounts, seq_len: int, mode: str, overlong: str
) -> dict[str, Any]:
    """The figures `packcli pack` reports, for rows packed in memory."""
    return {
        **summary,
        "no_packing": no_packing_baseline(counts.unpacked_rows, summary["real_tokens"], seq_len),
        "overlong": {
            "policy": overlong if mode == "bin" else None,
            "count": counts.overlong,
            "tokens_lost": counts.overlong_tokens_lost,
            "dropped_without_labels": counts.no_labels_dropped,
        },
    }


def check_settings(
    seq_len: int,
    algorithm: str | Strategy,
    mode: str,
    overlong: str,
    remainder: str,
    buffer_size: int | None,
    max_sequences_per_row: int | None = None,
    groups: Sequence[Any] | None = None,
) -> None:
    """The CLI's own checks (packcli.core.options), named as the arguments are here."""
    if isinstance(algorithm, str):
        check_algorithm(algorithm, "algorithm")
    elif not callable(algorithm):
        raise PackcliError(f"algorithm must be a name, module:function or a callable, not {algorithm!r}", usage=True)
    check_choice("mode", mode, MODES)
    check_choice("overlong", overlong, OVERLONG_POLICIES)
    check_choice("remainder", remainder, REMAINDER_POLICIES)
    check_seq_len(seq_len)
    check_positive("buffer_size", buffer_size)
    check_positive("max_sequences_per_row", max_sequences_per_row)
    if mode == "concat" and (max_sequences_per_row is not None or not isinstance(algorithm, str) or ":" in algorithm):
        raise PackcliError("max_sequences_per_row and user strategies apply to bin mode", usage=True)
    if groups is not None and mode == "concat" and buffer_size is not None:
        raise PackcliError("groups with mode='concat' plan one stream per group: drop buffer_size", usage=True)


def checked_weights(sample_weights: Sequence[float] | None, count: int) -> np.ndarray | None:
    """A loss weight per sequence as float64, each a finite number, 0 or more (None: none)."""
    if sample_weights is None:
        return None
    weights = np.asarray(sample_weights, dtype=np.float64).reshape(-1)
    if len(weights) != count:
        raise PackcliError(f"{len(weights)} sample weights for {count} sequences", usage=True)
    bad = np.flatnonzero(~np.isfinite(weights) | (weights < 0))
    if len(bad):
        raise PackcliError(
            f"sample weight {weights[bad[0]]} of sequence {int(bad[0])} is not a finite number, 0 or more"
        )
    return weights


def flatten_sequences(
    sequences: Sequence[Sequence[int]], labels: Sequence[Sequence[int]] | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Sequences (and their labels) as flat int32 arrays plus their lengths, refusing an empty
    sequence, an id outside int32 and labels that do not match the sequences token for token."""
    arrays = [np.asarray(s, dtype=np.int64).reshape(-1) for s in sequences]
    if any(len(a) == 0 for a in arrays):
        raise PackcliError(f"sequence {next(i for i, a in enumerate(arrays) if len(a) == 0)} is empty")
    lengths = np.array([len(a) for a in arrays], dtype=np.int64)
    tokens = np.concatenate(arrays) if arrays else np.zeros(0, dtype=np.int64)
    if len(tokens) and (tokens.min() < 0 or tokens.max() > np.iinfo(np.int32).max):
        raise PackcliError("token ids must be between 0 and 2^31-1")
    flat_labels = None
    if labels is not None:
        label_arrays = [np.asarray(lab, dtype=np.int64).reshape(-1) for lab in labels]
        if len(label_arrays) != len(arrays) or any(len(lab) != len(a) for lab, a in zip(label_arrays, arrays)):
            raise PackcliError("labels must have one label per token of every sequence")
        flat_labels = (np.concatenate(label_arrays) if label_arrays else np.zeros(0)).astype(np.int32)
    return tokens.astype(np.int32), lengths, flat_labels


def empty_rows(seq_len: int) -> Rows:
    """No rows, shaped for seq_len: what packing no sequences gives."""
    empty = np.zeros((0, seq_len), dtype=np.int32)
    return Rows(empty, empty.copy(), empty.copy(), np.zeros(0, np.int32), np.zeros(1, np.int64), np.zeros(0, np.int32))
