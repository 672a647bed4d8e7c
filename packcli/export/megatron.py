"""Export packed output as the `.bin`/`.idx` pair Megatron-LM's `IndexedDataset` reads.

Megatron packs its own samples: its GPT dataset shuffles *documents*, joins them and
cuts samples of `seq_length + 1` tokens. So what it needs from us is the documents,
not our rows. One Megatron sequence is one document, and a document is:

- `bin` mode: one real segment. Pieces of a split overlong sequence are separate
  documents (the rows do not record which pieces belong together).
- `concat` mode: a document rebuilt from its segments. Inside a row every segment
  boundary is a document boundary; across a row boundary the segments are joined when
  the rows are in stream order (no `--shuffle`) and the earlier row is full and does not
  end with EOS (or, with `--no-eos` and BOS on, the next row does not start with BOS).
  Without EOS or BOS, or with shuffled rows, boundaries cannot be told apart and every
  segment is a document (the export says so).

Padding is left out and labels are not exported: Megatron's GPT datasets learn every
token (an SFT output loses its prompt masks; the export says so).

The `.idx` layout (little endian): magic `MMIDIDX\\0\\0`, u64 version 1, u8 dtype code,
u64 sequence count, u64 document-index count (documents + 1), then int32 sequence
lengths, int64 byte offsets of the sequences in `.bin`, int64 document index
`[0, 1, ..., n]`.
"""

from __future__ import annotations

import os
import shutil
import struct
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from packcli.core.errors import PackcliError
from packcli.export.base import Progress, dropped_columns, fetching_source, read_source, refuse_pairs
from packcli.export.tokens import Chunk, TokenBlock, token_blocks
from packcli.write.manifest import Manifest

INDEX_MAGIC = b"MMIDIDX\x00\x00"
INDEX_VERSION = 1
DTYPE_CODES: dict[np.dtype, int] = {
    np.dtype(np.uint8): 1,
    np.dtype(np.int8): 2,
    np.dtype(np.int16): 3,
    np.dtype(np.int32): 4,
    np.dtype(np.int64): 5,
    np.dtype(np.float64): 6,
    np.dtype(np.float32): 7,
    np.dtype(np.uint16): 8,
}
INDEX_STEP = 1 << 20  # document-index entries written at a time
DTYPES: dict[str, np.dtype] = {"uint16": np.dtype(np.uint16), "int32": np.dtype(np.int32)}


def megatron_dtype(vocab_size: int | None) -> np.dtype:
    """Megatron's own choice (`DType.optimal_dtype`): uint16 below 65,500 tokens, else int32."""
    return np.dtype(np.uint16) if vocab_size is not None and vocab_size < 65500 else np.dtype(np.int32)


# Why a pair output is refused: documents keep no labels, and Megatron cuts its own samples
PAIRS_LOST = (
    "as Megatron's GPT dataset learns every token of its documents (the rejected completions too) "
    "and joins and cuts documents into its own samples, parting a pair's two sides"
)


