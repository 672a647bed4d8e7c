"""The copy limit of an `ids` Parquet corpus: pyarrow reads the column, every id goes to one
.npy. What `pack --ids-field` of the same file is measured against.

    python copy_ids.py CORPUS.parquet OUT.npy

`copy_s` is the time from the read to the last write, imports excluded.
"""

from __future__ import annotations

import sys
import time

import _common


def main() -> None:
    import numpy as np
    import pyarrow.parquet as pq

    corpus, out = sys.argv[1], sys.argv[2]
    started = time.perf_counter()
    column = pq.read_table(corpus, columns=["ids"]).column("ids")
    read = time.perf_counter()
    total = sum(len(chunk.flatten()) for chunk in column.chunks)
    with open(out, "wb") as f:
        np.lib.format.write_array_header_2_0(f, {"descr": "<i4", "fortran_order": False, "shape": (total,)})
        for chunk in column.chunks:
            f.write(chunk.flatten().to_numpy(zero_copy_only=False).data)
    done = time.perf_counter()
    _common.emit({"tokens": total, "read_s": read - started, "copy_s": done - started})


if __name__ == "__main__":
    main()
