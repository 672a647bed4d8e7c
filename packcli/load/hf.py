"""Packed rows as Hugging Face `datasets.Dataset`s, for `Trainer` and TRL in padding-free mode.

    ds = packcli.load.hf.pack_dataset(tokenized["input_ids"], seq_len=2048, eos_id=tok.eos_token_id)
    ds = packcli.load.hf.load("out/")                       # what `packcli pack` wrote
    Trainer(model, args, train_dataset=ds, data_collator=packcli.load.hf.collator)

Every row holds `input_ids`, `labels` and `position_ids` of exactly `seq_len` tokens.
Labels are NOT shifted (the model shifts them) and are -100 on the first token of every
segment and on padding. Sequence boundaries are carried by `position_ids`, which
restart at 0 in every segment: transformers builds a block-diagonal causal mask from
them (sdpa, eager, flex) or derives `cu_seqlens` for flash-attention.

Do not feed an `attention_mask` to the model with packed rows: when one is given,
transformers stops looking at `position_ids` and every token attends across the
boundaries of its row. That is why the column is opt-in (`attention_mask=True`, 1 for
real tokens, 0 for padding: it marks padding, never boundaries) and `collator` leaves
it out. `collator` also passes `use_cache=False`: with a cache, transformers skips the
packed mask (sdpa/eager), even in training mode. See docs/training.md.

A mixture's rows (`packcli pack --mix`) keep their `segment_source` column: one entry per
real segment, the index of its source in the manifest's `sources`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa

from packcli.core.arrow import arrow_array, int32_array
from packcli.core.errors import PackcliError, needs_extra
from packcli.engine.memory import pack_sequences
from packcli.plan.rows import Rows, real_token_mask
from packcli.write.columns import is_segment_column, segment_dtype
from packcli.write.manifest import load_manifest
from packcli.write.shard_reader import iter_output_rows

TRAIN_COLUMNS = ("input_ids", "labels", "position_ids")
EXTRA_COLUMNS = ("cu_seqlens", "num_segments")
BOUNDARY_COLUMNS = ("max_seqlen", "cu_seqlens_unpadded")
# Arrow list offsets are int32: keep each chunk of a table under 2^31 values.
CHUNK_TOKENS = 1 << 30


def pack_dataset(
    token_ids,
    seq_len: int,
    *,
    labels: Sequence[Sequence[int]] | None = None,
    eos_id: int | None = None,
    pad_id: int = 0,
    attention_mask: bool = False,
    cu_seqlens: bool = False,
    column: str = "input_ids",
    **pack_options,
):
    """Pack tokenized sequences into a `datasets.Dataset` of rows of exactly `seq_len`.

    `token_ids`: a list of token lists, or a tokenizer's output / a `datasets.Dataset`
    with an `input_ids` column (`column` names another); a `labels` column there is used
    when `labels` is not given. `eos_id`, if given, is appended to every sequence
    (tokenizers rarely add EOS themselves), and is learned. `cu_seqlens=True` adds the
    `cu_seqlens`, `num_segments` and `max_seqlen` columns of the on-disk format (and
    `cu_seqlens_unpadded` with `pad_to_multiple_of`). Other options
    (`algorithm`, `mode`, `overlong`, `remainder`, `buffer_size`, `shuffle`, `seed`,
    `pad_to_multiple_of`, `keep_unlearned`, `truncation_side`)
    are those of `packcli.pack_sequences`; the result holds the same rows.
    """
    sequences, found_labels = _columns(token_ids, column)
    if labels is None:
        labels = found_labels
    if eos_id is not None:
        sequences = [[*s, eos_id] for s in sequences]
        if labels is not None:
            labels = [[*label, eos_id] for label in labels]
    packed = pack_sequences(sequences, seq_len, labels=labels, pad_id=pad_id, **pack_options)
    return rows_to_dataset(packed.rows, attention_mask=attention_mask, cu_seqlens=cu_seqlens)


def load(path, *, attention_mask: bool = False, cu_seqlens: bool = False, cache_dir: str | None = None):
    """The rows of a `packcli pack` output directory as a `datasets.Dataset`, in order.
    Per-segment columns (`segment_source` in a mixture) are kept, a list per row.

    Parquet shards go through `datasets.load_dataset("parquet")` (Arrow cache files,
    memory-mapped, in `cache_dir`). npy shards are wrapped in memory: labels and
    position_ids are zero-copy views of the memory maps, but uint16 input_ids are widened
    to int32, a copy of 4 bytes per token; for outputs larger than memory use
    `packcli.load.torch.PackedDataset` or `--format parquet`.
    """
    path = Path(path)
    manifest = load_manifest(path)
    keep = [*TRAIN_COLUMNS, *(EXTRA_COLUMNS if cu_seqlens else ())]
    if cu_seqlens:  # format 3: max_seqlen, and cu_seqlens_unpadded with --pad-to-multiple-of
        keep += [name for name in BOUNDARY_COLUMNS if name in manifest.get("columns", {})]
    if manifest["format"] == "parquet":
        # lazy: datasets is an optional extra (npy output loads without it)
        with needs_extra("hf", "packcli.load.hf needs datasets"):
            import datasets

        files = []
        for shard in manifest["shards"]:
            file = path / shard["path"]
            if not file.exists():
                raise PackcliError(f"{shard['path']}: listed in the manifest but missing")
            files.append(str(file))
        if not files:
            return rows_to_dataset(_no_rows(manifest["seq_len"]), attention_mask=attention_mask, cu_seqlens=cu_seqlens)
        dataset = datasets.load_dataset("parquet", data_files=files, split="train", cache_dir=cache_dir)
        if attention_mask:
            seq_len = manifest["seq_len"]
            dataset = dataset.map(
                lambda batch: {"attention_mask": _real_mask_from_columns(batch, seq_len).tolist()},
                batched=True,
                desc="attention_mask",
            )
            keep.append("attention_mask")
        keep += [name for name in dataset.column_names if is_segment_column(name)]
        return dataset.select_columns(keep)
    blocks = [rows for _, rows in iter_output_rows(path, manifest)]
    rows = Rows.concat(blocks) if blocks else _no_rows(manifest["seq_len"])
    return rows_to_dataset(rows, attention_mask=attention_mask, cu_seqlens=cu_seqlens)


def rows_to_dataset(rows: Rows, *, attention_mask: bool = False, cu_seqlens: bool = False):
    """A `datasets.Dataset` over packed rows (int32 list columns, as the Parquet shards),
    with their per-segment columns, a list per row."""
    with needs_extra("hf", "packcli.load.hf needs datasets"):  # lazy: datasets is an optional extra
        import datasets
        from datasets.table import InMemoryTable

    seq_len = rows.seq_len
    columns = {name: getattr(rows, name) for name in TRAIN_COLUMNS}
    if attention_mask:
        columns["attention_mask"] = _real_mask(rows).astype(np.int32)
    chunk = max(1, CHUNK_TOKENS // max(seq_len, 1))
    tables = []
    for start in range(0, max(len(rows), 1), chunk):
        part = rows.slice(start, min(start + chunk, len(rows)))
        n = len(part)
        fixed_offsets = int32_array(np.arange(0, (n + 1) * seq_len, seq_len, dtype=np.int32))
        arrays = {
            name: pa.ListArray.from_arrays(fixed_offsets, int32_array(values[start : start + n].reshape(-1)))
            for name, values in columns.items()
        }
        if cu_seqlens:
            arrays["cu_seqlens"] = pa.ListArray.from_arrays(int32_array(part.cu_offsets), int32_array(part.cu_seqlens))
            arrays["num_segments"] = int32_array(part.num_segments)
            assert part.max_seqlen is not None  # Rows fills it
            arrays["max_seqlen"] = int32_array(part.max_seqlen)
            if part.cu_seqlens_unpadded is not None:
                unpadded = int32_array(part.cu_seqlens_unpadded)
                arrays["cu_seqlens_unpadded"] = pa.ListArray.from_arrays(int32_array(part.cu_offsets), unpadded)
        for name, values in part.segment_columns.items():
            dtype = segment_dtype(values)
            arrays[name] = pa.ListArray.from_arrays(int32_array(part.seg_offsets), arrow_array(values, dtype))
        tables.append(pa.table(arrays))
    return datasets.Dataset(InMemoryTable(pa.concat_tables(tables)))


def collator(examples: list[Mapping]) -> dict:
    """`data_collator` for `Trainer`/`SFTTrainer` over packed rows: the model inputs of
    `packcli.load.torch.collate_rows` (input_ids, labels, position_ids and the
    flash-attention varlen arguments), without attention_mask."""
    from packcli.load.torch import collate_rows  # lazy: torch is optional, and only the collator needs it

    return collate_rows(examples).model_inputs()


def _columns(token_ids, column: str):
    """(sequences, labels or None) from lists, a tokenizer's output or a Dataset."""
    names = getattr(token_ids, "column_names", None)
    if isinstance(token_ids, Mapping) or names is not None:
        keys = names if names is not None else list(token_ids.keys())
        if column not in keys:
            raise PackcliError(f"no {column!r} column to pack (columns: {', '.join(map(str, keys))})")
        labels = token_ids["labels"] if "labels" in keys else None
        return token_ids[column], labels
    if isinstance(token_ids, (str, bytes)):
        raise PackcliError("token_ids must be token id lists, not text: tokenize first")
    return token_ids, None


