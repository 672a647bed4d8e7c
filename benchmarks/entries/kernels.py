"""The packing kernels on one set of lengths: CPU seconds of each algorithm, with np.sort of
the same lengths as the reference of the same process, and the rows against the bounds.

    python kernels.py --set lognormal --n 1000000 --capacity 2048 [--rounds 3] [--lengths FILE.npy]
        [--windows 1000,10000]

Figures: `sort_s`; per algorithm `ALG_s` (the least CPU time of --rounds calls of
pack_lengths, validation included, after a warm-up call), `ALG_x_sort` (sort time over
it), `ALG_m_per_s` (millions of sequences a CPU second), `ALG_rows` and `ALG_gap_lb_pct` (rows over ceil(total / capacity), in percent);
`lb_rows`, `l2_rows` (Martello-Toth L2). With --windows: `ALG_wK_extra_rows`, the rows
that packing every K consecutive sequences alone adds (`pack --buffer-size K`).
"""

from __future__ import annotations

import argparse

import _common
import numpy as np

WINDOWED = ("bfd", "spfhp", "lpfhp")


def main() -> None:
    parser = argparse.ArgumentParser()
    _common.length_set_options(parser)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--lengths", help="a .npy of real lengths instead of a synthetic set")
    parser.add_argument("--windows", default="")
    args = parser.parse_args()
    pack_lengths = _common.find("pack_lengths", *_common.KERNELS)
    algorithms = _common.find("ALGORITHMS", *_common.KERNELS)
    lower_bound_rows = _common.find("lower_bound_rows", *_common.KERNELS)
    martello_toth_l2 = _common.find("martello_toth_l2", *_common.KERNELS)
    capacity = args.capacity
    if args.lengths:
        lengths = np.clip(np.load(args.lengths).astype(np.int64), 1, capacity)
    else:
        lengths = _common.lengths(args.set, args.n, capacity, args.seed)
    warm = _common.lengths("lognormal", 1000, capacity, 0)
    for algorithm in algorithms:
        pack_lengths(warm, capacity, algorithm)  # compiled, or loaded from numba's cache
    lb, l2 = lower_bound_rows(lengths, capacity), martello_toth_l2(lengths, capacity)
    sort_s, _ = _common.best_cpu(lambda: np.sort(lengths), args.rounds)
    figures = {"n": len(lengths), "sort_s": sort_s, "lb_rows": lb, "l2_rows": l2}
    for algorithm in algorithms:
        seconds, placed = _common.best_cpu(lambda a=algorithm: pack_lengths(lengths, capacity, a), args.rounds)
        figures[f"{algorithm}_s"] = seconds
        figures[f"{algorithm}_x_sort"] = sort_s / seconds
        figures[f"{algorithm}_m_per_s"] = len(lengths) / seconds / 1e6
        figures[f"{algorithm}_rows"] = placed.n_rows
        figures[f"{algorithm}_gap_lb_pct"] = (placed.n_rows / lb - 1) * 100
    for window in filter(None, args.windows.split(",")):
        k = int(window)
        for algorithm in WINDOWED:
            rows = sum(pack_lengths(lengths[i : i + k], capacity, algorithm).n_rows for i in range(0, len(lengths), k))
            figures[f"{algorithm}_w{k}_extra_rows"] = rows - figures[f"{algorithm}_rows"]
    _common.emit(figures)


if __name__ == "__main__":
    main()
