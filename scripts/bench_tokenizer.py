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

`--hf-limit` measures `packcli pack --tokenizer-backend hf` end to end (a subprocess, its
wall time: interpreter start-up, tokenizer loading, reading, writing) against the HF limit,
`encode_batch_fast` alone over the same texts in batches of 1024 on all cores (start-up
and reading not counted), on the 151k byte-level BPE and on a SentencePiece-style Unigram
tokenizer trained here with `tokenizers`. Rounds interleave the two; best of `--repeats`.
CPU seconds (all processes) are printed too: on a shared machine they are the steadier figure.
The same rounds time what the hf run must do besides encoding and cannot overlap with it:
loading the tokenizer, and planning and writing after the last token (on `pack --ids-field`
of the same ids, whose shards must equal the hf run's); "ceiling" is the limit over the
limit plus that work, the best ratio an hf run could reach on this machine.
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

from packcli.tokenize import fastbpe  # noqa: E402
from packcli.tokenize.tokenizer import BUNDLED_NAME, encode_texts, load_tokenizer  # noqa: E402

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
    from packcli.engine.local import PackOptions, run_pack

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


def unigram_tokenizer(path: Path, texts: list[str], vocab_size: int = 16_000) -> Path:
    """A SentencePiece-style tokenizer (Unigram, NFKC, Metaspace) trained on the texts."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    trainer = trainers.UnigramTrainer(
        vocab_size=vocab_size, special_tokens=["<pad>", "</s>", "<unk>"], unk_token="<unk>"
    )
    tok.train_from_iterator(texts, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="</s>", pad_token="<pad>", unk_token="<unk>")
    fast.save_pretrained(str(path))
    return path


def children_cpu() -> float:
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def hf_limit(spec: str, corpus: Path) -> tuple[float, float, int]:
    """(wall, cpu seconds, tokens) of encode_batch_fast alone, in a fresh subprocess."""
    import subprocess

    script = (
        "import json, resource, sys, time\n"
        "from packcli.tokenize.tokenizer import load_tokenizer\n"
        "backend = load_tokenizer(sys.argv[1]).backend_tokenizer\n"
        "texts = [json.loads(line)['text'] for line in open(sys.argv[2], encoding='utf-8')]\n"
        f"batches = [texts[i : i + {BATCH}] for i in range(0, len(texts), {BATCH})]\n"
        "cpu = lambda: sum(resource.getrusage(resource.RUSAGE_SELF)[:2])\n"
        "c, t = cpu(), time.perf_counter()\n"
        "n = sum(sum(map(len, backend.encode_batch_fast(b, add_special_tokens=False))) for b in batches)\n"
        "print(json.dumps([time.perf_counter() - t, cpu() - c, n]))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", script, spec, str(corpus)], env=env, check=True, capture_output=True)
    wall, cpu, tokens = json.loads(out.stdout)
    return wall, cpu, tokens


def ids_corpus(spec: str, corpus: Path, path: Path) -> Path:
    """The corpus's documents as the HF tokenizer's ids (Parquet, column `ids`), encoded
    once here as the hf backend encodes (special-token strings as text) and not timed:
    `pack --ids-field ids` of it writes the shards the hf backend writes from the text,
    with no tokenizer call."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    tokenizer = load_tokenizer(spec)
    texts = [json.loads(line)["text"] for line in corpus.open(encoding="utf-8")]
    flat, lengths = [], []
    for i in range(0, len(texts), BATCH):
        ids, counts = encode_texts(tokenizer, texts[i : i + BATCH])
        flat.append(ids)
        lengths.append(counts)
    offsets = np.concatenate([[0], np.cumsum(np.concatenate(lengths))]).astype(np.int32)
    column = pa.ListArray.from_arrays(pa.array(offsets), pa.array(np.concatenate(flat), type=pa.int32()))
    pq.write_table(pa.table({"ids": column}), path)
    return path


def load_seconds(spec: str) -> float:
    """Seconds to load the HF tokenizer (as the hf backend does), in a fresh subprocess."""
    import subprocess

    script = (
        "import json, sys, time\n"
        "from packcli.tokenize.tokenizer import load_tokenizer\n"
        "t = time.perf_counter()\n"
        "load_tokenizer(sys.argv[1])\n"
        "print(json.dumps(time.perf_counter() - t))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", script, spec], env=env, check=True, capture_output=True)
    return float(json.loads(out.stdout))


