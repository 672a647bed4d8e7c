"""`PackedBatch`: a batch of packed rows as tensors, in the layout `flash_attn_varlen_func`
takes, with what is derived from it: each token's per-segment value (`token_source`,
`token_weight`), `seq_idx` and `segment_ids`, megatron-core's `packed_seq_params`, and the
keyword arguments of a transformers model.

The collate functions (torch_collate.py) build it from rows, `PackedBatch.from_rows` from
NumPy rows; both go through `build_batch`, `long_tensor` and `segment_tensor` here. Labels are unshifted, and boundaries live in `position_ids` and `cu_seqlens`,
never in `attention_mask` (packcli/load/torch.py says why).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import numpy as np

from packcli.core.errors import PackcliError, needs_extra

with needs_extra("torch", "packcli.load.torch needs PyTorch"):
    import torch

from packcli.plan.rows import Rows, real_token_mask
from packcli.write.columns import SOURCE_COLUMN
from packcli.write.values import WEIGHT_COLUMN

__all__ = ["PackedBatch"]


@dataclass
class PackedBatch:
    """A batch of packed rows. Labels are unshifted (HF convention: the model shifts).

    `cu_seqlens` runs over the batch flattened to `rows * seq_len` tokens (int32, the
    layout `flash_attn_varlen_func` takes for q/k/v of shape [tokens, heads, dim]);
    `max_seqlen` is its longest segment. `row_cu_seqlens` are the per-row boundaries as
    stored on disk. Padding is one last segment of its row, with label -100 and
    `attention_mask` 0; it is a segment in `cu_seqlens` too, so it only attends to itself.
    With `--pad-to-multiple-of`, `cu_seqlens_unpadded` holds the cumulative real lengths
    over the batch (the pads after each segment have `attention_mask` 0 too).
    `segment_columns` (a mixture: `segment_source`) hold one entry per real segment of
    the batch, rows in order (`num_segments` of each row); `token_source` spreads
    `segment_source` over the tokens.
    """

    input_ids: torch.Tensor  # int64 [rows, seq_len]
    labels: torch.Tensor  # int64 [rows, seq_len], unshifted
    position_ids: torch.Tensor  # int64 [rows, seq_len]
    attention_mask: torch.Tensor  # int64 [rows, seq_len]: 1 real, 0 padding (not boundaries)
    cu_seqlens: torch.Tensor  # int32 [segments + 1], over the flattened batch
    max_seqlen: int
    row_cu_seqlens: list[torch.Tensor]  # int32, one per row
    cu_seqlens_unpadded: torch.Tensor | None = None  # int32, cumulative real lengths (--pad-to-multiple-of)
    segment_columns: dict[str, torch.Tensor] = field(default_factory=dict)  # flat, one entry per real segment
    num_segments: torch.Tensor | None = None  # int64 [rows]: real segments per row

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    def to(self, device, non_blocking: bool = False) -> PackedBatch:
        moved = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, torch.Tensor):
                value = value.to(device, non_blocking=non_blocking)
            elif f.name == "row_cu_seqlens":
                value = [t.to(device, non_blocking=non_blocking) for t in value]
            elif f.name == "segment_columns":
                value = {name: t.to(device, non_blocking=non_blocking) for name, t in value.items()}
            moved[f.name] = value
        return PackedBatch(**moved)

    def pin_memory(self) -> PackedBatch:
        """Lets DataLoader(pin_memory=True) pin a PackedBatch."""
        pinned = {f.name: getattr(self, f.name) for f in fields(self)}
        names = ("input_ids", "labels", "position_ids", "attention_mask", "cu_seqlens", "cu_seqlens_unpadded")
        for name in (*names, "num_segments"):
            if pinned[name] is not None:
                pinned[name] = pinned[name].pin_memory()
        pinned["segment_columns"] = {name: t.pin_memory() for name, t in self.segment_columns.items()}
        return PackedBatch(**pinned)

    @property
    def segment_source(self) -> torch.Tensor | None:
        """int64, one entry per real segment of the batch (rows in order): the index of the
        mixture source it came from in the manifest's `sources`; None outside a mixture."""
        return self.segment_columns.get(SOURCE_COLUMN)

    @property
    def token_source(self) -> torch.Tensor:
        """int64 [rows, seq_len]: the source of each token's segment, -1 on every pad (the
        padding segment and the pads of --pad-to-multiple-of). With unshifted labels the
        token predicted at position i is i + 1: its source is `token_source[:, 1:]`."""
        return self.per_token(SOURCE_COLUMN)

    def per_token(self, name: str, fill: float = -1) -> torch.Tensor:
        """A per-segment column spread over the tokens, [rows, seq_len]: each token gets its
        segment's value, every pad `fill`."""
        if name not in self.segment_columns or self.num_segments is None:
            raise PackcliError(
                f"no {name!r} in this batch (per-segment columns: {', '.join(self.segment_columns) or 'none'})"
            )
        values = self.segment_columns[name]
        segment = self.segment_ids.long()
        if not values.numel():
            return torch.full(segment.shape, fill, dtype=values.dtype, device=segment.device)
        counts = self.num_segments.to(segment.device)
        first = torch.cumsum(counts, 0) - counts
        index = (segment + first[:, None]).clamp(0, values.numel() - 1)
        return values.to(segment.device)[index].masked_fill(segment < 0, fill)

    @property
    def token_weight(self) -> torch.Tensor:
        """float32 [rows, seq_len]: each token's segment's `segment_weight` (--weight-field),
        0 on every pad. The token predicted at position i is i + 1: weigh the losses of
        `labels[:, 1:]` by `token_weight[:, 1:]`."""
        return self.per_token(WEIGHT_COLUMN, fill=0.0).float()

    @property
    def seq_idx(self) -> torch.Tensor:
        """int32 [rows, seq_len]: the index of each token's segment in its row, from
        `row_cu_seqlens` (the pads after a segment belong to it; the padding segment is the
        row's last index), as Mamba's kernels and Megatron-Core's `seq_idx` want."""
        rows, seq_len = self.input_ids.shape
        index = torch.empty(rows, seq_len, dtype=torch.int32, device=self.input_ids.device)
        for r, cu in enumerate(self.row_cu_seqlens):
            widths = cu.diff().long().to(index.device)
            index[r] = torch.repeat_interleave(
                torch.arange(len(widths), dtype=torch.int32, device=index.device), widths
            )
        return index

    @property
    def segment_ids(self) -> torch.Tensor:
        """int32 [rows, seq_len]: `seq_idx` on real tokens and -1 on every pad (the padding
        segment and the pads of --pad-to-multiple-of), for document masks (flex attention:
        `segment_ids[b, q] == segment_ids[b, kv]`; LLM Foundry's `sequence_id`)."""
        return self.seq_idx.masked_fill(self.attention_mask == 0, -1)

    def packed_seq_params(self):
        """megatron-core's `PackedSeqParams` for THD attention over the flattened batch:
        `cu_seqlens_q/kv` the real lengths, `cu_seqlens_q/kv_padded` the offsets (the same
        without --pad-to-multiple-of), and `max_seqlen_q/kv`, all computed on the CPU."""
        with needs_extra("megatron", "PackedBatch.packed_seq_params needs megatron-core"):
            from megatron.core.packed_seq_params import PackedSeqParams
        real = self.cu_seqlens if self.cu_seqlens_unpadded is None else self.cu_seqlens_unpadded
        return PackedSeqParams(
            qkv_format="thd",
            cu_seqlens_q=real,
            cu_seqlens_kv=real,
            cu_seqlens_q_padded=self.cu_seqlens,
            cu_seqlens_kv_padded=self.cu_seqlens,
            max_seqlen_q=self.max_seqlen,
            max_seqlen_kv=self.max_seqlen,
        )

    def model_inputs(self) -> dict:
        """Keyword arguments for a transformers causal LM, padding-free.

        No attention_mask: with one, transformers ignores position_ids and attends across
        boundaries. No cache either (`use_cache=False`): with a cache, transformers (v5)
        skips the packed-sequence mask for sdpa/eager, even in training mode. The
        `cu_seq_lens_*`/`max_length_*` arguments make flash-attention run varlen for any
        batch size (from position_ids alone it only does so for one row); other attention
        implementations ignore them and build the mask from position_ids.
        """
        return {
            "use_cache": False,
            "input_ids": self.input_ids,
            "labels": self.labels,
            "position_ids": self.position_ids,
            "cu_seq_lens_q": self.cu_seqlens,
            "cu_seq_lens_k": self.cu_seqlens,
            "max_length_q": self.max_seqlen,
            "max_length_k": self.max_seqlen,
        }

    @staticmethod
    def from_rows(rows: Rows) -> PackedBatch:
        """A batch from NumPy rows (`packcli.pack_sequences(...).rows`, a shard block)."""
        offsets = rows.cu_offsets

        def per_row(values):
            return [
                torch.as_tensor(np.asarray(values[offsets[r] : offsets[r + 1]], dtype=np.int32))
                for r in range(len(rows))
            ]

        unpadded = None if rows.cu_seqlens_unpadded is None else per_row(rows.cu_seqlens_unpadded)
        return build_batch(
            long_tensor(rows.input_ids),
            long_tensor(rows.labels),
            long_tensor(rows.position_ids),
            per_row(rows.cu_seqlens),
            torch.as_tensor(np.asarray(rows.num_segments, dtype=np.int64)),
            unpadded,
            torch.from_numpy(real_token_mask(rows)).long(),
            {name: segment_tensor(values) for name, values in rows.segment_columns.items()},
        )