@fetching_source
def export_megatron(
    source: Path | str, out: Path | str, *, dtype: str | None = None, progress: Progress | None = None
) -> dict[str, Any]:
    """Write PREFIX.bin and PREFIX.idx for a packed directory; returns a summary.

    Both files are written under temporary names and renamed when complete, `.idx`
    last. `dtype` is "uint16" or "int32" (default: Megatron's rule from the vocabulary
    size, int32 when it is unknown).
    """
    if dtype is not None and dtype not in DTYPES:
        raise PackcliError(f"dtype must be one of {', '.join(DTYPES)}, not {dtype!r}", usage=True)
    out_dir = Path(source)
    manifest = read_source(out_dir)
    refuse_pairs(manifest, "megatron", PAIRS_LOST)
    token_dtype = DTYPES[dtype] if dtype else megatron_dtype(manifest["tokenizer"].get("vocab_size"))
    rule, token, notes = _document_rule(manifest)
    notes += dropped_columns(manifest)

    prefix = Path(out)  # PREFIX: the two files are PREFIX.bin and PREFIX.idx
    if prefix.parent and not prefix.parent.is_dir():
        raise PackcliError(f"{prefix.parent}: no such directory")
    bin_path, idx_path = Path(f"{prefix}.bin"), Path(f"{prefix}.idx")
    bin_tmp, idx_tmp = Path(f"{prefix}.bin.tmp"), Path(f"{prefix}.idx.tmp")
    try:
        with open(bin_tmp, "wb", buffering=0) as data, _IndexWriter(idx_tmp, token_dtype) as index:
            tokens = _write_tokens(data.fileno(), index, out_dir, manifest, rule, token, progress)
            documents = index.finish()
        os.replace(bin_tmp, bin_path)
        os.replace(idx_tmp, idx_path)
    except BaseException:
        for path in (bin_tmp, idx_tmp):
            if path.exists():
                path.unlink()
        raise
    if manifest.get("labels", "text") != "text":
        notes.append("labels are not exported: Megatron learns every token, so prompt masks are lost")
    return {
        "format": "megatron",
        "out": str(prefix),
        "files": 2,
        "bin": str(bin_path),
        "idx": str(idx_path),
        "dtype": token_dtype.name,
        "documents": documents,
        "tokens": int(tokens),
        "real_tokens": int(tokens),
        "rule": rule,
        "notes": notes,
    }


def _write_tokens(
    data: int,
    index: _IndexWriter,
    out_dir: Path,
    manifest: Manifest,
    rule: str,
    token: int | None,
    progress: Progress | None = None,
) -> int:
    """The real tokens of every row into the file `data`, in order, and the documents they
    make into `index`; the tokens written."""
    seq_len = manifest["seq_len"]
    documents = _Documents()
    tokens = 0
    carry = False  # may the previous row's last segment go on in the next row?
    for block in token_blocks(out_dir, manifest, progress=progress):
        edges = _write_block(data, block, index.dtype, rule)
        segments = block.segments
        joins = np.zeros(len(segments.lengths), dtype=bool)
        joins[segments.starts_row], carry = _row_joins(edges, segments.real, seq_len, rule, token, carry)
        index.add(documents.add(segments.lengths, joins))
        tokens += int(segments.real.sum())
    index.add(documents.finish())
    return tokens


def _write_block(data: int, block: TokenBlock, token_dtype: np.dtype, rule: str) -> np.ndarray:
    """A block's real tokens into `data`; the ids its rows start (bos) or end (eos) with."""
    edges = []
    column = 0 if rule == "bos" else -1
    for chunk in block.chunks():
        block.write(data, chunk, _as_token_dtype(block, chunk, token_dtype))
        edges.append(chunk.ids[:, column].copy())
    return np.concatenate(edges) if edges else np.zeros(0, dtype=np.int64)


def _as_token_dtype(block: TokenBlock, chunk: Chunk, token_dtype: np.dtype) -> np.ndarray:
    """The chunk's ids in the `.bin` dtype (little endian), after checking that every real
    one (every one written) fits; the array itself when it already has that dtype."""
    ids = chunk.ids
    target = token_dtype.newbyteorder("<")
    if ids.dtype == target:
        return ids
    max_id = np.iinfo(token_dtype).max
    if np.iinfo(ids.dtype).max > max_id and len(ids) and int(ids.max()) > max_id:
        real_ids = ids[block.real_mask(chunk)]  # padding may not fit; it is not written
        if len(real_ids) and int(real_ids.max()) > max_id:
            raise PackcliError(f"token id {int(real_ids.max())} does not fit {token_dtype.name}: pass dtype int32")
    return ids.astype(target)


def _document_rule(manifest: Manifest) -> tuple[str, int | None, list[str]]:
    """How documents are told apart across rows: segment, eos or bos (see the module doc)."""
    options = manifest.get("options", {})
    if manifest.get("mode") != "concat":
        return "segment", None, []
    if options.get("shuffle"):
        return "segment", None, ["rows are shuffled, so documents cut at row boundaries are exported in pieces"]
    eos_id, bos_id = manifest["tokenizer"].get("eos_id"), manifest["tokenizer"].get("bos_id")
    if options.get("eos", True) and eos_id is not None:
        return "eos", int(eos_id), []
    if options.get("bos") and bos_id is not None:
        return "bos", int(bos_id), []
    return "segment", None, ["without EOS or BOS, documents cut at row boundaries are exported in pieces"]


