"""The planner's own work, in the process: a plan from counts, grouped plans, the repair pass.

    python plan.py from-counts --sequences 1e9 [--mean 500] [--seq-len 8192] [--algorithm bfd] [--shards 100]
    python plan.py groups --n 1000000 [--groups 100] [--seq-len 2048] [--median 60]
    python plan.py repair --set lognormal --n 200000 --capacity 2048 | --lengths FILE.npy [--n FIRST] --capacity 1024

from-counts: the histogram of --sequences lognormal lengths (from the distribution
function, no array of lengths) planned by `plan_from_counts`, then the rows of --shards
random shards materialised from the plan and checked. Figures: `plan_s`, `plan_mb`,
`rows`, `gap_rows` (over ceil(tokens / seq_len)), `shards_s`, `base_rss_mb` (the
process's peak after imports and the kernels' first run, the baseline of its peak RSS).

groups: `plan_rows` without and with Zipf-sized groups. Figures: `plain_s`, `grouped_s`,
`extra_s`, `rows` and `gap_pct` (the grouped rows over the sum of per-group lower bounds).

repair: every packer, then `improve_rows`. Figures per packer: `ALG_packer_rows`,
`ALG_rows` (after the pass), `ALG_pass_s` (CPU, best of --rounds); `lb_rows`, `l2_rows`.
"""

from __future__ import annotations

import argparse
import math
import time

import _common
import numpy as np


def peak_rss_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


def lognormal_counts(n: float, mean: float, sigma: float, seq_len: int) -> np.ndarray:
    """Sequences per length 0..seq_len: n lognormal lengths rounded, the tail cut to seq_len."""
    mu = math.log(mean) - sigma**2 / 2

    def cdf(x: float) -> float:
        return 0.0 if x <= 0 else 0.5 * (1 + math.erf((math.log(x) - mu) / (sigma * math.sqrt(2))))

    edges = np.array([cdf(length + 0.5) for length in range(seq_len + 1)])
    mass = np.diff(np.concatenate([[0.0], edges]))
    mass[seq_len] += 1 - edges[-1]
    mass[1] += mass[0]
    mass[0] = 0
    counts = np.floor(mass * n).astype(np.int64)
    counts[np.argmax(mass)] += int(n) - int(counts.sum())
    return counts