def build_batch(
    input_ids,
    labels,
    position_ids,
    row_cu: list,
    counts: torch.Tensor,
    row_unpadded: list | None = None,
    attention_mask: torch.Tensor | None = None,
    segments: dict[str, torch.Tensor] | None = None,
):
    """Assemble a PackedBatch from row tensors, offsetting each row's cu_seqlens into one
    flat vector over the batch. `counts`: the real segments of each row; `row_unpadded`: each row's
    cu_seqlens_unpadded, or None; `attention_mask`: given when the rows are NumPy rows
    (`real_token_mask`), else built here row by row from the tensors; `segments`: the
    per-segment columns, flat over the batch."""
    seq_len = input_ids.shape[1]
    pieces = [torch.zeros(1, dtype=torch.int32)]
    for r, cu in enumerate(row_cu):
        pieces.append(cu[1:].to(torch.int32) + r * seq_len)
    flat = torch.cat(pieces)
    max_seqlen = int(flat.diff().max()) if flat.numel() > 1 else 0
    flat_unpadded = None
    if row_unpadded is not None:
        parts, base = [torch.zeros(1, dtype=torch.int64)], 0
        for unpadded in row_unpadded:
            parts.append(unpadded[1:].to(torch.int64) + base)
            base += int(unpadded[-1])
        flat_unpadded = torch.cat(parts).to(torch.int32)
    if attention_mask is None:
        attention_mask = _attention_mask(input_ids, position_ids, row_cu, counts, row_unpadded)
    counts = counts.to(torch.int64)
    return PackedBatch(
        input_ids,
        labels,
        position_ids,
        attention_mask,
        flat,
        max_seqlen,
        list(row_cu),
        flat_unpadded,
        segments or {},
        counts,
    )


