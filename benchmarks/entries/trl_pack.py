"""TRL's pack_dataset(strategy="bfd") on a seeded set of lengths: the baseline of the kernels.

    python trl_pack.py --n 100000 --capacity 2048

The lengths are those of kernels.py for the same --set, --n, --capacity and --seed. TRL
packs each map batch alone (1,000 sequences by default); `whole_rows` passes the whole set
as one batch. Figures: `trl_s` and `trl_rows` (as users call it), `trl_whole_s` and
`trl_whole_rows`. Needs TRL and datasets (the `bench` extra).
"""

from __future__ import annotations

import argparse
import time

import _common
import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser()
    _common.length_set_options(parser)
    args = parser.parse_args()
    try:
        import pyarrow as pa
        from datasets import Dataset
        from datasets.utils.logging import disable_progress_bar
        from trl import pack_dataset
    except Exception as error:
        _common.not_applicable(f"TRL does not import: {type(error).__name__}: {error}".splitlines()[0])
    disable_progress_bar()
    lengths = _common.lengths(args.set, args.n, args.capacity, args.seed)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    # one byte per token keeps the table small; TRL looks only at the lists' lengths
    tokens = pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(np.zeros(offsets[-1], dtype=np.uint8)))
    dataset = Dataset(pa.table({"input_ids": tokens}))
    figures = {}
    for name, kwargs in (("trl", {}), ("trl_whole", {"batch_size": len(lengths)})):
        started = time.process_time()
        packed = pack_dataset(dataset, args.capacity, strategy="bfd", map_kwargs=kwargs)
        figures[f"{name}_s"] = time.process_time() - started
        figures[f"{name}_rows"] = len(packed)
    _common.emit(figures)


if __name__ == "__main__":
    main()