def bench_hf_backend(spec: str, corpus: Path, repeats: int, workdir: Path) -> dict:
    """packcli pack --tokenizer-backend hf, end to end, against the HF limit, interleaved.

    Beside them, the work the hf run must do besides encoding that cannot overlap it: load
    the tokenizer (before the first token) and, after the last token, plan and write (one
    plan over every length), timed on `pack --ids-field` of the same ids, whose shards must
    be the hf run's (checked); its start-up is its wall time less the report's total. The
    ceiling, limit / (limit + that work), is the best ratio any hf run could reach here."""
    import subprocess

    env = {**os.environ, "PYTHONPATH": str(ROOT), "PACKCLI_CACHE_DIR": str(workdir / "cache")}
    common = ["--tokenizer", spec, "--seq-len", "2048", "--overwrite", "--json"]
    cmd = [sys.executable, "-m", "packcli", "pack", str(corpus), "-o", str(workdir / "out"), *common]
    cmd += ["--tokenizer-backend", "hf"]
    ids_path = ids_corpus(spec, corpus, workdir / "ids.parquet")
    ids_cmd = [
        sys.executable,
        "-m",
        "packcli",
        "pack",
        str(ids_path),
        "--ids-field",
        "ids",
        "-o",
        str(workdir / "out-ids"),
        *common,
    ]
    best = {"limit": (float("inf"), 0.0), "pack": (float("inf"), 0.0)}
    fixed = {"load": float("inf"), "start-up": float("inf"), "plan": float("inf"), "write": float("inf")}
    tokens = 0
    for _ in range(repeats):
        wall, cpu, tokens = hf_limit(spec, corpus)
        best["limit"] = min(best["limit"], (wall, cpu))
        cpu0, start = children_cpu(), time.perf_counter()
        report = json.loads(subprocess.run(cmd, env=env, check=True, capture_output=True).stdout)
        best["pack"] = min(best["pack"], (time.perf_counter() - start, children_cpu() - cpu0))
        fixed["load"] = min(fixed["load"], load_seconds(spec))
        start = time.perf_counter()
        ids_report = json.loads(subprocess.run(ids_cmd, env=env, check=True, capture_output=True).stdout)
        timings = ids_report["timings"]
        fixed["start-up"] = min(fixed["start-up"], time.perf_counter() - start - timings["total"])
        fixed["plan"] = min(fixed["plan"], timings["plan"])
        fixed["write"] = min(fixed["write"], timings["write"])
    checksums = [
        [s["checksum"] for s in json.loads((workdir / out / "manifest.json").read_text())["shards"]]
        for out in ("out", "out-ids")
    ]
    return {
        "tokens": tokens,
        "limit_s": best["limit"][0],
        "pack_s": best["pack"][0],
        "ratio": best["limit"][0] / best["pack"][0],
        "limit_cpu": best["limit"][1],
        "pack_cpu": best["pack"][1],
        "workers": report["workers"],
        "fixed": fixed,
        "ceiling": best["limit"][0] / (best["limit"][0] + sum(fixed.values())),
        "same_shards": checksums[0] == checksums[1],
    }


def hf_backend_table(args, texts: dict[str, list[str]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        docs = texts["python-src"]
        corpus = work / "corpus.jsonl"
        corpus.write_text("".join(json.dumps({"text": t}) + "\n" for t in docs), encoding="utf-8")
        tokenizers = {"unigram (16k, trained here)": str(unigram_tokenizer(work / "unigram", docs[: len(docs) // 4]))}
        if Path(args.qwen).is_dir():
            tokenizers = {"qwen (151k BPE)": args.qwen, **tokenizers}
        print(
            "| tokenizer | corpus tokens | HF limit | `pack --tokenizer-backend hf` | pack / limit (tokens/s) "
            "| CPU s limit / pack | workers | load + start-up + plan + write | ceiling | same shards |"
        )
        print("|---|---:|---:|---:|---:|---:|---|---|---:|---|")
        for name, spec in tokenizers.items():
            r = bench_hf_backend(spec, corpus, args.repeats, work)
            fixed = " + ".join(f"{r['fixed'][k]:.2f}" for k in ("load", "start-up", "plan", "write"))
            print(
                f"| {name} | {r['tokens']:,} | {r['limit_s']:.2f} s | {r['pack_s']:.2f} s | **{r['ratio']:.2f}x** "
                f"| {r['limit_cpu']:.1f} / {r['pack_cpu']:.1f} | {r['workers']['kind']} x{r['workers']['count']} "
                f"| {fixed} s | {r['ceiling']:.2f}x | {'yes' if r['same_shards'] else 'NO'} |",
                flush=True,
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    root = Path(__file__).resolve().parent.parent
    parser.add_argument("--qwen", default=str(root / "bench-out" / "qwen-tokenizer"))
    parser.add_argument("--data", default=str(root.parent / "shared" / "data"))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--python-chars", type=int, default=3_000_000)
    parser.add_argument("--hf-limit", action="store_true", help="only the hf backend against the HF limit")
    args = parser.parse_args()
    if args.hf_limit:
        hf_backend_table(args, corpora(Path(args.data), args.python_chars))
        return

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
            f"# {name}: make_encoder {cold:.2f} s with an empty cache (conversion and identity check), "
            f"{warm:.2f} s from the start-up cache (the check's verdict cached too)"
        )


if __name__ == "__main__":
    main()