def _attention_mask(input_ids, position_ids, row_cu: list, counts: torch.Tensor, row_unpadded: list | None):
    """`real_token_mask`'s rule over collated tensors: a real segment, and a position below its real width."""
    attention_mask = torch.zeros_like(input_ids)
    for r, cu in enumerate(row_cu):
        widths = cu.diff().long()
        segment = torch.repeat_interleave(torch.arange(len(widths)), widths)
        real_width = widths if row_unpadded is None else row_unpadded[r].diff().long()
        attention_mask[r] = ((segment < counts[r]) & (position_ids[r] < real_width[segment])).long()
    return attention_mask


def long_tensor(values) -> torch.Tensor:
    """Token values as an int64 tensor. A tensor is converted as it is; an array or list of
    anything but integers is refused (a float token id there is a caller's mistake)."""
    if isinstance(values, torch.Tensor):
        return values.to(torch.int64)
    array = np.asarray(values)
    if array.dtype.kind not in "iu":
        raise PackcliError(f"expected integer token arrays, got {array.dtype}")
    return torch.from_numpy(array.astype(np.int64))


def segment_tensor(values) -> torch.Tensor:
    """A per-segment column, flat: float32 when its values are floats (weights), else int64."""
    if isinstance(values, torch.Tensor):
        return values.to(torch.float32 if values.is_floating_point() else torch.int64).reshape(-1)
    array = np.asarray(values).reshape(-1)
    return torch.from_numpy(array.astype(np.float32 if array.dtype.kind == "f" else np.int64))
