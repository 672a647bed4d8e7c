"""`packcli export mds`: MosaicML Streaming (MDS) shards, one sample per packed row.

Written with streaming's own `MDSWriter`, so `StreamingDataset(local=OUT)` (LLM Foundry,
Composer) reads them as they are. Columns: `input_ids` (the npy format's dtype: uint16 or
uint32), `labels`, `position_ids` (int32, all `[seq_len]`), `cu_seqlens` (int32, one
entry per segment boundary) and `num_segments` (int).
"""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path
from typing import Any

from packcli.errors import PackcliError, needs_extra
from packcli.export import ExportDir, Progress, blocks, read_source, token_dtype

COMPRESSIONS = ("zstd", "br", "gz", "snappy", "bz2")


def streaming_base() -> types.ModuleType:
    """`streaming.base`, where MDSWriter and StreamingDataset live.

    The package's `__init__` also imports `streaming.vision`, which needs torchvision;
    where torchvision is missing, or built for another torch (it then fails with
    "operator torchvision::nms does not exist"), the import fails although nothing here
    uses vision. Then the package is entered without its `__init__`: a bare module with
    the package's path, from which `streaming.base` imports as usual.
    """
    with needs_extra("mds", "packcli export mds needs mosaicml-streaming"):
        try:
            import streaming.base

            return streaming.base
        except (ImportError, RuntimeError) as exc:
            if _failed_on_vision(exc):
                for name in [name for name in sys.modules if name == "streaming" or name.startswith("streaming.")]:
                    del sys.modules[name]
                spec = importlib.util.find_spec("streaming")
                package = types.ModuleType("streaming")
                package.__path__ = list(spec.submodule_search_locations or []) if spec else []
                package.__spec__ = spec
                sys.modules["streaming"] = package
                from streaming import base

                return base
            raise


def _failed_on_vision(exc: BaseException) -> bool:
    if isinstance(exc, ImportError):
        return (exc.name or "").startswith("torchvision")
    return "torchvision" in str(exc)


def export_mds(
    source: Path | str,
    out: Path | str,
    *,
    compression: str | None = None,
    overwrite: bool = False,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Write OUT/index.json and its MDS shards; returns a summary."""
    if compression is not None and compression not in COMPRESSIONS:
        raise PackcliError(f"compression must be one of {', '.join(COMPRESSIONS)}, not {compression!r}", usage=True)
    manifest = read_source(source)
    writer_class = streaming_base().MDSWriter
    seq_len = manifest["seq_len"]
    ids = token_dtype(manifest)
    columns = {
        "input_ids": f"ndarray:{ids.name}:{seq_len}",
        "labels": f"ndarray:int32:{seq_len}",
        "position_ids": f"ndarray:int32:{seq_len}",
        "cu_seqlens": "ndarray:int32",
        "num_segments": "int",
    }
    rows = tokens = 0
    with ExportDir(out, overwrite) as tmp:
        with writer_class(out=str(tmp), columns=columns, compression=compression, progress_bar=False) as writer:
            for block in blocks(source, manifest, progress):
                packed = block.rows
                input_ids = packed.input_ids.astype(ids, copy=False)
                offsets = packed.cu_offsets.tolist()
                counts = packed.num_segments.tolist()
                for i in range(len(packed)):
                    writer.write(
                        {
                            "input_ids": input_ids[i],
                            "labels": packed.labels[i],
                            "position_ids": packed.position_ids[i],
                            "cu_seqlens": packed.cu_seqlens[offsets[i] : offsets[i + 1]],
                            "num_segments": counts[i],
                        }
                    )
                rows += len(packed)
                tokens += int(block.real.sum())
        shards = len(list(tmp.glob("shard.*.mds*")))
    return {"format": "mds", "out": str(out), "rows": rows, "real_tokens": tokens, "files": shards, "notes": []}
