"""packcli as a library: pack token sequences in memory with the engine the CLI uses.

    from packcli import pack_sequences
    packed = pack_sequences([[1, 2, 3], [4, 5]], seq_len=8, pad_id=0)
    packed.input_ids, packed.labels, packed.position_ids, packed.cu_seqlens_per_row()

Labels are NOT shifted (Hugging Face convention: the model shifts them); they are -100
on the first token of every segment and on padding, so nothing is predicted across a
boundary.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from packcli.errors import PackcliError
from packcli.rows import Rows


@dataclass
class PackedSequences:
    """Packed rows (NumPy) with where every sequence went and the efficiency figures."""

    rows: Rows
    placement: dict[str, np.ndarray]  # sequence, row, offset, length: one entry per packed piece
    report: dict

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
    def efficiency(self) -> float:
        return self.report["efficiency"]

    @property
    def num_rows(self) -> int:
        return len(self.rows)


def pack_sequences(
    sequences: Sequence[Sequence[int]],
    seq_len: int,
    *,
    algorithm: str = "bfd",
    pad_id: int = 0,
    labels: Sequence[Sequence[int]] | None = None,
    mode: str = "bin",
    overlong: str = "split",
    remainder: str = "pad",
    buffer_size: int | None = None,
    shuffle: bool = False,
    seed: int = 0,
) -> PackedSequences:
    """Pack token sequences (BOS/EOS already in place) into rows of exactly `seq_len`.

    `labels`, if given, holds one label per token (-100 where nothing is learned); without
    it every token is learned. `buffer_size` packs windows of that many sequences (all in
    one window by default). Same inputs and settings give the same rows as `packcli pack`.
    """
    from packcli.kernels import ALGORITHMS
    from packcli.packing import MODES, OVERLONG_POLICIES, REMAINDER_POLICIES, Counters, PackSettings, Placement, make_packer
    from packcli.report import RowStats, no_packing_baseline
    from packcli.sequences import SequenceBatch

    for name, value, allowed in (
        ("algorithm", algorithm, ALGORITHMS),
        ("mode", mode, MODES),
        ("overlong", overlong, OVERLONG_POLICIES),
        ("remainder", remainder, REMAINDER_POLICIES),
    ):
        if value not in allowed:
            raise PackcliError(f"{name} must be one of {', '.join(allowed)}, not {value!r}")
    if seq_len < 1:
        raise PackcliError(f"seq_len must be at least 1, not {seq_len}")
    if mode == "concat" and shuffle:
        raise PackcliError("shuffle with mode='concat' is not supported here: shuffle the rows yourself")
    arrays = [np.asarray(s, dtype=np.int64).reshape(-1) for s in sequences]
    if any(len(a) == 0 for a in arrays):
        raise PackcliError(f"sequence {next(i for i, a in enumerate(arrays) if len(a) == 0)} is empty")
    lengths = np.array([len(a) for a in arrays], dtype=np.int64)
    tokens = np.concatenate(arrays) if arrays else np.zeros(0, dtype=np.int64)
    if len(tokens) and (tokens.min() < 0 or tokens.max() > np.iinfo(np.int32).max):
        raise PackcliError("token ids must be between 0 and 2^31-1")
    flat_labels = None
    if labels is not None:
        label_arrays = [np.asarray(l, dtype=np.int64).reshape(-1) for l in labels]
        if len(label_arrays) != len(arrays) or any(len(l) != len(a) for l, a in zip(label_arrays, arrays)):
            raise PackcliError("labels must have one label per token of every sequence")
        flat_labels = (np.concatenate(label_arrays) if label_arrays else np.zeros(0)).astype(np.int32)
    batch = SequenceBatch(tokens.astype(np.int32), lengths, flat_labels)

    settings = PackSettings(
        seq_len=seq_len, pad_id=pad_id, mode=mode, algorithm=algorithm, overlong=overlong,
        remainder=remainder, buffer_size=buffer_size or max(1, len(arrays)), shuffle=shuffle, seed=seed,
    )
    counters, placement, stats = Counters(), Placement(), RowStats(seq_len)
    packer = make_packer(settings, counters, placement)
    blocks = [*packer.add(batch, lambda i: f"sequence {i}"), *packer.finish()]
    rows = Rows.concat(blocks) if blocks else _empty_rows(seq_len)
    for block in blocks:
        stats.add(block)
    summary = stats.summary()
    report = {
        **summary,
        "no_packing": no_packing_baseline(counters.unpacked_rows, summary["real_tokens"], seq_len),
        "overlong": {
            "policy": overlong if mode == "bin" else None,
            "count": counters.overlong,
            "tokens_lost": counters.overlong_tokens_lost,
            "dropped_without_labels": counters.no_labels_dropped,
        },
    }
    if mode == "concat":
        report["remainder"] = {"policy": remainder, "tokens": counters.remainder_tokens}
    return PackedSequences(rows=rows, placement=placement.arrays(), report=report)


def _empty_rows(seq_len: int) -> Rows:
    empty = np.zeros((0, seq_len), dtype=np.int32)
    return Rows(empty, empty.copy(), empty.copy(), np.zeros(0, np.int32), np.zeros(1, np.int64), np.zeros(0, np.int32))
