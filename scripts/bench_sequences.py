"""Peak memory of `pack --ids-field` against the number of sequences, short sequences.

    python scripts/bench_sequences.py [--sizes 1M,4M,16M] [--modes bin,concat] [--before CHECKOUT] [--workdir DIR] [--quick]
        [--documents 8M [--repeats 2] [--settle 10]] [--engine ray]

Inputs (built in --workdir, reused when present): Parquet files with one `ids`
list<int32> column, N sequences of lognormal lengths (sigma 1, mean about 37 tokens: chat
turns, short web pages), random ids below 50,000, row groups of 65,536 sequences, built
with a seed. Each is packed with `--ids-field ids --eos-token 1 --seq-len 2048 --format npy`
(bin and concat), every run its own subprocess; peak memory is the child's ru_maxrss
(os.wait4), with the write stage's time from its report. With --before, the same runs of
another checkout, interleaved. Printed: a table, and the ratio of the largest size's peak
to the smallest's for each mode and checkout (targets: every run under 450 MB, 16M within
1.1x of 1M). With --documents N: the write stage's time per token of N short sequences
against the same number of tokens as 2048-token documents, alternating runs (target: at
most 1.25x), measured two ways. "in one run": the write stage of a whole run. "settled":
the write stage of `pack --resume` from a spill left by a run stopped at the `spilled`
pause point, --settle seconds (default 10) after it. In one run the short corpus reaches
its write stage some 15 s after the run began, the documents some 4 s, and on a virtual
machine writing the same bytes into the page cache can cost more the later it comes
(docs/benchmarks/write-settled-2026-11-27.md has the measurements). Settled, both write
after the same pause. With --before, both checkouts are measured.

With --engine ray, the runs are `--engine ray` (a local cluster of every core, started
by the run) and the peak is the driver's own: the pack command runs in a small wrapper
that records its process's ru_maxrss (RUSAGE_SELF) as it ends, since the child's
figure from os.wait4 takes in the Ray processes it started and waited for (the
cluster's daemons and workers). Target: the driver's peak at 16M within 1.1x of 1M.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def size(text: str) -> int:
    text = text.strip().upper()
    scale = {"K": 10**3, "M": 10**6, "G": 10**9}.get(text[-1], 1)
    return int(float(text.rstrip("KMG")) * scale)


def build(path: Path, n: int, seed: int = 0) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    if path.exists():
        return
    rng = np.random.default_rng(seed)
    schema = pa.schema([("ids", pa.list_(pa.int32()))])
    partial = path.with_suffix(".partial")
    with pq.ParquetWriter(partial, schema, compression="zstd") as writer:
        for first in range(0, n, 1 << 16):
            count = min(1 << 16, n - first)
            lengths = np.maximum(1, rng.lognormal(np.log(37) - 0.5, 1.0, count).astype(np.int64))
            offsets = np.zeros(count + 1, dtype=np.int32)
            np.cumsum(lengths, out=offsets[1:])
            values = rng.integers(2, 50_000, int(offsets[-1]), dtype=np.int32)
            column = pa.ListArray.from_arrays(pa.array(offsets), pa.array(values))
            writer.write_table(pa.table({"ids": column}, schema=schema))
    partial.rename(path)


def build_documents(path: Path, tokens: int, seed: int = 1) -> None:
    """The same number of tokens as documents of 2,047 ids (2,048 with the EOS): one row each."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if path.exists():
        return
    rng = np.random.default_rng(seed)
    schema = pa.schema([("ids", pa.list_(pa.int32()))])
    partial = path.with_suffix(".partial")
    n = max(1, tokens // 2048)
    with pq.ParquetWriter(partial, schema, compression="zstd") as writer:
        for first in range(0, n, 1024):
            count = min(1024, n - first)
            offsets = np.arange(count + 1, dtype=np.int32) * 2047
            values = rng.integers(2, 50_000, int(offsets[-1]), dtype=np.int32)
            column = pa.ListArray.from_arrays(pa.array(offsets), pa.array(values))
            writer.write_table(pa.table({"ids": column}, schema=schema))
    partial.rename(path)


# `python -m packcli` with the process's own peak written to argv[1] as it ends (main()
# would leave through os._exit, past any finally).
DRIVER = """
import json, resource, sys
from packcli.cli.app import app
from packcli.core.flow import exit_now, return_freed_memory
from packcli.core.jit import own_process
where = sys.argv.pop(1)
sys.argv[0] = "packcli"
return_freed_memory()
own_process()
code = 0
try:
    app()
except SystemExit as stop:
    code = stop.code or 0
with open(where, "w") as f:
    json.dump({"maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}, f)
if not code:
    exit_now(0)
sys.exit(code)
"""


def run(code: Path, corpus: Path, out: Path, mode: str, engine: str = "local", start: str = "--overwrite") -> dict:
    from profile_write import pack_arguments

    pack = [*pack_arguments(corpus, out, mode), start]
    driver = out.with_name(out.name + ".driver.json")
    if engine == "ray":
        args = [sys.executable, "-c", DRIVER, str(driver), *pack, "--engine", "ray"]
    else:
        args = [sys.executable, "-m", "packcli", *pack]
    env = {**os.environ, "PYTHONPATH": str(code)}
    begin = time.perf_counter()
    process = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=code)
    stdout = process.stdout.read() if process.stdout else b""
    _, status, usage = os.wait4(process.pid, 0)
    if status != 0:
        raise SystemExit(f"pack failed ({status}): {' '.join(args)}")
    report = json.loads(stdout)
    stages = report.get("stages") or report.get("timings") or {}
    peak_kb = json.loads(driver.read_text())["maxrss_kb"] if engine == "ray" else usage.ru_maxrss
    return {
        "peak_mb": round(peak_kb / 1024, 1),
        "seconds": round(time.perf_counter() - begin, 2),
        "rows": report["rows"],
        "user_s": round(usage.ru_utime, 2),  # the whole process tree's CPU (the local engine: one process)
        "system_s": round(usage.ru_stime, 2),
        "write_s": stages.get("write", {}).get("seconds")
        if isinstance(stages.get("write"), dict)
        else stages.get("write"),
    }


