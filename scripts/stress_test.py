"""Run the suite several times in a row while busy loops load every core: a test that
passes only on an idle machine (one that races a process or the clock) fails here.

    python scripts/stress_test.py                      # `make test` 5 times, one busy loop per core
    python scripts/stress_test.py --runs 1 --command ".venv/bin/python -m pytest -q tests/test_interrupts.py"

The busy loops (`python -c 'while 1: pass'`) start before the first run and are ended,
by their process ids, after the last one, also when the script is stopped. It prints
each run's result and time, then how many passed; the exit code is 0 only if all did.
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import subprocess
import sys
import time


def start_load(count: int) -> list[subprocess.Popen]:
    return [
        subprocess.Popen([sys.executable, "-c", "while 1: pass"], stdin=subprocess.DEVNULL, start_new_session=True)
        for _ in range(count)
    ]


def stop_load(loaders: list[subprocess.Popen]) -> None:
    for loader in loaders:
        if loader.poll() is None:
            loader.kill()
    for loader in loaders:
        loader.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="how many times to run the command (default 5)")
    parser.add_argument("--load", type=int, default=os.cpu_count() or 1, help="busy loops (default: one per core)")
    parser.add_argument("--command", default="make test", help="what to run each time (default: make test)")
    args = parser.parse_args(argv)
    command = shlex.split(args.command)

    loaders = start_load(args.load)
    print(f"load: {len(loaders)} busy loop(s), pids {' '.join(str(p.pid) for p in loaders)}", flush=True)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))  # ends through the finally below
    passed = 0
    try:
        for run in range(1, args.runs + 1):
            began = time.perf_counter()
            result = subprocess.run(command, stdin=subprocess.DEVNULL)
            seconds = time.perf_counter() - began
            verdict = "passed" if result.returncode == 0 else f"FAILED (exit {result.returncode})"
            passed += result.returncode == 0
            print(f"run {run} of {args.runs}: {verdict} in {seconds:.0f} s", flush=True)
    finally:
        stop_load(loaders)
        print(f"load stopped; {passed} of {args.runs} runs passed: {args.command}", flush=True)
    return 0 if passed == args.runs else 1


if __name__ == "__main__":
    sys.exit(main())
