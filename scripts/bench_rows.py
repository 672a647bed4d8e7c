"""Row order, padded rows and the cost of the row columns, measured on real data.

    python scripts/bench_rows.py [--tokenizer /tmp/qwen-tok] [--rounds 3] [--before ../main] [--parts order,padded,throughput]

1. Row order: a corpus of GSM8K (question + "\\n" + answer) and this repository's own
   source and documentation files, packed as plain text at --seq-len 2048 with the default
   order and with --no-shuffle; the Spearman rank correlation between row index and
   sequences per row (|rho| < 0.05 is the target for the default order, whose rows are
   permuted by packcli/permute.py's seeded bijection).
2. --pad-to-multiple-of 8 on GSM8K prompt/completion at --seq-len 2048: the rows against
   packcli's planner (bfd and its repair pass) over the padded lengths, called on its own
   (no more than +0.01%).
3. Throughput: `packcli pack` on GSM8K prompt/completion (repeated to --repeat copies),
   CPU time (user + system, with the workers) per configuration, best of --rounds
   interleaved rounds, as a ratio to the packcli checkout given by --before (the code
   before the row columns) in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = Path("/work/shared/data/gsm8k_train.jsonl")


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    def ranks(a: np.ndarray) -> np.ndarray:
        _, inverse = np.unique(a, return_inverse=True)
        position = np.empty(len(a))
        position[np.argsort(a, kind="stable")] = np.arange(len(a))
        return (np.bincount(inverse, weights=position) / np.bincount(inverse))[inverse]

    return float(np.corrcoef(ranks(x), ranks(y))[0, 1])


def pack(code: Path, inputs: list[Path], out: Path, *options: object) -> float:
    """CPU seconds (user + system, the run and its workers) of one `packcli pack`: on a
    shared machine the wall time measures the neighbours as much as the run."""
    env = {**os.environ, "PYTHONPATH": str(code)}
    args = [sys.executable, "-m", "packcli", "pack", *map(str, inputs), "-o", str(out), "--overwrite", "--json"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([*args, *map(str, options)], env=env, check=True, stdout=subprocess.DEVNULL, cwd=code)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def column(out: Path, name: str) -> np.ndarray:
    import pyarrow.parquet as pq

    manifest = json.loads((out / "manifest.json").read_text())
    parts = [pq.read_table(out / s["path"], columns=[name]).column(name) for s in manifest["shards"]]
    return np.concatenate([np.asarray(p.combine_chunks().to_pylist(), dtype=object) for p in parts])


def row_order(tmp: Path, tokenizer: str) -> dict:
    records = [{"text": r["question"] + "\n" + r["answer"]} for r in map(json.loads, DATA.open())]
    files = sorted(
        p for d in ("packcli", "tests", "docs", "scripts") for p in (ROOT / d).rglob("*") if p.suffix in (".py", ".md")
    )
    records += [{"text": p.read_text(encoding="utf-8")} for p in files]
    corpus = tmp / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in records))
    figures = {"documents": len(records), "source_files": len(files)}
    for name, options in (("default", ()), ("no_shuffle", ("--no-shuffle",))):
        out = tmp / f"order-{name}"
        pack(ROOT, [corpus], out, "--tokenizer", tokenizer, "--seq-len", 2048, *options)
        segments = column(out, "num_segments").astype(np.int64)
        figures[name] = {"rows": len(segments), "spearman": spearman(np.arange(len(segments)), segments)}
    figures["default_under_0.05"] = abs(figures["default"]["spearman"]) < 0.05
    return figures


def padded_rows(tmp: Path, tokenizer: str) -> dict:
    from packcli.plan.kernels.pack import plan_lengths  # this checkout's planner
    from packcli.plan.rows import padded_lengths

    out = tmp / "padded"
    sft = ("--prompt-field", "question", "--completion-field", "answer", "--seq-len", 2048)
    pack(ROOT, [DATA], out, "--tokenizer", tokenizer, *sft, "--pad-to-multiple-of", 8)
    unpadded = column(out, "cu_seqlens_unpadded")
    counts = column(out, "num_segments").astype(np.int64)
    lengths = np.concatenate([np.diff(np.asarray(u, dtype=np.int64))[:k] for u, k in zip(unpadded, counts)])
    bfd = plan_lengths(padded_lengths(lengths, 8), 2048, algorithm="bfd").n_rows
    report = json.loads((out / "report.json").read_text())
    return {
        "rows": report["rows"],
        "planner_rows_of_padded_lengths": int(bfd),
        "ratio": report["rows"] / bfd,
        "efficiency": report["efficiency"],
        "sequences": len(lengths),
    }


def throughput(tmp: Path, tokenizer: str, before: Path, rounds: int, repeat: int) -> dict:
    corpus = tmp / "gsm8k-x.jsonl"
    corpus.write_text(DATA.read_text() * repeat)
    sft = ("--tokenizer", tokenizer, "--prompt-field", "question", "--completion-field", "answer", "--seq-len", 2048)
    configs = {
        "before": (before, ()),
        "after (default: shuffled, max_seqlen)": (ROOT, ()),
        "after --no-shuffle": (ROOT, ("--no-shuffle",)),
        "after --pad-to-multiple-of 8": (ROOT, ("--pad-to-multiple-of", 8)),
    }
    best = {name: float("inf") for name in configs}
    for _ in range(rounds):
        for name, (code, options) in configs.items():
            best[name] = min(best[name], pack(code, [corpus], tmp / "speed", *sft, *options))
    tokens = json.loads((tmp / "speed" / "report.json").read_text())["tokens_read"]
    return {
        name: {"cpu_seconds": round(t, 3), "ratio_to_before": round(best["before"] / t, 4)} for name, t in best.items()
    } | {"tokens": tokens}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokenizer", default="/tmp/qwen-tok")
    parser.add_argument("--before", type=Path, help="an older checkout (needed by the throughput part)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=4)
    parser.add_argument("--parts", default="order,padded,throughput", help="which measurements, comma-separated")
    args = parser.parse_args()
    parts = args.parts.split(",")
    if "throughput" in parts and args.before is None:
        parser.error("the throughput part needs --before CHECKOUT")
    result = {}
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        if "order" in parts:
            result["row_order"] = row_order(tmp, args.tokenizer)
        if "padded" in parts:
            result["padded_rows"] = padded_rows(tmp, args.tokenizer)
        if "throughput" in parts:
            result["throughput"] = throughput(tmp, args.tokenizer, args.before, args.rounds, args.repeat)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
