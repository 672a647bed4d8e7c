"""Where the write stage of `pack --ids-field ids` goes: CPU seconds of each step.

    python scripts/profile_write.py CORPUS OUT [--settle 5] [--seq-len 2048]

CORPUS: a Parquet file with an `ids` column (the pack-short benchmark builds them in bench-out/inputs/).
A bin-mode run is stopped (SIGKILL) at the `spilled` pause point, and after `os.sync()`
and --settle seconds this process resumes it (`pack --resume`, which plans and writes
from that spill) with a thread-CPU clock around each step of the write stage, summed over
the threads that run it. Printed: the report's stages, the process's user and system
CPU, and per step its CPU seconds, the system part of them and its calls.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import io
import json
import os
import resource
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
spent: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0, 0])
lock = threading.Lock()


def timed(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        cpu, system = time.thread_time(), resource.getrusage(resource.RUSAGE_THREAD).ru_stime
        try:
            return function(*args, **kwargs)
        finally:
            with lock:
                figures = spent[name]
                figures[0] += time.thread_time() - cpu
                figures[1] += resource.getrusage(resource.RUSAGE_THREAD).ru_stime - system
                figures[2] += 1

    return wrapper


def instrument() -> None:
    """The write stage's steps, each behind a clock."""
    from packcli.plan import buckets, patterns
    from packcli.write import by_length, gather, report, shards, spill

    steps = [
        (patterns.PatternPlan, "pieces", "the slots of each block (pieces)"),
        (patterns.PatternPlan, "plan_rows_of", "  of which the rows' shuffled order"),
        (buckets.BucketParts, "positions", "  of which placing them in parts"),
        (spill.Spill, "read_block", "the reads (a spill in input order)"),
        (by_length.SpillByLength, "read_block", "the reads (a spill by length)"),
        (by_length.SortedCopy, "read_block", "the reads (the sorted copy)"),
        (gather, "fill_rows", "the row kernel (fill_rows)"),
        (report.RowStats, "add", "the report's counts"),
        (shards.ShardWriter, "add", "writing the shards"),
        (shards, "checksum", "the shards' SHA-256"),
    ]
    for owner, attribute, name in steps:
        setattr(owner, attribute, timed(name, getattr(owner, attribute)))


def pack_arguments(corpus: Path, out: Path, mode: str = "bin", seq_len: str = "2048") -> list[str]:
    """`pack` of an `ids` Parquet corpus into npy shards, its report on stdout."""
    return [
        *("pack", str(corpus), "-o", str(out), "--json", "--ids-field", "ids", "--eos-token", "1", "--pad-id", "0"),
        *("--seq-len", seq_len, "--format", "npy", "--mode", mode),
    ]


def stop_at_spilled(pack: list[str], out: Path, code: Path = ROOT) -> None:
    """A run of `pack` (its arguments, writing to `out`) with the checkout `code`, stopped
    by SIGKILL once its spill is complete (the `spilled` pause point)."""
    out = out.resolve()
    fifo = out.with_name(out.name + ".pause")
    fifo.unlink(missing_ok=True)
    os.mkfifo(fifo)
    env = {**os.environ, "PYTHONPATH": str(code), "PACKCLI_PAUSE_AT": "spilled", "PACKCLI_PAUSE_FIFO": str(fifo)}
    args = [sys.executable, "-m", "packcli", *pack, "--overwrite"]
    process = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=code)
    held: list[int] = []  # the FIFO's write end, open once the run waits at the pause point
    opener = threading.Thread(target=lambda: held.append(os.open(fifo, os.O_WRONLY)), daemon=True)
    opener.start()
    while opener.is_alive():
        opener.join(timeout=1)
        if process.poll() is not None and opener.is_alive():
            raise SystemExit(f"pack ended ({process.returncode}) before its spill was complete: {' '.join(pack)}")
    process.send_signal(signal.SIGKILL)
    process.wait()
    os.close(held[0])
    fifo.unlink()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("corpus", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--settle", type=float, default=5.0, help="seconds between the spill and the resumed run")
    parser.add_argument("--seq-len", default="2048")
    args = parser.parse_args()
    args.corpus, args.out = args.corpus.resolve(), args.out.resolve()  # the stopped run works in ROOT
    pack = pack_arguments(args.corpus, args.out, "bin", args.seq_len)
    stop_at_spilled(pack, args.out)
    os.sync()
    time.sleep(args.settle)

    from packcli.cli.app import app
    from packcli.core.flow import return_freed_memory
    from packcli.core.jit import own_process

    return_freed_memory()
    own_process()
    instrument()
    before = resource.getrusage(resource.RUSAGE_SELF)
    sys.argv = ["packcli", *pack, "--resume"]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), contextlib.suppress(SystemExit):
        app()
    after = resource.getrusage(resource.RUSAGE_SELF)
    stages = json.loads(printed.getvalue())["timings"]
    print("stages (s):", {name: round(seconds, 2) for name, seconds in stages.items()})
    user, system = after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime
    print(f"process: user {user:.2f} s, system {system:.2f} s")
    for name, (cpu, system_part, calls) in spent.items():
        print(f"  {name:40s} {cpu:6.2f} s CPU, {system_part:5.2f} s of it system, {calls} calls")


if __name__ == "__main__":
    main()
