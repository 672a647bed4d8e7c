"""Packing preference pairs against packing the same texts as SFT records, and the rows
pairs take against the fewest rows whole pairs can fit in.

    python scripts/bench_pairs.py --tokenizer bench-out/qwen-tokenizer [--repeats 3] [--scales 1,4] [--quick]

Input: GSM8K's training set (../shared/data/gsm8k_train.jsonl, never a test dependency):
each record a pair, `prompt` the question, `chosen` the answer, `rejected` the answer
perturbed here (with a seed: one number of its working changed, its final answer off by
one), so no pair has equal sides. At scale 4 every record is taken four times, each
copy's rejected answer perturbed afresh. The SFT baseline is the same texts as prompt /
completion records, two per pair (prompt + chosen, prompt + rejected): the same tokens,
tokenized and packed by `pack` as SFT.

Every run is `packcli pack ... --json` in a subprocess of its own (--seq-len 2048, Parquet
shards, the default workers), pairs and SFT alternating, `--repeats` times each; the
figure kept for each is the median of the report's `tokens_per_second` (tokens tokenized
over the run's time in the process: reading, tokenizing, spilling, planning and writing)
and of the process's wall time. Printed per scale: both tokens/s and their ratio (target:
pairs at least 0.85x SFT), and the pairs' rows against the lower bound for whole pairs
(the larger of ceil(tokens / seq_len) and Martello and Toth's L2 bound on the pairs'
lengths; target: within 1%), with the rows of `--mode concat` (next fit over the pairs).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent.parent / "shared" / "data" / "gsm8k_train.jsonl"
if not DATA.exists():
    DATA = ROOT.parent / "shared" / "data" / "gsm8k_train.jsonl"
SEQ_LEN = 2048
NUMBER = re.compile(r"\d+")


def perturbed(answer: str, rng: np.random.Generator) -> str:
    """The answer with one number of its working changed and its final answer off by one."""
    working, _, final = answer.rpartition("#### ")
    numbers = list(NUMBER.finditer(working))
    if numbers:
        hit = numbers[int(rng.integers(len(numbers)))]
        working = working[: hit.start()] + str(int(hit.group()) + int(rng.integers(1, 9))) + working[hit.end() :]
    final = final.strip()
    wrong = str(int(final.replace(",", "")) + 1) if final.replace(",", "").lstrip("-").isdigit() else final + "0"
    return f"{working}#### {wrong}"


def build_inputs(work: Path, scale: int, seed: int = 0) -> tuple[Path, Path]:
    """pairs.jsonl and sft.jsonl of `scale` copies of GSM8K (built once, reused)."""
    pairs, sft = work / f"pairs-{scale}x.jsonl", work / f"sft-{scale}x.jsonl"
    if pairs.exists() and sft.exists():
        return pairs, sft
    rng = np.random.default_rng(seed)
    records = [json.loads(line) for line in DATA.read_text(encoding="utf-8").splitlines() if line.strip()]
    with open(pairs, "w", encoding="utf-8") as p, open(sft, "w", encoding="utf-8") as s:
        for _ in range(scale):
            for record in records:
                rejected = perturbed(record["answer"], rng)
                p.write(
                    json.dumps({"prompt": record["question"], "chosen": record["answer"], "rejected": rejected}) + "\n"
                )
                for completion in (record["answer"], rejected):
                    s.write(json.dumps({"prompt": record["question"], "completion": completion}) + "\n")
    return pairs, sft


def pack(inputs: Path, out: Path, tokenizer: str, *options: str) -> tuple[dict, float]:
    command = [sys.executable, "-m", "packcli", "pack", str(inputs), "-o", str(out), "--overwrite"]
    command += ["--tokenizer", tokenizer, "--seq-len", str(SEQ_LEN), "--json", *options]
    started = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - started
    if result.returncode:
        raise SystemExit(f"{' '.join(command)} failed:\n{result.stderr}")
    return json.loads(result.stdout), wall


def pair_lengths(out: Path) -> np.ndarray:
    """Each pair's two segments' real tokens, read back from the shards."""
    sys.path.insert(0, str(ROOT))
    from packcli.write.manifest import load_manifest
    from packcli.write.shard_reader import iter_output_rows

    lengths = []
    for _, rows in iter_output_rows(out, load_manifest(out)):
        unpadded = rows.cu_seqlens
        for r in range(len(rows)):
            cu = unpadded[rows.cu_offsets[r] : rows.cu_offsets[r + 1]]
            sides = np.diff(cu)[: int(rows.num_segments[r])]
            lengths.append(sides[0::2] + sides[1::2])
    return np.concatenate(lengths)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokenizer", required=True)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--scales", default="1,4")
    parser.add_argument("--workdir", type=Path, help="where inputs and outputs go (default: a temporary directory)")
    parser.add_argument("--quick", action="store_true", help="scale 1, one run each: a smoke run")
    args = parser.parse_args()
    if args.quick:
        args.scales, args.repeats = "1", 1
    sys.path.insert(0, str(ROOT))
    from packcli.plan.kernels.pack import martello_toth_l2

    pair_fields = ("--prompt-field", "prompt", "--chosen-field", "chosen", "--rejected-field", "rejected")
    sft_fields = ("--prompt-field", "prompt", "--completion-field", "completion")
    with tempfile.TemporaryDirectory(prefix="bench-pairs-") as tmp:
        work = args.workdir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        print(f"GSM8K ({DATA.name}) as preference pairs, --seq-len {SEQ_LEN}, medians of {args.repeats} runs each")
        for scale in (int(s) for s in args.scales.split(",")):
            pairs_in, sft_in = build_inputs(work, scale)
            runs: dict[str, list[tuple[dict, float]]] = {"pairs": [], "sft": []}
            for _ in range(args.repeats):  # alternating, so both see the same machine
                runs["pairs"].append(pack(pairs_in, work / "pairs-out", args.tokenizer, *pair_fields))
                runs["sft"].append(pack(sft_in, work / "sft-out", args.tokenizer, *sft_fields))
            speed = {k: statistics.median(r["tokens_per_second"] for r, _ in v) for k, v in runs.items()}
            wall = {k: statistics.median(w for _, w in v) for k, v in runs.items()}
            report = runs["pairs"][-1][0]
            sft_report = runs["sft"][-1][0]
            assert report["tokens_read"] == sft_report["tokens_read"], "the same texts, the same tokens"
            units = pair_lengths(work / "pairs-out")
            bound = max(-(-int(units.sum()) // SEQ_LEN), int(martello_toth_l2(units, SEQ_LEN)))
            concat, _ = pack(pairs_in, work / "concat-out", args.tokenizer, *pair_fields, "--mode", "concat")
            print(f"\nscale {scale}x: {report['pairs']['pairs']:,} pairs, {report['tokens_read']:,} tokens")
            print(
                f"  tokens/s   pairs {speed['pairs']:>12,.0f}   SFT {speed['sft']:>12,.0f}   "
                f"ratio {speed['pairs'] / speed['sft']:.3f} (target >= 0.85)"
            )
            print(
                f"  wall       pairs {wall['pairs']:>11.2f}s   SFT {wall['sft']:>11.2f}s   "
                f"ratio {wall['sft'] / wall['pairs']:.3f} (SFT time / pairs time)"
            )
            print(
                f"  rows       bfd {report['rows']:,}, lower bound for whole pairs {bound:,} "
                f"({report['rows'] / bound - 1:+.3%}, target within 1%); efficiency {report['efficiency']:.2%}; "
                f"concat (next fit) {concat['rows']:,}; SFT records {sft_report['rows']:,}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
