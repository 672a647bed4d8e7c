"""Benchmark `packcli export`: each format's speed against copying its own output, and
its peak memory at two output sizes.

    python scripts/bench_export.py                       # ~64M and ~256M tokens
    python scripts/bench_export.py --quick               # ~16M and ~64M tokens
    python scripts/bench_export.py --quick --formats energon,mds --repeats 3

Builds synthetic packed outputs (npy shards, uint16 ids, seq_len 4096; the corpus of
scripts/bench_verify.py) at two sizes, four times apart. Each export runs in a child
process of its own (so its peak RSS is its own), timed from the call to the return,
imports excluded. The baseline, measured in the same run right after each export:
copying the export's own output directory (`shutil.copytree` of the same bytes, page
cache warm). Both start after an `os.sync()`, so neither pays for the writeback of the
step before it. "x copy" = copy time / export time, the median over `--repeats` pairs of
runs (a pair shares the machine's load), higher is better (the target is 0.5x or more);
the smallest output copies in a few hundredths of a second on an idle machine, so
fixed costs still weigh there. "cpu s" is the export's CPU time (user + system, all its
threads and child processes). For mds-zstd, "x zstd" compares the export with
compressing the same shard bytes at the same zstd level in one thread (the
compressor's own speed): the export compresses shards side by side, so on several
cores it can pass 1. Peak RSS is the child's own (VmHWM); flat memory means the same
peak at both sizes.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

SHARD_ROWS = 512
FORMATS = ("megatron", "nanotron", "mds", "mds-zstd", "energon")


def run_export(kind: str, source: str, out: str) -> dict:
    """In the child: one export, timed, with its peak RSS."""
    if kind == "megatron":
        from packcli.export.megatron import export_megatron

        os.makedirs(out, exist_ok=True)
        call = lambda: export_megatron(source, os.path.join(out, "data"))  # noqa: E731
    elif kind == "nanotron":
        from packcli.export.nanotron import export_nanotron

        call = lambda: export_nanotron(source, out, overwrite=True)  # noqa: E731
    elif kind == "energon":
        from packcli.export.energon import export_energon

        call = lambda: export_energon(source, out, overwrite=True)  # noqa: E731
    else:
        from packcli.export.mds import export_mds

        compression = "zstd" if kind == "mds-zstd" else None
        call = lambda: export_mds(source, out, overwrite=True, compression=compression)  # noqa: E731
    before = os.times()
    started = time.perf_counter()
    call()
    seconds = time.perf_counter() - started
    after = os.times()
    cpu = sum(getattr(after, f) - getattr(before, f) for f in ("user", "system", "children_user", "children_system"))
    return {
        "seconds": seconds,
        "cpu": cpu,
        "rss_mb": peak_rss_mb(),
    }


def peak_rss_mb() -> float:
    """This process's peak RSS: VmHWM where /proc has it, as `ru_maxrss` on Linux carries
    the parent's peak over fork and exec (the parent that built a large source)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def build_source(out: Path, tokens: int, seq_len: int) -> None:
    """bench_verify's synthetic corpus (lognormal lengths, mean 600, BFD, uint16 ids) in
    windows of 4M tokens, so the output has about `tokens` tokens, in shards of 512 rows
    (about 2M tokens) whatever its size: what stays in memory is at most a shard's."""
    import bench_verify
    import numpy as np

    from packcli.plan.kernels.pack import pack_lengths
    from packcli.plan.rows import build_rows
    from packcli.write.shards import ShardWriter

    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    rng = np.random.default_rng(0)
    writer = ShardWriter(out, "npy", seq_len, SHARD_ROWS, bench_verify.VOCAB)
    totals = {"rows": 0, "sequences": 0, "real_tokens": 0}
    while totals["real_tokens"] < tokens:
        mean = bench_verify.MEAN_LENGTH
        lengths = np.clip(np.round(rng.lognormal(np.log(mean) - 0.5, 1.0, (1 << 22) // mean)), 1, seq_len)
        lengths = lengths.astype(np.int64)
        flat = rng.integers(3, bench_verify.VOCAB, size=int(lengths.sum()), dtype=np.int32)
        placement = pack_lengths(lengths, seq_len, "bfd")
        starts = np.cumsum(lengths) - lengths
        rows = build_rows(
            flat, None, starts, lengths, placement.row, placement.offset, placement.n_rows, seq_len, bench_verify.PAD_ID
        )
        writer.add(rows)
        totals["rows"] += len(rows)
        totals["sequences"] += len(lengths)
        totals["real_tokens"] += int(lengths.sum())
    shards = writer.close()
    tokenizer = {
        "name_or_path": "synthetic",
        "vocab_size": bench_verify.VOCAB,
        "eos_id": 2,
        "bos_id": None,
        "pad_id": 2,
    }
    manifest = {"format_version": 2, "packcli_version": "bench", "mode": "bin", "algorithm": "bfd", "plan": "bench"}
    manifest.update(seq_len=seq_len, format="npy", labels="text", options={}, tokenizer=tokenizer, totals=totals)
    manifest["shards"] = [s.to_dict() for s in shards]
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2))


def tree_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def copy_seconds(path: Path) -> float:
    target = path.parent / (path.name + ".copy")
    shutil.rmtree(target, ignore_errors=True)
    started = time.perf_counter()
    shutil.copytree(path, target)
    seconds = time.perf_counter() - started
    shutil.rmtree(target, ignore_errors=True)
    return seconds


def zstd_seconds(path: Path) -> float:
    """Compressing the raw bytes of an mds-zstd output's shards as the export does (its
    zstd level), one after the other in this thread: the compressor's own time."""
    import zstandard

    from packcli.export.mds import COMPRESSORS

    seconds = 0.0
    for shard in sorted(path.glob("shard.*.mds.zstd")):
        raw = zstandard.ZstdDecompressor().decompress(shard.read_bytes())
        started = time.perf_counter()
        COMPRESSORS["zstd"](raw)
        seconds += time.perf_counter() - started
    return seconds


def measure(kind: str, source: Path, out: Path, repeats: int) -> dict:
    """`repeats` exports, each in a fresh child into an empty OUT and followed by a copy
    of its output (and for mds-zstd the compressor's time on the same bytes): the median
    ratios and times, the highest peak RSS."""
    results = []
    for _ in range(repeats):
        os.sync()  # each timed step starts with nothing left to write back (the disk is slower than memory)
        result = measure_once(kind, source, out)
        os.sync()
        result["copy"] = copy_seconds(out)
        result["x_copy"] = result["copy"] / result["seconds"]
        if kind == "mds-zstd":
            result["x_zstd"] = zstd_seconds(out) / result["seconds"]
        result["load"] = os.getloadavg()[0]
        results.append(result)
    summary = {key: statistics.median(r[key] for r in results) for key in results[0] if key != "rss_mb"}
    return {**summary, "rss_mb": max(r["rss_mb"] for r in results)}


def measure_once(kind: str, source: Path, out: Path) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    child = subprocess.run(
        [sys.executable, __file__, "--child", kind, str(source), str(out)],
        capture_output=True,
        text=True,
        check=False,
    )
    if child.returncode != 0:
        raise SystemExit(f"{kind} export failed:\n{child.stderr[-3000:]}")
    return json.loads(child.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="~16M and ~64M tokens instead of ~64M and ~256M")
    parser.add_argument("--seq-len", type=int, default=4096)
    parser.add_argument(
        "--repeats", type=int, default=3, help="exports and copies timed per output (best of each taken)"
    )
    parser.add_argument("--formats", default=",".join(FORMATS))
    parser.add_argument("--out", default=str(ROOT / "bench-out" / "export"))
    parser.add_argument("--child", nargs=3, metavar=("KIND", "SOURCE", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_export(*args.child)))
        return

    import numpy as np

    small = 16_000_000 if args.quick else 64_000_000
    sizes = (small, 4 * small)
    print(f"python {platform.python_version()}, numpy {np.__version__}, {os.cpu_count()} cores, {platform.machine()}")
    print(f"synthetic npy outputs of ~{sizes[0] / 1e6:.0f}M and ~{sizes[1] / 1e6:.0f}M tokens, seq_len {args.seq_len}")
    print(
        f"{'format':9} {'tokens':>7} {'out MB':>8} {'export s':>9} {'cpu s':>6} {'copy s':>7} {'x copy':>7} "
        f"{'x zstd':>7} {'export MB/s':>11} {'peak RSS MB':>12} {'load':>5}"
    )
    for tokens in sizes:
        source = Path(args.out) / f"source-{tokens // 1_000_000}M"
        build_source(source, tokens, args.seq_len)
        for kind in args.formats.split(","):
            out = Path(args.out) / f"{kind}-{tokens // 1_000_000}M"
            result = measure(kind, source, out, args.repeats)
            size = tree_bytes(out)
            zstd = f"{result['x_zstd']:6.2f}x" if "x_zstd" in result else f"{'':7}"
            print(
                f"{kind:9} {tokens / 1e6:6.0f}M {size / 1e6:8.1f} {result['seconds']:9.2f} {result['cpu']:6.2f} "
                f"{result['copy']:7.2f} {result['x_copy']:6.2f}x {zstd} {size / 1e6 / result['seconds']:11.0f} "
                f"{result['rss_mb']:12.0f} {result['load']:5.1f}",
                flush=True,
            )
            shutil.rmtree(out, ignore_errors=True)
        shutil.rmtree(source, ignore_errors=True)
    print("x copy = time to copy the export's output / export time (higher is better; target >= 0.5x);")
    print("x zstd = time to zstd-compress the same shard bytes in one thread / export time; medians of the repeats.")


if __name__ == "__main__":
    main()
