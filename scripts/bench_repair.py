"""Rows and cost of the repair pass (improve_rows) after ffd, bfd, spfhp and lpfhp.

    python scripts/bench_repair.py [--tokenizer /tmp/qwen-tok] [--from-output DIR ...] [--rounds 3] [--quick]

Real segment lengths: GSM8K (question + "\\n" + answer, train and test) and the FastChat
sample conversations from ../shared/data, packed with `packcli pack --format npy` at
--seq-len 512 and 1024; and, with --from-output, any `pack --format npy` output (the text
corpus of bench_spill.py: `packcli pack corpus.jsonl --tokenizer /tmp/qwen-tok --seq-len
2048 --format npy -o DIR`). The lengths are read back from each row's cu_seqlens, the
trailing padding segment dropped. Synthetic: lognormal, bimodal and uniform lengths.

For each set and packer: rows of the packer, rows after the pass, the lower bound
ceil(tokens / seq_len) and Martello-Toth L2, the rows over the first as a ratio (target for real corpora: +0.01% at
most), the packer's rows with room, the smallest budget per sequence (1, 2, 4, ... 64) that
reaches the same rows, and the CPU time of the pass alone (best of --rounds, after a
warm-up call).
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
DATA = Path("/work/shared/data")
ALGORITHMS = ("ffd", "bfd", "spfhp", "lpfhp")


def lengths_from_output(out: Path) -> tuple[np.ndarray, int]:
    """Segment lengths of a `pack --format npy` output and its seq_len."""
    manifest = json.loads((out / "manifest.json").read_text())
    seq_len = manifest["seq_len"]
    pieces = []
    for shard in manifest["shards"]:
        where = out / shard["path"]
        cu = np.load(where / "cu_seqlens.npy")
        offsets = np.load(where / "cu_seqlens_offsets.npy")
        counts = np.load(where / "num_segments.npy")
        for r in range(len(offsets) - 1):  # a row's segments, then its padding segment if any
            pieces.append(np.diff(cu[offsets[r] : offsets[r + 1]])[: counts[r]])
    return np.concatenate(pieces).astype(np.int64), int(seq_len)


def chat_corpus(tmp: Path) -> Path:
    records = []
    for name in ("gsm8k_train.jsonl", "gsm8k_test.jsonl"):
        for line in (DATA / name).open():
            record = json.loads(line)
            records.append({"text": record["question"] + "\n" + record["answer"]})
    for conversation in json.loads((DATA / "fastchat_dummy_conversation.json").read_text()):
        turns = conversation["conversations"]
        records.append({"text": "\n".join(t["from"] + ": " + t["value"] for t in turns)})
    corpus = tmp / "gsm8k-fastchat.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in records))
    return corpus


def packed_lengths(corpus: Path, tokenizer: str, seq_len: int, out: Path) -> tuple[np.ndarray, int]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    args = [sys.executable, "-m", "packcli", "pack", str(corpus), "--tokenizer", tokenizer]
    args += ["--seq-len", str(seq_len), "--format", "npy", "-o", str(out), "--overwrite", "--no-shuffle"]
    subprocess.run(args, env=env, check=True, stdout=subprocess.DEVNULL, cwd=ROOT)
    return lengths_from_output(out)


def synthetic(quick: bool) -> dict[str, tuple[np.ndarray, int]]:
    rng = np.random.default_rng(0)
    n = 200_000 if quick else 2_000_000
    half = n // 2
    bimodal = np.where(rng.random(half) < 0.3, rng.integers(1100, 2049, half), rng.integers(1, 200, half))
    return {
        f"lognormal {n:,} at 2048": (np.minimum(2048, rng.lognormal(5.5, 1.0, n).astype(np.int64) + 1), 2048),
        f"lognormal {n:,} at 8192": (np.minimum(8192, rng.lognormal(6.5, 1.2, n).astype(np.int64) + 1), 8192),
        f"bimodal {half:,} at 2048": (bimodal.astype(np.int64), 2048),
        f"uniform {half:,} at 512": (rng.integers(1, 513, half).astype(np.int64), 512),
    }


def work_needed(lengths: np.ndarray, placed, seq_len: int, rows: int) -> int | None:
    """The smallest power-of-two budget per sequence (without the default's constant) with
    which the pass reaches the rows of the default budget; None past the default's 64."""
    from packcli.plan.kernels.pack import improve_rows

    for per_sequence in (1, 2, 4, 8, 16, 32, 64):
        if improve_rows(lengths, placed, seq_len, budget=per_sequence * len(lengths)).n_rows == rows:
            return per_sequence
    return None


def measure(name: str, lengths: np.ndarray, seq_len: int, rounds: int, real: bool) -> list[dict]:
    from packcli.plan.kernels.pack import improve_rows, lower_bound_rows, martello_toth_l2, pack_lengths

    bound, l2 = lower_bound_rows(lengths, seq_len), martello_toth_l2(lengths, seq_len)
    results = []
    for algorithm in ALGORITHMS:
        placed = pack_lengths(lengths, seq_len, algorithm)
        improved = improve_rows(lengths, placed, seq_len)  # warm-up (and compile)
        best = float("inf")
        for _ in range(rounds):
            start = time.process_time()
            improve_rows(lengths, placed, seq_len)
            best = min(best, time.process_time() - start)
        over = improved.n_rows / bound - 1
        fills = np.bincount(placed.row, weights=lengths, minlength=placed.n_rows)
        results.append(
            {
                "set": name,
                "sequences": len(lengths),
                "algorithm": algorithm,
                "bound": bound,
                "l2_bound": l2,
                "packer_rows": placed.n_rows,
                "rows": improved.n_rows,
                "over_bound": f"+{over:.4%}",
                "packer_rows_with_room": int(np.count_nonzero(fills < seq_len)),
                "work_per_sequence_needed": work_needed(lengths, placed, seq_len, improved.n_rows),
                "pass_cpu_ms": round(best * 1000, 1),
                "target_met": (over <= 0.0001) if real else None,
            }
        )
        print(json.dumps(results[-1]), flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokenizer", default="/tmp/qwen-tok")
    parser.add_argument("--from-output", type=Path, action="append", default=[], help="a pack --format npy output")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="smaller synthetic sets")
    args = parser.parse_args()
    results = []
    for out in args.from_output:
        lengths, seq_len = lengths_from_output(out)
        results += measure(f"{out.name} at {seq_len}", lengths, seq_len, args.rounds, real=True)
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        corpus = chat_corpus(tmp)
        for seq_len in (512, 1024):
            lengths, _ = packed_lengths(corpus, args.tokenizer, seq_len, tmp / f"out-{seq_len}")
            results += measure(f"GSM8K + FastChat at {seq_len}", lengths, seq_len, args.rounds, real=True)
    for name, (lengths, seq_len) in synthetic(args.quick).items():
        results += measure(name, lengths, seq_len, args.rounds, real=False)
    missed = [r for r in results if r["target_met"] is False]
    print(
        f"target (real corpora, rows <= +0.01% over the bound): {'met' if not missed else f'missed in {len(missed)}'}"
    )


if __name__ == "__main__":
    main()