def from_counts(args) -> dict:
    plan_from_counts = _common.find("plan_from_counts", "packcli.plan.patterns")
    seq_len = args.seq_len
    warm = np.bincount(np.random.default_rng(1).integers(1, seq_len + 1, 5000), minlength=seq_len + 1)
    plan_from_counts([(0, warm)], seq_len, args.algorithm, shuffle=True).slots(np.arange(10))
    base = peak_rss_mb()
    counts = lognormal_counts(args.sequences, args.mean, 1.0, seq_len)
    n = int(counts.sum())
    tokens = int((counts * np.arange(seq_len + 1)).sum())
    bound = -(-tokens // seq_len)
    started = time.perf_counter()
    plan = plan_from_counts([(0, counts)], seq_len, args.algorithm, shuffle=True, seed=0)
    plan_s = time.perf_counter() - started
    p = plan.patterns
    arrays = (p.row_start, p.slot_offsets, p.slot_len, p.slot_pos, plan.slot_base, plan.slot_step)
    per_shard = max(1, (256 << 20) // (4 * seq_len))
    shards = -(-plan.n_rows // per_shard)
    picked = np.random.default_rng(0).choice(shards, size=min(args.shards, shards), replace=False)
    started = time.perf_counter()
    for shard in picked.tolist():
        first = shard * per_shard
        rank, length, row, offset = plan.slots(np.arange(first, min(first + per_shard, plan.n_rows), dtype=np.int64))
        fill = np.bincount(row - first, weights=length)
        if fill.max() > seq_len or (offset + length > seq_len).any() or rank.min() < 0 or rank.max() >= n:
            raise SystemExit(f"shard {shard}: a slot out of its row or rank range")
    return {
        "sequences": n,
        "plan_s": plan_s,
        "plan_mb": sum(a.nbytes for a in arrays) / 2**20,
        "rows": plan.n_rows,
        "lb_rows": bound,
        "gap_rows": plan.n_rows - bound,
        "shards_s": time.perf_counter() - started,
        "base_rss_mb": base,
    }


def array_mb(value, seen=None) -> float:
    """MB of the NumPy arrays a plan holds: its own and those of its fields, nested (a
    dataclass's, a NamedTuple's, a plain object's attributes), each array counted once."""
    seen = set() if seen is None else seen
    if id(value) in seen:
        return 0.0
    seen.add(id(value))
    if isinstance(value, np.ndarray):
        return value.nbytes / 2**20
    if isinstance(value, (list, tuple)):
        return sum(array_mb(item, seen) for item in value)
    fields = getattr(value, "__dict__", None)
    return sum(array_mb(item, seen) for item in fields.values()) if isinstance(fields, dict) else 0.0


def groups(args) -> dict:
    plan_rows = _common.find("plan_rows", "packcli.plan.planner", "packcli.plan")
    settings_class = _common.find("PlanSettings", "packcli.plan.settings", "packcli.plan")
    rng = np.random.default_rng(0)
    lengths = np.clip(rng.lognormal(np.log(args.median), 0.9, size=args.n).astype(np.int64), 1, args.seq_len)
    weights = 1.0 / np.arange(1, args.groups + 1) ** 0.8
    ids = rng.choice(args.groups, size=args.n, p=weights / weights.sum()).astype(np.int32)
    settings = settings_class(args.seq_len, algorithm=args.algorithm)
    plan_rows(lengths[:1000], settings, ids[:1000])
    plain_s, plain = _common.best_wall(lambda: plan_rows(lengths, settings), args.rounds)
    grouped_s, grouped = _common.best_wall(lambda: plan_rows(lengths, settings, ids), args.rounds)
    tokens = np.bincount(ids, weights=lengths).astype(np.int64)
    bound = int((-(-tokens // args.seq_len)).sum())
    figures = {
        "plain_s": plain_s,
        "grouped_s": grouped_s,
        "extra_s": grouped_s - plain_s,
        "rows": grouped.n_rows,
        "gap_pct": (grouped.n_rows / bound - 1) * 100,
        "plan_mb": array_mb(grouped),  # a plan of patterns or one entry per sequence, as the program makes
    }
    for prefix, plan in (("", grouped), ("plain_", plain)):
        patterns = getattr(plan, "patterns", None)
        if patterns is not None:  # a plan of patterns: how many, and their slots
            figures[f"{prefix}patterns"] = len(patterns.row_start) - 1
            figures[f"{prefix}slots"] = len(patterns.slot_len)
    return figures


def repair(args) -> dict:
    pack_lengths = _common.find("pack_lengths", *_common.KERNELS)
    improve_rows = _common.find("improve_rows", *_common.KERNELS)
    lower_bound_rows = _common.find("lower_bound_rows", *_common.KERNELS)
    martello_toth_l2 = _common.find("martello_toth_l2", *_common.KERNELS)
    capacity = args.capacity
    if args.lengths:
        lengths = np.clip(np.load(args.lengths).astype(np.int64), 1, capacity)[: args.n]
    else:
        lengths = _common.lengths(args.set, args.n, capacity, 0)
    figures = {"lb_rows": lower_bound_rows(lengths, capacity), "l2_rows": martello_toth_l2(lengths, capacity)}
    for algorithm in ("ffd", "bfd", "spfhp", "lpfhp"):
        placed = pack_lengths(lengths, capacity, algorithm)
        improve_rows(lengths, placed, capacity)  # compiled or loaded first
        seconds, improved = _common.best_cpu(lambda p=placed: improve_rows(lengths, p, capacity), args.rounds)
        figures[f"{algorithm}_packer_rows"] = placed.n_rows
        figures[f"{algorithm}_rows"] = improved.n_rows
        figures[f"{algorithm}_pass_s"] = seconds
    return figures


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("what", choices=("from-counts", "groups", "repair"))
    parser.add_argument("--sequences", type=float, default=1e9)
    parser.add_argument("--mean", type=float, default=500)
    parser.add_argument("--seq-len", type=int, default=8192)
    parser.add_argument("--algorithm", default="bfd")
    parser.add_argument("--shards", type=int, default=100)
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--groups", type=int, default=100)
    parser.add_argument("--median", type=int, default=60)
    parser.add_argument("--set", default="lognormal")
    parser.add_argument("--lengths")
    parser.add_argument("--capacity", type=int, default=2048)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    _common.emit({"from-counts": from_counts, "groups": groups, "repair": repair}[args.what](args))


if __name__ == "__main__":
    main()
