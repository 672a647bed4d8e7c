"""The baselines of `verify`: hashing every shard file, or reading every one into memory.

    python files.py OUT --mode sha256|read

OUT is a packed output. `seconds` is the time over every shard file, imports excluded:
sha256 in one thread (verify must hash them all anyway), or `np.load` / pyarrow's
`read_table` of each. `bytes` is their size.
"""

from __future__ import annotations

import argparse
import hashlib
import time
from pathlib import Path

import _common


def shard_files(out: Path) -> list[Path]:
    files = []
    for shard in sorted(out.glob("shard-*")):
        files += sorted(shard.iterdir()) if shard.is_dir() else [shard]
    return files


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--mode", choices=("sha256", "read"), default="sha256")
    args = parser.parse_args()
    import numpy as np
    import pyarrow.parquet as pq

    files = shard_files(args.out)
    started = time.perf_counter()
    for file in files:
        if args.mode == "sha256":
            digest = hashlib.sha256()
            with open(file, "rb") as f:
                while chunk := f.read(1 << 22):
                    digest.update(chunk)
        elif file.suffix == ".npy":
            np.load(file)
        else:
            pq.read_table(file)
    _common.emit({"seconds": time.perf_counter() - started, "bytes": sum(f.stat().st_size for f in files)})


if __name__ == "__main__":
    main()