def _real_mask(rows: Rows) -> np.ndarray:
    """1 for real tokens, 0 for padding (the row's tail, and the pads of --pad-to-multiple-of)."""
    return real_token_mask(rows).astype(np.int32)


def _real_mask_from_columns(batch: Mapping, seq_len: int) -> np.ndarray:
    n = len(batch["cu_seqlens"])
    cu = [np.asarray(c, dtype=np.int32) for c in batch["cu_seqlens"]]
    offsets = np.concatenate([[0], np.cumsum([len(c) for c in cu])]).astype(np.int64)
    unpadded = batch.get("cu_seqlens_unpadded")
    rows = Rows(
        np.zeros((n, seq_len), dtype=np.int32),
        np.zeros((n, seq_len), dtype=np.int32),
        np.asarray(batch["position_ids"], dtype=np.int32).reshape(n, seq_len),
        np.concatenate(cu) if n else np.zeros(0, np.int32),
        offsets,
        np.asarray(batch["num_segments"], dtype=np.int32),
        None,
        np.concatenate([np.asarray(u, dtype=np.int32) for u in unpadded]) if unpadded is not None and n else None,
    )
    return _real_mask(rows)


def _no_rows(seq_len: int) -> Rows:
    empty = np.zeros((0, seq_len), dtype=np.int32)
    return Rows(empty, empty.copy(), empty.copy(), np.zeros(0, np.int32), np.zeros(1, np.int64), np.zeros(0, np.int32))
