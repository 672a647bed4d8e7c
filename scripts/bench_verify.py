"""Benchmark `packcli verify`: GB of shard files checked per second.

    python scripts/bench_verify.py             # ~400 MB of npy shards and ~200 MB of parquet
    python scripts/bench_verify.py --quick     # ~60 MB, a few seconds

Builds a synthetic packed output (lognormal document lengths, random token ids, packed
with BFD by packcli's own row builder and shard writer, plus a manifest), then times
`verify_dir` on it, best of a few repeats after a warm-up run (numba compiles or loads
its cache on first use). Machines are noisy, so the rate is also given as a ratio to two
baselines measured in the same run over the same files:

- "sha256": one thread hashing every shard file (verify must hash them all anyway);
- "read": reading every file into memory (np.load of every .npy, pyarrow read_table).

"rows only" is verify's row checks without the checksums, on one thread: what the
invariants cost next to sha256, which the manifest's format makes verify pay.

The files are in the page cache (just written), so this measures CPU, not the disk.
verify spreads its work over every core and the baselines run on one thread, so the
CPU time is also printed: "GB/cpu-s" divides the same bytes by the CPU seconds spent
(all threads), the cost per byte whatever the number of cores or other load.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from packcli.inspect.verify import verify_dir  # noqa: E402
from packcli.plan.kernels.pack import pack_lengths  # noqa: E402
from packcli.plan.rows import build_rows  # noqa: E402
from packcli.write.shards import ShardWriter  # noqa: E402

VOCAB = 32_000
PAD_ID = 2
MEAN_LENGTH = 600


def build_output(out: Path, fmt: str, tokens: int, seq_len: int, rows_per_shard: int, seed: int = 0) -> None:
    """A packed output of about `tokens` tokens, written window by window like `pack` does."""
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    writer = ShardWriter(out, fmt, seq_len, rows_per_shard, VOCAB)
    totals = {"rows": 0, "sequences": 0, "real_tokens": 0}
    window_tokens = 1 << 24
    while totals["real_tokens"] < tokens:
        mu = np.log(MEAN_LENGTH) - 0.5
        lengths = np.clip(np.round(rng.lognormal(mu, 1.0, window_tokens // MEAN_LENGTH)), 1, seq_len).astype(np.int64)
        flat = rng.integers(3, VOCAB, size=int(lengths.sum()), dtype=np.int32)
        starts = np.cumsum(lengths) - lengths
        placement = pack_lengths(lengths, seq_len, "bfd")
        rows = build_rows(
            flat, None, starts, lengths, placement.row, placement.offset, placement.n_rows, seq_len, PAD_ID
        )
        writer.add(rows)
        totals["rows"] += len(rows)
        totals["sequences"] += len(lengths)
        totals["real_tokens"] += int(lengths.sum())
    shards = writer.close()
    manifest = {
        "format_version": 1,
        "packcli_version": "bench",
        "mode": "bin",
        "algorithm": "bfd",
        "seq_len": seq_len,
        "format": fmt,
        "labels": "text",
        "options": {},
        "tokenizer": {
            "name_or_path": "synthetic",
            "vocab_size": VOCAB,
            "eos_id": PAD_ID,
            "bos_id": None,
            "pad_id": PAD_ID,
        },
        "totals": totals,
        "shards": [s.to_dict() for s in shards],
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2))


def shard_files(out: Path) -> list[Path]:
    files = []
    for shard in sorted(out.glob("shard-*")):
        files += sorted(shard.iterdir()) if shard.is_dir() else [shard]
    return files


def sha256_all(out: Path) -> None:
    for file in shard_files(out):
        digest = hashlib.sha256()
        with open(file, "rb") as f:
            while chunk := f.read(1 << 22):
                digest.update(chunk)
        digest.hexdigest()


def read_all(out: Path) -> None:
    for file in shard_files(out):
        if file.suffix == ".npy":
            np.load(file)
        else:
            import pyarrow.parquet as pq

            pq.read_table(file)


def cpu_seconds() -> float:
    """CPU time of this process, all threads: robust to other load on the machine."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def best_of(repeats: int, fn) -> tuple[float, float]:
    """(best wall time, CPU time of that run)."""
    runs = []
    for _ in range(repeats):
        started, cpu = time.perf_counter(), cpu_seconds()
        fn()
        runs.append((time.perf_counter() - started, cpu_seconds() - cpu))
    return min(runs)


def check_rows_only(out: Path) -> None:
    from packcli.inspect.verify import _check_shard

    manifest = json.loads((out / "manifest.json").read_text())
    tokenizer = manifest["tokenizer"]
    options = {
        "seq_len": manifest["seq_len"],
        "pad_id": tokenizer["pad_id"],
        "vocab_size": tokenizer["vocab_size"],
        "labels_follow_ids": True,
    }
    for shard in manifest["shards"]:
        _check_shard(out / shard["path"], manifest["format"], shard["path"], options)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="~60 MB instead of ~400 MB")
    parser.add_argument("--seq-len", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=str(ROOT / "bench-out" / "verify"))
    args = parser.parse_args()

    tokens = 6_000_000 if args.quick else 40_000_000
    rows_per_shard = max(1, (tokens // 8) // args.seq_len)  # about 8 shards
    print(f"python {platform.python_version()}, numpy {np.__version__}, {os.cpu_count()} cores, {platform.machine()}")
    print(
        f"corpus: ~{tokens / 1e6:.0f}M tokens, seq_len {args.seq_len}, ~{rows_per_shard} rows per shard, vocab {VOCAB} (uint16 ids)"
    )
    print(
        f"{'format':8} {'GB':>5} {'verify':>11} {'sha256':>11} {'read':>11} {'x sha256':>9} {'x read':>7}"
        f" {'verify GB/cpu-s':>16} {'sha256 GB/cpu-s':>16} {'rows only':>11}"
    )
    for fmt in ("npy", "parquet"):
        out = Path(args.out) / fmt
        build_output(out, fmt, tokens if fmt == "npy" else tokens // 2, args.seq_len, rows_per_shard)
        size = sum(f.stat().st_size for f in shard_files(out))
        verify_dir(out)  # warm-up: numba cache, page cache
        t_verify, cpu_verify = best_of(args.repeats, lambda out=out: verify_dir(out))
        t_sha, cpu_sha = best_of(args.repeats, lambda out=out: sha256_all(out))
        t_read, _ = best_of(args.repeats, lambda out=out: read_all(out))
        t_rows, _ = best_of(args.repeats, lambda out=out: check_rows_only(out))
        gb = size / 1e9
        print(
            f"{fmt:8} {gb:5.2f} {gb / t_verify:6.2f} GB/s {gb / t_sha:6.2f} GB/s {gb / t_read:6.2f} GB/s "
            f"{t_sha / t_verify:8.2f}x {t_read / t_verify:6.2f}x {gb / cpu_verify:16.2f} {gb / cpu_sha:16.2f}"
            f" {gb / t_rows:6.2f} GB/s"
        )
    print("x sha256 = sha256 time / verify time (higher is better); same for x read.")


if __name__ == "__main__":
    main()
