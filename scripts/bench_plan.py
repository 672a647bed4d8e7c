"""Planning a billion sequences from their histogram, and rows of random shards from the plan.

    python scripts/bench_plan.py [--sequences 1e9] [--mean 500] [--sigma 1.0] [--seq-len 8192]
                                 [--algorithm bfd] [--shards 100] [--rows-per-shard R] [--seed 0] [--quick]

The histogram is that of `--sequences` lognormal lengths with the given mean (the mass
above --seq-len is put at --seq-len, lengths below 1 at 1), computed from the lognormal's
distribution function, not sampled: no array of lengths is ever made. The plan is
`packcli.plan.patterns.plan_from_counts` (the packer's runs as row patterns, the repair
pass on the rows it can change, the slot rule's ranks, the shuffle); then the rows of
`--shards` random shards (`--rows-per-shard`, default the rows of 256 MB of int32 tokens as
`pack` cuts them) are materialised as slots (rank in the slot map, length, row, offset) and
checked (no row over --seq-len, every rank in range).

Printed (JSON): the plan's time, its size, the rows, the lower bound ceil(tokens / seq_len)
and the gap to it, the time of the shards' rows, and the process's peak RSS, with the
RSS after importing packcli and loading the kernels on a small plan (the baseline of the
same run). Targets (1e9 sequences, mean 500, --seq-len 8192): plan under 10 s, peak RSS
under 300 MB, rows within 0.01% of the lower bound.
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import time

import numpy as np


def rss_mb() -> float:
    """Peak resident set size of this process so far, in MB (Linux reports KB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def current_rss_mb() -> float:
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * resource.getpagesize() / 2**20


def lognormal_counts(n: float, mean: float, sigma: float, seq_len: int) -> np.ndarray:
    """Sequences per length 0..seq_len: n lognormal lengths rounded to the nearest integer."""
    mu = math.log(mean) - sigma**2 / 2

    def cdf(x: float) -> float:
        return 0.0 if x <= 0 else 0.5 * (1 + math.erf((math.log(x) - mu) / (sigma * math.sqrt(2))))

    edges = np.array([cdf(length + 0.5) for length in range(seq_len + 1)])
    mass = np.diff(np.concatenate([[0.0], edges]))
    mass[seq_len] += 1 - edges[-1]  # the tail, cut to seq_len
    mass[1] += mass[0]
    mass[0] = 0
    counts = np.floor(mass * n).astype(np.int64)
    counts[np.argmax(mass)] += int(n) - int(counts.sum())  # exactly n
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sequences", type=float, default=1e9)
    parser.add_argument("--mean", type=float, default=500)
    parser.add_argument("--sigma", type=float, default=1.0)
    parser.add_argument("--seq-len", type=int, default=8192)
    parser.add_argument("--algorithm", default="bfd", choices=["bfd", "spfhp", "lpfhp"])
    parser.add_argument("--shards", type=int, default=100)
    parser.add_argument("--rows-per-shard", type=int)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="1e8 sequences, 10 shards")
    args = parser.parse_args()
    if args.quick:
        args.sequences, args.shards = min(args.sequences, 1e8), min(args.shards, 10)

    from packcli.plan.patterns import plan_from_counts

    seq_len = args.seq_len
    # the kernels loaded (packer, repair) on a small plan the repair changes: uniform lengths
    warm = np.bincount(np.random.default_rng(1).integers(1, seq_len + 1, 5000), minlength=seq_len + 1)
    plan_from_counts([(0, warm)], seq_len, args.algorithm, shuffle=True).slots(np.arange(10))
    baseline = {"peak_rss_mb": round(rss_mb(), 1), "rss_mb": round(current_rss_mb(), 1)}

    counts = lognormal_counts(args.sequences, args.mean, args.sigma, seq_len)
    n = int(counts.sum())
    tokens = int((counts * np.arange(seq_len + 1)).sum())
    lower_bound = -(-tokens // seq_len)

    begin = time.perf_counter()
    plan = plan_from_counts([(0, counts)], seq_len, args.algorithm, shuffle=True, seed=args.seed)
    plan_seconds = time.perf_counter() - begin
    p = plan.patterns
    plan_bytes = sum(
        a.nbytes for a in (p.row_start, p.slot_offsets, p.slot_len, p.slot_pos, plan.slot_base, plan.slot_step)
    )

    rows_per_shard = args.rows_per_shard or max(1, (256 << 20) // (4 * seq_len))
    shards = -(-plan.n_rows // rows_per_shard)
    picked = np.random.default_rng(args.seed).choice(shards, size=min(args.shards, shards), replace=False)
    begin = time.perf_counter()
    slots = 0
    for shard in picked.tolist():
        first = shard * rows_per_shard
        rows = np.arange(first, min(first + rows_per_shard, plan.n_rows), dtype=np.int64)
        rank, length, row, offset = plan.slots(rows)
        fill = np.bincount(row - first, weights=length, minlength=len(rows))
        assert fill.max() <= seq_len and (offset + length <= seq_len).all()
        assert rank.min() >= 0 and rank.max() < n
        slots += len(rank)
    shard_seconds = time.perf_counter() - begin

    result = {
        "sequences": n,
        "tokens": tokens,
        "mean_length": round(tokens / n, 1),
        "seq_len": seq_len,
        "algorithm": args.algorithm,
        "plan_seconds": round(plan_seconds, 3),
        "patterns": len(p.row_start) - 1,
        "slots": len(p.slot_len),
        "plan_bytes": plan_bytes,
        "rows": plan.n_rows,
        "lower_bound_rows": lower_bound,
        "gap_rows": plan.n_rows - lower_bound,
        "gap_percent": round(100 * (plan.n_rows - lower_bound) / lower_bound, 6),
        "shards_materialised": len(picked),
        "rows_per_shard": rows_per_shard,
        "shard_slots": slots,
        "shard_seconds": round(shard_seconds, 3),
        "peak_rss_mb": round(rss_mb(), 1),
        "baseline_after_imports_and_kernels": baseline,
    }
    result["targets"] = {
        "plan_under_10_s": plan_seconds < 10,
        "peak_rss_under_300_mb": result["peak_rss_mb"] < 300,
        "within_0.01_percent_of_lower_bound": plan.n_rows <= lower_bound * 1.0001,
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
