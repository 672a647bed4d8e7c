"""`packcli show OUT --row N` on a large output against the same command on a one-row output.

    python scripts/bench_show.py [--gigabytes 2] [--seq-len 4096] [--rounds 5] [--quick] [--keep DIR]

Writes a synthetic output of about --gigabytes of shards (npy: 10 bytes a token; Parquet:
the same rows, compressed) with packcli's own shard writer, then times, as wall time of
whole processes (start-up included, best of --rounds interleaved rounds):

- `packcli --version`: start-up alone;
- `show SMALL --row 0 --json`: a one-row output, so start-up and one decode;
- `show BIG --row N --json` for a row in the last shard, in each format;

and prints each as a ratio to the one-row output and as the time after start-up: `show` reads only the row it renders, so the
size of the output should not show (a ratio near 1.0).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from packcli import __version__  # noqa: E402
from packcli.plan.rows import build_rows  # noqa: E402
from packcli.write.manifest import FORMAT_VERSION  # noqa: E402
from packcli.write.shards import ShardWriter  # noqa: E402


def block(seq_len: int, rows: int, seed: int):
    """`rows` packed rows of random segments of 100-900 tokens, half of each learned."""
    rng = np.random.default_rng(seed)
    lengths, row_of, offset_of, used = [], [], [], np.zeros(rows, dtype=np.int64)
    for r in range(rows):
        while True:
            n = int(rng.integers(100, 900))
            if used[r] + n > seq_len:
                break
            lengths.append(n)
            row_of.append(r)
            offset_of.append(used[r])
            used[r] += n
    lengths_a = np.array(lengths, dtype=np.int64)
    starts = np.cumsum(lengths_a) - lengths_a
    tokens = rng.integers(5, 4000, size=int(lengths_a.sum())).astype(np.int32)
    within = np.arange(len(tokens)) - np.repeat(starts, lengths_a)
    labels = np.where(within >= np.repeat(lengths_a // 2, lengths_a), tokens, -100).astype(np.int32)
    return build_rows(tokens, labels, starts, lengths_a, row_of, offset_of, rows, seq_len, 0)


def write_output(out: Path, fmt: str, seq_len: int, total_rows: int, rows_per_shard: int) -> None:
    out.mkdir(parents=True)
    writer = ShardWriter(out, fmt, seq_len, rows_per_shard, vocab_size=4096)
    rows = block(seq_len, min(512, total_rows), seed=1)
    written = 0
    while written < total_rows:
        take = min(len(rows), total_rows - written)
        writer.add(rows.slice(0, take))
        written += take
    shards = [s.to_dict() for s in writer.close()]
    manifest = {
        "format_version": FORMAT_VERSION,
        "packcli_version": __version__,
        "mode": "bin",
        "algorithm": "bfd",
        "plan": "global",
        "seq_len": seq_len,
        "format": fmt,
        "labels": "masked",
        "options": {},
        "tokenizer": {
            "name_or_path": "packcli:demo",
            "vocab_size": 4096,
            "eos_id": 0,
            "bos_id": None,
            "pad_id": 0,
            "fingerprint": None,
            "backend": "hf",
        },
        "columns": {},
        "totals": {"rows": total_rows, "sequences": 0, "real_tokens": 0},
        "shards": shards,
        "group_by": None,
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2))


def size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def timed(*args: str) -> float:
    """Wall time of `packcli show ARGS --json`; of `packcli --version` (start-up) without ARGS."""
    command = ["show", *args, "--json"] if args else ["--version"]
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "packcli", *command],
        check=True,
        stdout=subprocess.DEVNULL,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    return time.perf_counter() - started


def read_seconds(out: Path, row: int, rounds: int) -> float:
    """In this process, best of `rounds`: opening the output and reading one row into a View
    (pyarrow already imported by the writer: the read alone)."""
    from packcli.inspect import show

    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        source = show.OutputSource(str(out))
        list(show.read_views(source, [row]))
        best = min(best, time.perf_counter() - started)
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gigabytes", type=float, default=2.0, help="npy output size (Parquet: the same rows)")
    parser.add_argument("--seq-len", type=int, default=4096)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="0.2 GB and 3 rounds: a smoke run")
    parser.add_argument(
        "--keep", type=Path, help="build the outputs here and keep them (default: a temporary directory)"
    )
    args = parser.parse_args()
    if args.quick:
        args.gigabytes, args.rounds = 0.2, 3
    total_rows = max(2, int(args.gigabytes * 1e9 / (10 * args.seq_len)))
    rows_per_shard = max(1, (32 << 20) // args.seq_len)
    with tempfile.TemporaryDirectory(prefix="bench-show-") as tmp:
        base = args.keep or Path(tmp)
        outputs = {}
        for fmt in ("npy", "parquet"):
            out = base / f"big-{fmt}"
            if not (out / "manifest.json").is_file():
                started = time.perf_counter()
                write_output(out, fmt, args.seq_len, total_rows, rows_per_shard)
                print(
                    f"wrote {out}: {total_rows:,} rows, {size(out) / 1e9:.2f} GB in {time.perf_counter() - started:.0f} s"
                )
            outputs[fmt] = out
        small = base / "small"
        if not (small / "manifest.json").is_file():
            write_output(small, "npy", args.seq_len, 1, rows_per_shard)
        row = str(total_rows - 3)
        runs: dict[str, list[float]] = {"--version": [], "small --row 0": []}
        runs.update({f"{fmt} --row {row}": [] for fmt in ("npy", "parquet")})
        timed(str(small), "--row", "0")  # warm the page cache and the start-up cache
        for _ in range(args.rounds):
            runs["--version"].append(timed())
            runs["small --row 0"].append(timed(str(small), "--row", "0"))
            for fmt in ("npy", "parquet"):
                runs[f"{fmt} --row {row}"].append(timed(str(outputs[fmt]), "--row", row))
        baseline, start_up = min(runs["small --row 0"]), min(runs["--version"])
        print(f"packcli, wall time of the whole process, best of {args.rounds}:")
        for name, seconds in runs.items():
            best = min(seconds)
            print(
                f"  {name:<24} {best:6.3f} s   {best / baseline:5.2f}x the one-row output,"
                f" {best - start_up:+.3f} s after start-up (--version)"
            )
        print("reading the row alone, in this process:")
        for name, out in (("small --row 0", small), *((f"{fmt} --row {row}", outputs[fmt]) for fmt in outputs)):
            seconds = read_seconds(out, 0 if out == small else int(row), args.rounds)
            print(f"  {name:<24} {seconds * 1000:8.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
