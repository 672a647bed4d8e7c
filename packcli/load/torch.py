"""PyTorch data loading for packed rows: a Dataset over a packed directory, collate
functions and a `PackedBatch` ready for `flash_attn_varlen_func`.

    loader = DataLoader(PackedDataset("out/"), batch_size=8, shuffle=True, collate_fn=collate_rows)
    for batch in loader:
        loss = model(**batch.to("cuda").model_inputs()).loss

LABELS ARE NOT SHIFTED. `labels[i]` belongs to `input_ids[i]`, as Hugging Face models
expect (they shift inside the loss). In your own loop, predict `labels[:, 1:]` from
`logits[:, :-1]`. Labels are -100 on the first token of every segment and on padding, so
after the shift nothing is ever predicted across a boundary.

Boundaries live in `position_ids` (restarting at 0 in every segment) and `cu_seqlens`,
never in `attention_mask`, which only marks padding. Requires PyTorch (the `torch`
extra); flash-attn is used when installed and the tensors are on a GPU.

A mixture's rows (`packcli pack --mix`) carry `segment_source`, one entry per real segment;
`batch.token_source` gives each token its source (-1 on padding) for a loss per source.
Preference pairs carry `segment_pair` and `segment_chosen`: `pair_logps` gives each pair's
summed log-probabilities from the model's logits, and `dpo_loss` the DPO loss; weights
(`segment_weight`) spread over the tokens as `batch.token_weight`.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path

import numpy as np

from packcli.core.errors import PackcliError, needs_extra

with needs_extra("torch", "packcli.load.torch needs PyTorch"):
    import torch

from packcli.engine.memory import pack_sequences
from packcli.plan.rows import IGNORE_INDEX, Rows, real_token_mask, segment_offsets
from packcli.write.columns import SEGMENT_OFFSETS_FILE, SOURCE_COLUMN, is_segment_column
from packcli.write.manifest import load_manifest
from packcli.write.shard_reader import read_shard
from packcli.write.values import CHOSEN_COLUMN, PAIR_COLUMN, WEIGHT_COLUMN

NPY_COLUMNS = ("input_ids", "labels", "position_ids", "cu_seqlens", "cu_seqlens_offsets", "num_segments")
OPTIONAL_COLUMNS = ("max_seqlen", "cu_seqlens_unpadded")  # format 3; the second with --pad-to-multiple-of
SEGMENT_OFFSETS = SEGMENT_OFFSETS_FILE[:-4]  # format 5: the per-segment columns' row offsets (CSR)


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
        return _batch(
            _long(rows.input_ids),
            _long(rows.labels),
            _long(rows.position_ids),
            per_row(rows.cu_seqlens),
            torch.as_tensor(np.asarray(rows.num_segments, dtype=np.int64)),
            unpadded,
            torch.from_numpy(real_token_mask(rows)).long(),
            {name: _segment_tensor(values) for name, values in rows.segment_columns.items()},
        )


@dataclass
class PairLogps:
    """The summed log-probabilities of the learned tokens of each preference pair's two
    segments, pair by pair in the batch's order: `chosen` and `rejected` ([pairs]), the
    pairs' indices in the output (`pair`) and their weights (`weight`, None without
    --weight-field)."""

    chosen: torch.Tensor
    rejected: torch.Tensor
    pair: torch.Tensor
    weight: torch.Tensor | None = None


def segment_logps(logits: torch.Tensor, labels: torch.Tensor, segment_ids: torch.Tensor) -> torch.Tensor:
    """The summed log-probability of the learned tokens of every real segment, rows in
    order and each row's segments in order ([segments], float32, differentiable).

    `labels` are unshifted: token i (label not -100) is predicted by `logits[:, i - 1]`.
    `segment_ids` [rows, seq_len] gives each token's segment in its row, -1 on padding
    (`PackedBatch.segment_ids`; for rows flattened by transformers'
    `DataCollatorWithFlattening`, `position_ids.eq(0).cumsum(-1) - 1`)."""
    targets = labels[:, 1:]
    learned = targets != IGNORE_INDEX
    logp = torch.log_softmax(logits[:, :-1].float(), dim=-1)
    picked = logp.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1) * learned
    segment = segment_ids[:, 1:].long()
    counts = (segment_ids.max(dim=1).values + 1).clamp(min=0).long()  # real segments per row
    first = torch.cumsum(counts, 0) - counts
    index = (segment + first[:, None]).masked_fill(segment < 0, 0)
    sums = torch.zeros(int(counts.sum()), dtype=picked.dtype, device=picked.device)
    return sums.index_add(0, index[learned], picked[learned])


def pairs_of(
    logps: torch.Tensor, pair: torch.Tensor, chosen: torch.Tensor, weight: torch.Tensor | None = None
) -> PairLogps:
    """Per-segment values (`segment_logps`) matched into pairs: each chosen segment and the
    rejected one right after it, as packcli places them (`segment_pair`,
    `segment_chosen` and `segment_weight` of the same segments)."""
    pair, chosen = pair.to(logps.device).long(), chosen.to(logps.device).long()
    first = torch.nonzero(chosen == 1).flatten()
    second = first + 1
    if (
        len(first) * 2 != len(chosen)
        or (second >= len(chosen)).any()
        or (pair[second] != pair[first]).any()
        or (chosen[second] != 0).any()
    ):
        raise PackcliError("segment_pair and segment_chosen do not hold whole pairs, chosen then rejected")
    found = None if weight is None else weight.to(logps.device)[first].float()
    return PairLogps(logps[first], logps[second], pair[first], found)


def pair_logps(batch: PackedBatch, logits: torch.Tensor) -> PairLogps:
    """The pairs of a batch of packed preference pairs and the summed log-probabilities of
    their learned tokens, from the model's `logits` [rows, seq_len, vocab] (see
    docs/training.md for the DPO loss in a few lines)."""
    columns = batch.segment_columns
    if PAIR_COLUMN not in columns or CHOSEN_COLUMN not in columns:
        raise PackcliError("this batch has no preference pairs (no segment_pair and segment_chosen columns)")
    logps = segment_logps(logits, batch.labels.to(logits.device), batch.segment_ids.to(logits.device))
    return pairs_of(logps, columns[PAIR_COLUMN], columns[CHOSEN_COLUMN], columns.get(WEIGHT_COLUMN))


def dpo_loss(policy: PairLogps, reference: PairLogps, beta: float = 0.1) -> torch.Tensor:
    """The DPO loss (sigmoid) of a batch's pairs: the mean over pairs of
    -log sigmoid(beta * (chosen margin - rejected margin)), weighted by the pairs' weights
    (sum of weight x loss over sum of weights) when they have one."""
    margin = (policy.chosen - reference.chosen) - (policy.rejected - reference.rejected)
    losses = -torch.nn.functional.logsigmoid(beta * margin)
    if policy.weight is None:
        return losses.mean()
    return (policy.weight * losses).sum() / policy.weight.sum()


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
            stacked[name] = torch.stack([_long(example[name]) for example in examples])
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
            real = int(_long(example["attention_mask"]).sum())
            counts.append(int((cu[1:] <= real).sum()))
        else:
            counts.append(cu.numel() - 1)
        for name, row_values in values.items():
            if len(row_values) < counts[-1]:
                raise PackcliError(f"row {r}: {name} has {len(row_values)} entries for {counts[-1]} segments")
            per_segment[name].append(row_values[: counts[-1]])
    if unpadded and len(unpadded) != len(examples):
        raise PackcliError("some rows have cu_seqlens_unpadded and others not")
    return _batch(
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
    return _segment_tensor(example[name])


def _segment_tensor(values) -> torch.Tensor:
    if isinstance(values, torch.Tensor):
        return values.to(torch.float32 if values.is_floating_point() else torch.int64).reshape(-1)
    array = np.asarray(values).reshape(-1)
    return torch.from_numpy(array.astype(np.float32 if array.dtype.kind == "f" else np.int64))


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


class PackedDataset(torch.utils.data.Dataset):
    """The rows of a `packcli pack` output directory, by index, in order.

    npy shards are memory-mapped: an item is a zero-copy view (input_ids keep their
    on-disk dtype, uint16 or uint32; `collate_rows` widens them to int64 when it
    stacks the batch, the one copy). Parquet shards are compressed, so each is decoded
    into memory when first touched (per DataLoader worker); use `--format npy` for
    corpora larger than memory. Items are dicts of `input_ids`, `labels`,
    `position_ids`, `cu_seqlens` (this row's, int32), `num_segments`, `max_seqlen` (int),
    with --pad-to-multiple-of `cu_seqlens_unpadded`, and in a mixture `segment_source`
    (this row's, int32: one entry per real segment, the index of its source in
    `manifest["sources"]`).

    `cu_seqlens_len=K` gives every row's cu_seqlens (and cu_seqlens_unpadded) exactly K
    entries, so batches have one shape (CUDA graphs, torch.compile): the real entries,
    then -1, as Megatron-Bridge / NeMo pad them, with `cu_seqlens_argmin` (and
    `cu_seqlens_unpadded_argmin`) the number of real entries, so `cu[:argmin]` needs no
    device sync. A row with more than K entries is an error naming it; `collate_rows` strips
    the -1 again. Per-segment columns get K - 1 entries then, padded with -1 the same way
    (`num_segments` says how many are real).
    """

    def __init__(self, path, *, cu_seqlens_len: int | None = None):
        self.path = Path(path)
        self.manifest = load_manifest(self.path)
        self.seq_len = self.manifest["seq_len"]
        self.format = self.manifest["format"]
        self.cu_seqlens_len = cu_seqlens_len
        if cu_seqlens_len is not None and cu_seqlens_len < 2:
            raise PackcliError(f"cu_seqlens_len must be at least 2, not {cu_seqlens_len}")
        self._shards = self.manifest["shards"]
        self._starts = np.concatenate([[0], np.cumsum([s["rows"] for s in self._shards])]).astype(np.int64)
        self._open: dict[int, dict] = {}

    def __len__(self) -> int:
        return int(self._starts[-1])

    def __getitem__(self, index: int) -> dict:
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(f"row {index} out of range for {len(self)} rows")
        shard = bisect.bisect_right(self._starts, index) - 1
        arrays = self._shard(shard)
        r = index - int(self._starts[shard])
        lo, hi = int(arrays["cu_seqlens_offsets"][r]), int(arrays["cu_seqlens_offsets"][r + 1])
        cu = arrays["cu_seqlens"][lo:hi]
        item = {
            "input_ids": torch.from_numpy(arrays["input_ids"][r]),
            "labels": torch.from_numpy(arrays["labels"][r]),
            "position_ids": torch.from_numpy(arrays["position_ids"][r]),
            "num_segments": int(arrays["num_segments"][r]),
            "max_seqlen": int(arrays["max_seqlen"][r]) if "max_seqlen" in arrays else int(np.diff(cu).max()),
        }
        item.update(self._boundaries("cu_seqlens", cu, index))
        if "cu_seqlens_unpadded" in arrays:
            item.update(self._boundaries("cu_seqlens_unpadded", arrays["cu_seqlens_unpadded"][lo:hi], index))
        if SEGMENT_OFFSETS in arrays:
            first, end = int(arrays[SEGMENT_OFFSETS][r]), int(arrays[SEGMENT_OFFSETS][r + 1])
            for name in arrays:
                if is_segment_column(name):
                    item[name] = self._per_segment(arrays[name][first:end])
        return item

    def _per_segment(self, values: np.ndarray) -> torch.Tensor:
        """A row's entries of a per-segment column or, with cu_seqlens_len, those padded with -1 to K - 1."""
        if self.cu_seqlens_len is None:
            return torch.from_numpy(values)
        fixed = np.full(self.cu_seqlens_len - 1, -1, dtype=values.dtype)
        fixed[: len(values)] = values  # a row has fewer real segments than cu_seqlens entries
        return torch.from_numpy(fixed)

    def _boundaries(self, name: str, values: np.ndarray, index: int) -> dict:
        """{name: the row's entries} or, with cu_seqlens_len, padded with -1 and their count."""
        if self.cu_seqlens_len is None:
            return {name: torch.from_numpy(values)}
        if len(values) > self.cu_seqlens_len:
            raise PackcliError(
                f"row {index}: {name} has {len(values)} entries, more than cu_seqlens_len {self.cu_seqlens_len}"
            )
        fixed = np.full(self.cu_seqlens_len, -1, dtype=np.int32)
        fixed[: len(values)] = values
        return {name: torch.from_numpy(fixed), f"{name}_argmin": len(values)}

    def _shard(self, index: int) -> dict:
        if index not in self._open:
            entry = self._shards[index]
            path = self.path / entry["path"]
            if not path.exists():
                raise PackcliError(f"{entry['path']}: listed in the manifest but missing")
            arrays = _npy_shard_private_maps(path) if self.format == "npy" else _decode_parquet(path, self.seq_len)
            if len(arrays["input_ids"]) != entry["rows"] or arrays["input_ids"].shape[1:] != (self.seq_len,):
                raise PackcliError(
                    f"{entry['path']}: holds {arrays['input_ids'].shape}, the manifest says {entry['rows']} rows of {self.seq_len}"
                )
            self._open[index] = arrays
        return self._open[index]

    def __getstate__(self):
        # Workers reopen the shards themselves rather than pickling memory maps.
        state = dict(self.__dict__)
        state["_open"] = {}
        return state


def block_causal_mask(batch: PackedBatch, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Additive [rows, 1, seq_len, seq_len] mask (0 = attend, dtype min = blocked): causal
    inside every segment, nothing across. For eager/sdpa attention where neither
    flash-attention nor transformers' own packed-sequence detection applies."""
    rows, seq_len = batch.input_ids.shape
    segment = torch.zeros(rows, seq_len, dtype=torch.int64, device=batch.input_ids.device)
    for r, cu in enumerate(batch.row_cu_seqlens):
        segment[r] = torch.repeat_interleave(torch.arange(cu.numel() - 1, device=segment.device), cu.diff().long())
    same = segment[:, :, None] == segment[:, None, :]
    causal = torch.ones(seq_len, seq_len, dtype=torch.bool, device=segment.device).tril()
    allowed = same & causal
    mask = torch.zeros(rows, 1, seq_len, seq_len, dtype=dtype, device=segment.device)
    return mask.masked_fill(~allowed[:, None], torch.finfo(dtype).min)


def varlen_attention(
    q, k, v, cu_seqlens, max_seqlen: int, *, causal: bool = True, softmax_scale=None, backend: str = "auto"
):
    """Attention over packed tokens: q [tokens, heads, dim], k/v [tokens, kv_heads, dim].

    `backend="auto"` calls `flash_attn.flash_attn_varlen_func` when flash-attn is
    installed and q is on a GPU, else a plain PyTorch path (SDPA per segment: slow,
    for CPU and checking); "flash" and "torch" force one of them.
    """
    if backend not in ("auto", "flash", "torch"):
        raise PackcliError(f"backend must be auto, flash or torch, not {backend!r}")
    flash = _flash_varlen() if backend != "torch" else None
    if backend == "flash" and flash is None:
        raise PackcliError("backend='flash' needs flash-attn: pip install flash-attn")
    if flash is not None and (backend == "flash" or q.is_cuda):
        return flash(
            q,
            k,
            v,
            cu_seqlens_q=cu_seqlens,
            cu_seqlens_k=cu_seqlens,
            max_seqlen_q=max_seqlen,
            max_seqlen_k=max_seqlen,
            dropout_p=0.0,
            softmax_scale=softmax_scale,
            causal=causal,
        )
    if k.shape[1] != q.shape[1]:  # grouped-query attention
        k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
        v = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1)
    out = torch.empty_like(q)
    bounds = cu_seqlens.tolist()
    for s, e in zip(bounds[:-1], bounds[1:]):
        qs, ks, vs = (x[s:e].transpose(0, 1) for x in (q, k, v))
        attended = torch.nn.functional.scaled_dot_product_attention(qs, ks, vs, is_causal=causal, scale=softmax_scale)
        out[s:e] = attended.transpose(0, 1)
    return out


def _flash_varlen():
    try:  # lazy: flash-attn is optional, used when installed
        from flash_attn import flash_attn_varlen_func
    except ImportError:
        return None
    return flash_attn_varlen_func


def _batch(
    input_ids,
    labels,
    position_ids,
    row_cu: list,
    counts: torch.Tensor,
    row_unpadded: list | None = None,
    attention_mask: torch.Tensor | None = None,
    segments: dict[str, torch.Tensor] | None = None,
):
    """A PackedBatch; `counts`: the real segments of each row; `row_unpadded`: each row's
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


def _long(values) -> torch.Tensor:
    if isinstance(values, torch.Tensor):
        return values.to(torch.int64)
    array = np.asarray(values)
    if array.dtype.kind not in "iu":
        raise PackcliError(f"expected integer token arrays, got {array.dtype}")
    return torch.from_numpy(array.astype(np.int64))


def _as_list(values) -> list:
    if isinstance(values, torch.Tensor):
        return values.tolist()
    return np.asarray(values).reshape(-1).tolist()


def _npy_shard_private_maps(path: Path) -> dict:
    """Copy-on-write memory maps: torch wants writable arrays, and writes stay private."""
    missing = [name for name in NPY_COLUMNS if not (path / f"{name}.npy").is_file()]
    if missing:
        raise PackcliError(f"{path.name}: missing file(s) {', '.join(missing)}")
    names = [*NPY_COLUMNS, *(name for name in OPTIONAL_COLUMNS if (path / f"{name}.npy").is_file())]
    segments = sorted(p.name[:-4] for p in path.glob("*.npy") if is_segment_column(p.name[:-4]))
    if segments:  # format 5: per-segment columns and their row offsets
        names += [*segments, SEGMENT_OFFSETS]
    try:
        return {name: np.load(path / f"{name}.npy", mmap_mode="c") for name in names}
    except Exception as exc:
        raise PackcliError(
            f"{path.name}: cannot read shard ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})"
        ) from exc


def _decode_parquet(path: Path, seq_len: int) -> dict:
    blocks = list(read_shard(path, "parquet", seq_len))
    rows = Rows.concat(blocks) if blocks else None
    if rows is None:
        empty = np.zeros((0, seq_len), dtype=np.int32)
        return {
            "input_ids": empty,
            "labels": empty,
            "position_ids": empty,
            "cu_seqlens": np.zeros(0, np.int32),
            "cu_seqlens_offsets": np.zeros(1, np.int64),
            "num_segments": np.zeros(0, np.int32),
        }

    # Writable copies only where needed: torch refuses to share read-only (Arrow) memory.
    def own(a):
        return np.require(a, requirements=["C", "W"])

    return {
        "input_ids": own(rows.input_ids),
        "labels": own(rows.labels),
        "position_ids": own(rows.position_ids),
        "cu_seqlens": own(rows.cu_seqlens),
        "cu_seqlens_offsets": rows.cu_offsets,
        "num_segments": rows.num_segments,
        "max_seqlen": rows.max_seqlen,
        **({} if rows.cu_seqlens_unpadded is None else {"cu_seqlens_unpadded": own(rows.cu_seqlens_unpadded)}),
        **({SEGMENT_OFFSETS: segment_offsets(rows.num_segments)} if rows.segment_columns else {}),
        **{name: own(values) for name, values in rows.segment_columns.items()},
    }


__all__ = [
    "PackedBatch",
    "PackedDataset",
    "PackingCollator",
    "PairLogps",
    "block_causal_mask",
    "collate_rows",
    "dpo_loss",
    "pair_logps",
    "pairs_of",
    "segment_logps",
    "varlen_attention",
]
