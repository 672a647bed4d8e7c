"""Benchmark `--group-by`: what planning each group on its own costs, in time and in rows.

    python scripts/bench_groups.py             # 1M lengths in 100 groups
    python scripts/bench_groups.py --quick     # 100k lengths, a few seconds

Lengths are lognormal (median ~`--median` tokens, clipped to 1..seq_len) and each gets one
of `--groups` group ids, drawn with Zipf-like weights so groups differ in size. Measured in
one run, best of `--repeats`:

- plan: `plan_rows` over all lengths without groups, then with them (the grouped plan
  packs each group alone with the same algorithm). "extra" is the difference.
- pack: what `pack` does after tokenizing for the same segments: the plan, then gathering
  rows from an in-memory spill and writing Parquet shards to a temporary directory.
  The target: the grouped plan's extra time is at most 10% of this.
- rows: the grouped plan's rows against the sum of per-group lower bounds
  (ceil(tokens of the group / seq_len)); the target: within 0.05%.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from packcli.plan.planner import plan_rows  # noqa: E402
from packcli.plan.settings import PlanSettings  # noqa: E402
from packcli.write.gather import gather_rows  # noqa: E402
from packcli.write.shards import ShardWriter  # noqa: E402
from packcli.write.spill import Spill  # noqa: E402

PAD_ID = 0
VOCAB = 32_000


def make_corpus(n: int, n_groups: int, seq_len: int, median: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    lengths = np.clip(rng.lognormal(np.log(median), 0.9, size=n).astype(np.int64), 1, seq_len)
    weights = 1.0 / np.arange(1, n_groups + 1) ** 0.8
    groups = rng.choice(n_groups, size=n, p=weights / weights.sum()).astype(np.int32)
    return lengths, groups


def best_of(repeats: int, action) -> tuple[float, object]:
    best, result = float("inf"), None
    for _ in range(repeats):
        started = time.perf_counter()
        result = action()
        best = min(best, time.perf_counter() - started)
    return best, result


def pack_time(lengths: np.ndarray, settings: PlanSettings, groups: np.ndarray | None) -> float:
    """Plan, gather and write Parquet shards for these segments (random tokens), in seconds."""
    rng = np.random.default_rng(1)
    tokens = rng.integers(3, VOCAB, size=int(lengths.sum()), dtype=np.uint16)
    spill = Spill.in_memory(tokens, lengths, None)
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        plan = plan_rows(lengths, settings, groups)
        writer = ShardWriter(Path(tmp), "parquet", settings.seq_len, 1 << 15, VOCAB, grouped=groups is not None)
        first = 0
        for rows in gather_rows(spill, plan, settings.seq_len, PAD_ID):
            part = None if plan.row_group is None else plan.row_group[first : first + len(rows)]
            writer.add(rows, part)
            first += len(rows)
        writer.close()
        return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sequences", type=int, default=1_000_000)
    parser.add_argument("--groups", type=int, default=100)
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--median", type=int, default=60, help="median sequence length in tokens")
    parser.add_argument("--algorithm", default="bfd")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="100k sequences, one repeat")
    args = parser.parse_args()
    if args.quick:
        args.sequences, args.repeats = 100_000, 1
    lengths, groups = make_corpus(args.sequences, args.groups, args.seq_len, args.median, seed=0)
    settings = PlanSettings(args.seq_len, algorithm=args.algorithm)
    plan_rows(lengths[:1000], settings, groups[:1000])  # load or compile the kernels first
    plain_s, plain = best_of(args.repeats, lambda: plan_rows(lengths, settings))
    grouped_s, grouped = best_of(args.repeats, lambda: plan_rows(lengths, settings, groups))
    pack_s = pack_time(lengths, settings, None)
    tokens = np.bincount(groups, weights=lengths).astype(np.int64)
    bound = int((-(-tokens // args.seq_len)).sum())
    rows = grouped.n_rows  # type: ignore[attr-defined]
    extra = grouped_s - plain_s
    print(
        f"{args.sequences:,} lengths (median {args.median}), {args.groups} groups, seq_len {args.seq_len}, {args.algorithm}"
    )
    print(f"plan without groups {plain_s * 1e3:8.1f} ms   {plain.n_rows:,} rows")  # type: ignore[attr-defined]
    print(f"plan with groups    {grouped_s * 1e3:8.1f} ms   {rows:,} rows")
    print(f"pack (plan + gather + write parquet, no groups) {pack_s:.2f} s")
    print(f"grouped plan extra: {extra * 1e3:.1f} ms = {extra / pack_s:.2%} of pack time (target <= 10%)")
    print(f"rows vs sum of per-group lower bounds {bound:,}: +{(rows - bound) / bound:.4%} (target <= 0.05%)")


if __name__ == "__main__":
    main()