def _row_joins(edges: np.ndarray, real: np.ndarray, seq_len: int, rule: str, token: int | None, carry: bool):
    """Per row: does its first segment continue the previous row's last one? And the carry
    for the next block (may this block's last row go on?). `edges`: each row's first id
    (bos) or last id (eos)."""
    if rule == "segment" or len(real) == 0:
        return np.zeros(len(real), dtype=bool), False
    full = real == seq_len  # a full row has no padding, so its last token is real
    may_go_on = full & (edges != token) if rule == "eos" else full
    joins = np.concatenate([[carry], may_go_on[:-1]])
    if rule == "bos":
        joins &= edges != token
    return joins, bool(may_go_on[-1])


class _Documents:
    """Segment lengths folded into document lengths as blocks arrive; each call gives the
    documents it completed."""

    def __init__(self):
        self.open = 0  # length of the document still open (0: none)

    def add(self, lengths: np.ndarray, joins: np.ndarray) -> np.ndarray:
        if not len(lengths):
            return lengths
        if self.open == 0:
            joins[0] = False
        starts = np.flatnonzero(~joins)
        if len(starts) == 0:
            self.open += int(lengths.sum())
            return lengths[:0]
        self.open += int(lengths[: starts[0]].sum())
        closed = [self.open] if self.open else []
        sums = np.add.reduceat(lengths, starts)
        self.open = int(sums[-1])
        return np.concatenate([np.array(closed, dtype=np.int64), sums[:-1]])

    def finish(self) -> np.ndarray:
        closed, self.open = [self.open] if self.open else [], 0
        return np.array(closed, dtype=np.int64)


class _IndexWriter:
    """The `.idx` written as documents complete, so memory does not grow with the output:
    the lengths go straight after the header, the pointers to an unnamed side file that is
    appended when the count (which places them) is known, then the document index and the
    header."""

    HEADER_BYTES = len(INDEX_MAGIC) + 8 + 1 + 8 + 8

    def __init__(self, path: Path, dtype: np.dtype):
        self.dtype = dtype
        self.file = open(path, "wb")  # closed by __exit__
        self.file.write(bytes(self.HEADER_BYTES))
        self.pointers = tempfile.TemporaryFile(dir=path.parent)
        self.count = self.end = 0  # documents, and the bytes of .bin they cover

    def __enter__(self) -> _IndexWriter:
        return self

    def __exit__(self, *exc_info) -> None:
        self.pointers.close()
        self.file.close()

    def add(self, lengths: np.ndarray) -> None:
        if not len(lengths):
            return
        if lengths.max() > np.iinfo(np.int32).max:
            raise PackcliError("a document is longer than 2^31 tokens, more than the .idx format holds")
        sizes = lengths * self.dtype.itemsize
        ends = np.cumsum(sizes) + self.end
        self.file.write(lengths.astype("<i4").data)
        self.pointers.write((ends - sizes).astype("<i8").data)
        self.count, self.end = self.count + len(lengths), int(ends[-1])

    def finish(self) -> int:
        """The pointers, document index `[0, 1, ..., n]` and header; the document count."""
        self.pointers.seek(0)
        shutil.copyfileobj(self.pointers, self.file, INDEX_STEP * 8)
        for start in range(0, self.count + 1, INDEX_STEP):
            self.file.write(np.arange(start, min(start + INDEX_STEP, self.count + 1), dtype="<i8").data)
        self.file.seek(0)
        self.file.write(
            INDEX_MAGIC + struct.pack("<QBQQ", INDEX_VERSION, DTYPE_CODES[self.dtype], self.count, self.count + 1)
        )
        return self.count
