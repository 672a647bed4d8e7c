"""Benchmark: the tiktoken fast path against the Hugging Face `encode_batch_fast` baseline.

Both are timed in the same run, on the same corpus, batches and cores, best of
`--repeats`, and printed as a ratio (machines are noisy; absolute figures are not
comparable across runs). Every corpus is also checked for identical ids on the whole
corpus, not just a sample. Not a test: it needs the real corpora.

    python scripts/bench_tokenizer.py [--qwen bench-out/qwen-tokenizer] [--data ../shared/data] [--repeats 3]

Tokenizers: the bundled one (packcli:demo) and, if the directory exists, a real 151k Qwen
vocabulary (build it with scripts/make_bench_tokenizer.py). Corpora: GSM8K train
(question + answer), FastChat dummy conversations (turns joined) and Python source files
from this interpreter's site-packages.

The end-to-end run is measured as well: `packcli pack` tokens/s with `auto` over `hf`,
and whether the shards are byte-identical.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from packcli import fastbpe  # noqa: E402
from packcli.tokenizing import BUNDLED_NAME, encode_texts, load_tokenizer  # noqa: E402

BATCH = 1024  # what the pipeline reads at a time


def corpora(data: Path, python_chars: int) -> dict[str, list[str]]:
    out = {}
    gsm8k = data / "gsm8k_train.jsonl"
    if gsm8k.is_file():
        rows = [json.loads(line) for line in gsm8k.read_text(encoding="utf-8").splitlines() if line.strip()]
        out["gsm8k"] = [r["question"] + "\n" + r["answer"] for r in rows]
    chat = data / "fastchat_dummy_conversation.json"
    if chat.is_file():
        convs = json.loads(chat.read_text(encoding="utf-8"))
        out["fastchat"] = ["\n".join(turn["value"] for turn in c["conversations"]) for c in convs]
    site = Path(np.__file__).resolve().parents[1]
    texts, total = [], 0
    for path in sorted(site.rglob("*.py")):
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        if text:
            texts.append(text)
            total += len(text)
        if total >= python_chars:
            break
    out["python-src"] = texts
    return out


def batches(texts: list[str]):
    return [texts[i : i + BATCH] for i in range(0, len(texts), BATCH)]


def best_time(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def bench_encode(tokenizer, encoder, texts: list[str], repeats: int) -> dict:
    parts = batches(texts)
    hf_out = [encode_texts(tokenizer, b) for b in parts]
    fast_out = [encoder.encode_batch(b) for b in parts]
    identical = all(np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1]) for a, b in zip(hf_out, fast_out))
    tokens = int(sum(len(a[0]) for a in hf_out))
    hf = best_time(lambda: [encode_texts(tokenizer, b) for b in parts], repeats)
    fast = best_time(lambda: [encoder.encode_batch(b) for b in parts], repeats)
    return {
        "docs": len(texts),
        "tokens": tokens,
        "hf_s": hf,
        "fast_s": fast,
        "ratio": hf / fast,
        "identical": identical,
    }


def bench_pack(spec: str, corpus: list[str], repeats: int, workdir: Path) -> dict | None:
    from packcli.pipeline import PackOptions, run_pack

    if "tokenizer_backend" not in PackOptions.__dataclass_fields__:
        return None
    src = workdir / "corpus.jsonl"
    with open(src, "w", encoding="utf-8") as f:
        for text in corpus:
            f.write(json.dumps({"text": text}) + "\n")
    results = {}
    for backend in ("hf", "auto"):
        best, report = 0.0, None
        for _ in range(repeats):
            out = workdir / f"out-{backend}"
            opts = PackOptions(
                inputs=[str(src)],
                output=str(out),
                tokenizer=spec,
                seq_len=2048,
                overwrite=True,
                tokenizer_backend=backend,
            )
            report = run_pack(opts)
            best = max(best, report["tokens_per_second"])
        manifest = json.loads((workdir / f"out-{backend}" / "manifest.json").read_text())
        results[backend] = {
            "tokens_per_second": best,
            "shards": [s["checksum"] for s in manifest["shards"]],
            "backend": report.get("tokenizer_backend"),
        }
    return {
        "ratio": results["auto"]["tokens_per_second"] / results["hf"]["tokens_per_second"],
        "identical_shards": results["auto"]["shards"] == results["hf"]["shards"],
        "auto_backend": results["auto"]["backend"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    root = Path(__file__).resolve().parent.parent
    parser.add_argument("--qwen", default=str(root / "bench-out" / "qwen-tokenizer"))
    parser.add_argument("--data", default=str(root.parent / "shared" / "data"))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--python-chars", type=int, default=3_000_000)
    args = parser.parse_args()

    tokenizers = {"bundled (1.3k BPE)": BUNDLED_NAME}
    if Path(args.qwen).is_dir():
        tokenizers["qwen (151k BPE)"] = args.qwen
    else:
        print(f"# {args.qwen} not found: build it with scripts/make_bench_tokenizer.py for the 151k-vocabulary rows")
    texts = corpora(Path(args.data), args.python_chars)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"# {cores} cores, best of {args.repeats}, batches of {BATCH} documents, ratio = HF time / tiktoken time")
    print()
    print("| tokenizer | corpus | docs | tokens | HF encode_batch_fast | tiktoken path | speed-up | ids identical |")
    print("|---|---|---:|---:|---:|---:|---:|---|")
    pack_rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, spec in tokenizers.items():
            tokenizer = load_tokenizer(spec)
            cache = Path(tmp) / "cache"
            start = time.perf_counter()
            encoder = fastbpe.make_encoder(tokenizer, "tiktoken", cache_dir=cache)
            cold = time.perf_counter() - start
            start = time.perf_counter()
            encoder = fastbpe.make_encoder(tokenizer, "tiktoken", cache_dir=cache)
            warm = time.perf_counter() - start
            for corpus, docs in texts.items():
                r = bench_encode(tokenizer, encoder, docs, args.repeats)
                print(
                    f"| {name} | {corpus} | {r['docs']:,} | {r['tokens']:,} | {r['hf_s']:.2f} s | {r['fast_s']:.2f} s "
                    f"| **{r['ratio']:.2f}x** | {'yes' if r['identical'] else 'NO'} |"
                )
            pack_rows.append((name, cold, warm))
            for corpus in ("python-src",):
                with tempfile.TemporaryDirectory() as work:
                    result = bench_pack(spec, texts[corpus], args.repeats, Path(work))
                if result is None:
                    continue
                print(
                    f"| {name} | `packcli pack` {corpus} | | | | | **{result['ratio']:.2f}x** tokens/s "
                    f"(auto ran {result['auto_backend']}) | shards identical: {'yes' if result['identical_shards'] else 'NO'} |"
                )
    print()
    for name, cold, warm in pack_rows:
        print(
            f"# {name}: make_encoder {cold:.2f} s with an empty cache, {warm:.2f} s from the cache "
            "(both include the hard-string identity check)"
        )


if __name__ == "__main__":
    main()
