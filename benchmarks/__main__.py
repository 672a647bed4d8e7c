"""Run benchmarks: alone, as ratios to baselines of the same run, or against a commit.

    python -m benchmarks [NAME ...] [--quick] [--tokenizer DIR] [--data DIR] [--out bench-out]
    python -m benchmarks [NAME ...] --ref COMMIT        # the working tree against COMMIT

Run it with the project's environment (`.venv/bin/python`): its packcli is the working
tree's. docs/benchmarks.md has the benchmarks and what each measures.
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

from benchmarks.data import BUNDLED, ROOT, Inputs
from benchmarks.programs import BenchError, commit_program, working_tree
from benchmarks.runner import Runner
from benchmarks.suite import BENCHMARKS, Context


def shared_data() -> Path:
    """The shared corpora: ../shared/data beside the checkout, or beside its worktree folder."""
    for base in (ROOT.parent, ROOT.parent.parent):
        if (base / "shared" / "data").is_dir():
            return base / "shared" / "data"
    return ROOT.parent / "shared" / "data"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # a stopped run ends the command it measures (the runner kills its process group)
    signal.signal(signal.SIGTERM, lambda number, frame: sys.exit(128 + number))
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="benchmarks to run, by name or comma-separated (default: all)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: tiny inputs, one round, no warm-up run")
    parser.add_argument("--ref", help="compare the working tree with this commit (installed under OUT/envs)")
    parser.add_argument("--tokenizer", help="default: OUT/qwen-tokenizer if built, else packcli:demo")
    parser.add_argument("--data", type=Path, default=shared_data(), help="the real corpora (gsm8k_train.jsonl, ...)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench-out")
    parser.add_argument("--repeats", type=int, help="rounds (default: each benchmark's own; 1 with --quick)")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every input size (not with --quick)")
    parser.add_argument("--list", action="store_true", help="print the benchmarks' names and stop")
    args = parser.parse_args(argv)
    if args.list:
        for name, function in BENCHMARKS.items():
            print(f"{name:12} {(function.__doc__ or '').split(chr(10))[0]}")
        return 0
    names = [n for part in args.names for n in part.split(",") if n] or list(BENCHMARKS)
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        parser.error(f"no benchmark {', '.join(unknown)} (known: {', '.join(BENCHMARKS)})")
    out = args.out.resolve()
    qwen = out / "qwen-tokenizer"
    tokenizer = args.tokenizer or (str(qwen) if (qwen / "tokenizer.json").is_file() else BUNDLED)
    if tokenizer != BUNDLED:
        tokenizer = str(Path(tokenizer).resolve())
    try:
        programs = [working_tree("new")]
        if args.ref:
            programs.append(commit_program(args.ref, out / "envs", "old"))
    except BenchError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    inputs = Inputs(args.data.resolve(), tokenizer, out / "inputs", 300_000 if args.quick else 4_000_000)
    context = Context(args.quick, tokenizer, inputs, out / "work", args.scale)
    runner = Runner(programs, out / "work", out / "records", warmup=not args.quick)
    for program in programs:
        print(f"{program.label}: {program.commit} ({program.prefix})")
    print(f"tokenizer {tokenizer}; data {args.data}{'; --quick' if args.quick else ''}", flush=True)
    failed = []
    for name in names:
        try:
            bench = BENCHMARKS[name](context)
        except (FileNotFoundError, BenchError) as error:
            print(f"\n## {name}: not run: {error}", flush=True)
            failed.append(name)
            continue
        record = runner.run(
            bench, 1 if args.quick and not args.repeats else args.repeats, ["python -m benchmarks", *argv]
        )
        if any(
            got["reason"] is not None and not got["not_applicable"]
            for case in record["cases"].values()
            for label, got in case["programs"].items()
            if label == programs[0].label
        ):
            failed.append(name)
    if failed:
        print(f"\nfailed or not run: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
