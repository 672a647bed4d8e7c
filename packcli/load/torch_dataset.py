"""`PackedDataset`: the rows of a packed output directory by index, for a PyTorch
DataLoader. npy shards are memory-mapped (an item is a view of the map); Parquet shards are
decoded into memory when first touched.
"""

from __future__ import annotations

import bisect
from pathlib import Path

import numpy as np

from packcli.core.errors import PackcliError, needs_extra

with needs_extra("torch", "packcli.load.torch needs PyTorch"):
    import torch

from packcli.plan.rows import Rows, segment_offsets
from packcli.write.columns import NPY_FILES, OPTIONAL_NPY_FILES, SEGMENT_OFFSETS_FILE, is_segment_column
from packcli.write.manifest import load_manifest
from packcli.write.shard_reader import read_shard

NPY_COLUMNS = tuple(name[:-4] for name in NPY_FILES)  # the files' stems: the items' keys
OPTIONAL_COLUMNS = tuple(name[:-4] for name in OPTIONAL_NPY_FILES)  # format 3; the second with --pad-to-multiple-of
SEGMENT_OFFSETS = SEGMENT_OFFSETS_FILE[:-4]  # format 5: the per-segment columns' row offsets (CSR)

__all__ = ["PackedDataset"]


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
