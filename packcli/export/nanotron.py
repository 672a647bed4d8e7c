"""`packcli export nanotron`: datatrove's tokenized `.ds` files, as nanotron reads them.

The format is a flat token stream: `NAME.ds` holds the tokens (little-endian uint16, or
uint32 when the vocabulary has more than 65,536 ids, as datatrove chooses), `NAME.ds.index`
the cumulative end of every document (uint64), and `NAME.ds.loss` one byte per token, 1
where the token is learned. It has no rows: only real tokens are written (no padding), one
document per real segment, rows in order, one `.ds` file per packed shard. The reader cuts
its own windows of `seq_len + 1` tokens; positions come from the index.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from packcli.export.base import (
    ExportDir,
    Progress,
    dropped_columns,
    fetching_source,
    read_source,
    refuse_pairs,
    token_dtype,
)
from packcli.export.tokens import TokenBlock, token_blocks
from packcli.plan.rows import IGNORE_INDEX


class _TokenFile:
    """One `.ds` file with its index (and loss mask), appended block by block."""

    def __init__(self, path: Path, with_loss: bool):
        self.tokens: BinaryIO = open(path, "wb", buffering=0)
        self.index: BinaryIO = open(f"{path}.index", "wb")
        self.loss: BinaryIO | None = open(f"{path}.loss", "wb", buffering=0) if with_loss else None
        self.written = 0

    def add(self, block: TokenBlock, dtype: np.dtype) -> tuple[int, int]:
        """Write a block's real tokens; (documents, tokens) written."""
        target = dtype.newbyteorder("<")
        for chunk in block.chunks():
            block.write(self.tokens.fileno(), chunk, chunk.ids.astype(target, copy=False))
            if self.loss is not None:
                assert chunk.labels is not None  # asked for with the loss mask
                learned = (chunk.labels != IGNORE_INDEX).view(np.uint8)
                block.write(self.loss.fileno(), chunk, learned)
        lengths = block.segments.lengths
        ends = np.cumsum(lengths, dtype=np.int64) + self.written
        self.index.write(ends.astype("<u8").data)
        tokens = int(block.segments.real.sum())
        self.written += tokens
        return len(lengths), tokens

    def close(self) -> None:
        for f in (self.tokens, self.index, self.loss):
            if f is not None:
                f.close()


@fetching_source
def export_nanotron(
    source: Path | str, out: Path | str, *, overwrite: bool = False, progress: Progress | None = None
) -> dict[str, Any]:
    """Write OUT/shard-NNNNN.ds (+ .index, + .loss for masked labels); returns a summary."""
    manifest = read_source(source)
    refuse_pairs(
        manifest,
        "nanotron",
        "as the format has no rows: its reader cuts the token stream into windows of its own length, "
        "across documents, so a pair's two sides would be parted and read as one text",
    )
    dtype = token_dtype(manifest)
    with_loss = manifest.get("labels", "text") != "text"
    documents = tokens = 0
    shards: list[int] = []
    current: _TokenFile | None = None
    with ExportDir(out, overwrite, last=lambda name: int(name.endswith(".ds"))) as tmp:
        try:
            for block in token_blocks(source, manifest, labels=with_loss, progress=progress):
                if current is None or block.shard != shards[-1]:
                    if current is not None:
                        current.close()
                    current = _TokenFile(tmp / f"shard-{block.shard:05d}.ds", with_loss)
                    shards.append(block.shard)
                added_documents, added_tokens = current.add(block, dtype)
                documents += added_documents
                tokens += added_tokens
        finally:
            if current is not None:
                current.close()
    return {
        "format": "nanotron",
        "out": str(out),
        "files": len(shards),
        "token_size": dtype.itemsize,
        "documents": documents,
        "real_tokens": tokens,
        "notes": dropped_columns(manifest),
    }