def run_write_stage(code: Path, corpus: Path, out: Path, settle: float) -> dict:
    """The write stage in the same conditions for every corpus: a bin-mode run stopped
    (SIGKILL) at the `spilled` pause point (its spill complete on disk), then, after
    `os.sync()` and `settle` seconds, `pack --resume`, which plans and writes from that
    spill; its report's write stage is the figure."""
    import shutil

    from profile_write import pack_arguments, stop_at_spilled

    shutil.rmtree(out, ignore_errors=True)
    stop_at_spilled(pack_arguments(corpus, out), out, code)
    os.sync()
    time.sleep(settle)
    return run(code, corpus, out, "bin", start="--resume")


def pq_tokens(path: Path) -> int:
    """Ids in a corpus (its `ids` column), without reading it."""
    import pyarrow.parquet as pq

    meta = pq.ParquetFile(path).metadata
    return sum(meta.row_group(i).column(0).statistics.num_values or 0 for i in range(meta.num_row_groups))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1M,4M,16M")
    parser.add_argument("--modes", default="bin,concat")
    parser.add_argument("--before", type=Path, help="another checkout, run on the same inputs")
    parser.add_argument("--workdir", type=Path)
    parser.add_argument("--quick", action="store_true", help="1M and 4M sequences only")
    parser.add_argument(
        "--documents",
        help="also: the write stage per token of N short sequences against the same tokens as "
        "2048-token documents (bin mode, alternating runs), e.g. 8M",
    )
    parser.add_argument("--repeats", type=int, default=2, help="runs of each side of --documents")
    parser.add_argument(
        "--settle", type=float, default=10.0, help="seconds between the spill and the settled write stage"
    )
    parser.add_argument(
        "--engine", choices=["local", "ray"], default="local", help="ray: the driver's own peak (needs Ray)"
    )
    args = parser.parse_args()
    if args.quick:
        args.sizes = "1M,4M"
    sizes = [size(s) for s in args.sizes.split(",")]
    codes = {"this": ROOT} | ({"before": args.before} if args.before else {})
    with tempfile.TemporaryDirectory() as scratch:
        workdir = (args.workdir or Path(scratch)).resolve()  # the runs work in their checkout
        workdir.mkdir(parents=True, exist_ok=True)
        results: dict[str, dict] = {}
        for n in sizes:
            corpus = workdir / f"short-{n}.parquet"
            build(corpus, n)
            for mode in args.modes.split(","):
                for label, code in codes.items():
                    key = f"{label} {mode} {n:,}"
                    results[key] = run(code, corpus, Path(scratch) / "out", mode, args.engine)
                    print(key, results[key], flush=True)
        if args.documents:
            n = size(args.documents)
            short = workdir / f"short-{n}.parquet"
            build(short, n)
            tokens = int(pq_tokens(short))
            documents = workdir / f"documents-{tokens}.parquet"
            build_documents(documents, tokens)
            per_token: dict[tuple[str, str, str], list[float]] = {}
            for repeat in range(args.repeats):
                for code_label, code in codes.items():
                    for label, corpus in (("short", short), ("documents", documents)):
                        out = Path(scratch) / "out"
                        for how, result in (
                            ("in one run", run(code, corpus, out, "bin")),
                            ("settled", run_write_stage(code, corpus, out, args.settle)),
                        ):
                            ids = pq_tokens(corpus)
                            result["write_ns_per_token"] = round(result["write_s"] * 1e9 / ids, 2)
                            result["user_ns_per_token"] = round(result["user_s"] * 1e9 / ids, 2)
                            per_token.setdefault((code_label, how, label), []).append(result["write_ns_per_token"])
                            if how == "settled":  # a run that only plans and writes: its user CPU
                                per_token.setdefault((code_label, "user CPU", label), []).append(
                                    result["user_ns_per_token"]
                                )
                            key = f"write {code_label} {how} {label} {n:,} #{repeat}"
                            results[key] = result
                            print(key, result, flush=True)
            for code_label in codes:
                for how in ("in one run", "settled", "user CPU"):
                    best = {label: min(per_token[(code_label, how, label)]) for label in ("short", "documents")}
                    what = "user CPU of the settled run" if how == "user CPU" else f"{how}: write stage"
                    print(
                        f"{code_label}, {what} per token, short / documents (best of {args.repeats}): "
                        f"{best['short']:.2f} / {best['documents']:.2f} ns = {best['short'] / best['documents']:.2f}",
                        flush=True,
                    )
    summary = {}
    for label in codes:
        for mode in args.modes.split(","):
            small, large = results[f"{label} {mode} {sizes[0]:,}"], results[f"{label} {mode} {sizes[-1]:,}"]
            summary[f"{label} {mode}: peak {sizes[-1]:,} / {sizes[0]:,}"] = round(
                large["peak_mb"] / small["peak_mb"], 3
            )
    print(json.dumps({"runs": results, "ratios": summary}, indent=2))


if __name__ == "__main__":
    main()
