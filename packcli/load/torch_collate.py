"""Collate functions, a batch of examples to a `PackedBatch`: `collate_rows` for rows
packed already (PackedDataset's items, packcli.load.hf's, any dicts of arrays),
`PackingCollator` for sequences, packed on the fly by `pack_sequences`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from packcli.core.errors import PackcliError, needs_extra

with needs_extra("torch", "packcli.load.torch needs PyTorch"):
    import torch

from packcli.engine.memory import pack_sequences
from packcli.load.torch_batch import PackedBatch, build_batch, long_tensor, segment_tensor
from packcli.write.columns import is_segment_column

__all__ = ["PackingCollator", "collate_rows"]


def collate_rows(examples: Sequence[Mapping]) -> PackedBatch:
    """Collate already packed rows (from `PackedDataset`, `packcli.load.hf`, any dicts of arrays).

    Each example needs `input_ids`, `labels` and `position_ids` of the same length.
    `cu_seqlens` is taken from the example if present, else from where `position_ids`
    restart at 0. The padding segment is known from `num_segments` (or the length of a
    per-segment column such as `segment_source`, or an `attention_mask`); without any,
    every token counts as real in `attention_mask`. Per-segment columns (`segment_*`)
    become the batch's `segment_columns`, each row's first `num_segments` entries (the -1
    that `cu_seqlens_len` pads them with dropped).
    """
    if not examples:
        raise PackcliError("cannot collate an empty batch")
    stacked = {}
    for name in ("input_ids", "labels", "position_ids"):
        try:
            stacked[name] = torch.stack([long_tensor(example[name]) for example in examples])
        except KeyError:
            raise PackcliError(f"every example needs {name!r} (got {', '.join(examples[0].keys())})") from None
        except RuntimeError as exc:
            raise PackcliError(f"rows of different lengths cannot be collated ({name}): {exc}") from None
    if stacked["input_ids"].dim() != 2:
        raise PackcliError("each example must be one row: input_ids of shape [seq_len]")
    seq_len = stacked["input_ids"].shape[1]
    names = [name for name in examples[0] if is_segment_column(name)]
    row_cu, counts, unpadded = [], [], []
    per_segment: dict[str, list[torch.Tensor]] = {name: [] for name in names}
    for r, example in enumerate(examples):
        if "cu_seqlens" in example:
            cu = _entries(example, "cu_seqlens")
        else:
            starts = torch.nonzero(stacked["position_ids"][r] == 0).flatten()
            cu = torch.cat([starts, torch.tensor([seq_len])]).to(torch.int32)
        if cu.numel() < 2 or int(cu[0]) != 0 or int(cu[-1]) != seq_len:
            raise PackcliError(f"row {r}: cu_seqlens must run from 0 to seq_len {seq_len}")
        row_cu.append(cu)
        if "cu_seqlens_unpadded" in example:
            unpadded.append(_entries(example, "cu_seqlens_unpadded"))
        values = {name: _segment_values(example, name, r) for name in names}
        if "num_segments" in example:
            counts.append(int(example["num_segments"]))
        elif values:
            counts.append(len(next(iter(values.values()))))
        elif "attention_mask" in example:  # padding is the row's tail: the segments that end before it are real
            real = int(long_tensor(example["attention_mask"]).sum())
            counts.append(int((cu[1:] <= real).sum()))
        else:
            counts.append(cu.numel() - 1)
        for name, row_values in values.items():
            if len(row_values) < counts[-1]:
                raise PackcliError(f"row {r}: {name} has {len(row_values)} entries for {counts[-1]} segments")
            per_segment[name].append(row_values[: counts[-1]])
    if unpadded and len(unpadded) != len(examples):
        raise PackcliError("some rows have cu_seqlens_unpadded and others not")
    return build_batch(
        stacked["input_ids"],
        stacked["labels"],
        stacked["position_ids"],
        row_cu,
        torch.tensor(counts),
        unpadded or None,
        segments={name: torch.cat(parts) for name, parts in per_segment.items()},
    )


def _segment_values(example: Mapping, name: str, r: int) -> torch.Tensor:
    """A row's entries of a per-segment column, as int64 (float32 for a float column)."""
    if name not in example:
        raise PackcliError(f"row {r} has no {name!r}, the first row has")
    return segment_tensor(example[name])


def _entries(example: Mapping, name: str) -> torch.Tensor:
    """A row's cu_seqlens (or cu_seqlens_unpadded), without the -1 that pad it to a fixed
    length (`PackedDataset(cu_seqlens_len=K)`)."""
    values = torch.as_tensor(np.asarray(example[name]), dtype=torch.int32)
    argmin = example.get(f"{name}_argmin")
    return values[: int(argmin)] if argmin is not None else values[values >= 0]


class PackingCollator:
    """collate_fn that packs a DataLoader batch of sequences on the fly.

    Examples are token lists or dicts with `input_ids` (and optionally `labels`, -100
    where nothing is learned), BOS/EOS already in place unless `eos_id` is given (then it
    is appended and learned). The sequences are packed with `packcli.pack_sequences`
    (same options), so a batch of N sequences becomes as many rows as they need: the
    number of rows varies from batch to batch.
    """

    def __init__(self, seq_len: int, *, pad_id: int = 0, eos_id: int | None = None, **pack_options):
        self.seq_len, self.pad_id, self.eos_id, self.pack_options = seq_len, pad_id, eos_id, pack_options

    def __call__(self, examples: Sequence) -> PackedBatch:
        sequences, labels = [], []
        for example in examples:
            if isinstance(example, Mapping):
                ids = _as_list(example["input_ids"])
                label = _as_list(example["labels"]) if "labels" in example else None
            else:
                ids, label = _as_list(example), None
            if self.eos_id is not None:
                ids = [*ids, self.eos_id]
                label = None if label is None else [*label, self.eos_id]
            sequences.append(ids)
            labels.append(label)
        learned = None
        if any(label is not None for label in labels):
            learned = [label if label is not None else s for label, s in zip(labels, sequences)]
        packed = pack_sequences(sequences, self.seq_len, pad_id=self.pad_id, labels=learned, **self.pack_options)
        return PackedBatch.from_rows(packed.rows)


def _as_list(values) -> list:
    if isinstance(values, torch.Tensor):
        return values.tolist()
    return np.asarray(values).reshape(-1).tolist()
