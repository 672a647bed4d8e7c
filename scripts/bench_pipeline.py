"""Benchmark `packcli pack` end to end (issue 6): tokens/s against the tokenizer alone, peak RSS,
scaling over workers, and the `datasets` / TRL recipes, all measured side by side in one run.

    python scripts/bench_pipeline.py                    # 50M tokens, 3 rounds (about an hour on 2 cores)
    python scripts/bench_pipeline.py --quick            # ~2M tokens, 1 round, a smoke run of a few minutes
    python scripts/bench_pipeline.py --tokens 20M --repeats 2 --no-baselines

Corpus (built in a temporary directory, never in the repo): GSM8K train (question + "\\n" +
answer), the FastChat conversations (turns joined with "\\n") and Python source files from
this interpreter's site-packages (long documents), shuffled with a fixed seed and repeated
until the corpus holds `--tokens` tokens of the tokenizer. Written as JSONL; the memory
check also packs a quarter of it (N and 4N tokens).

Tokenizer: a real 151k-vocabulary Qwen tokenizer directory (`--tokenizer`, default
/tmp/qwen-tok, built with scripts/make_bench_tokenizer.py if missing).

Every configuration runs as its own subprocess. tokens/s is the corpus's text tokens
(the same number for every configuration, EOS not counted) divided by the wall time
measured around the subprocess, interpreter start-up and tokenizer loading included.
Peak RSS is the larger of the child's `ru_maxrss` (from `os.wait4`) and the sum of the
RSS of the child and all its descendants, sampled every 50 ms (the `datasets` recipes
run worker processes; `ru_maxrss` only gives the largest single process).

The machine may be shared, so every figure is a ratio to a baseline of the same run: the
configurations run interleaved in rounds (limit, packcli..., baselines, limit, ...) and
each takes its best (shortest) wall time over the rounds; RSS is the largest seen.

- limit: a subprocess loads the same tokenizer, reads and json-parses the whole corpus
  first (not timed, reported apart), then times `backend_tokenizer.encode_batch_fast`
  over batches of 1024 texts, all cores (`limit, 1 thread`: RAYON_NUM_THREADS=1). Its
  tokens/s is counted from the encode loop alone, without start-up, which favours it.
- packcli: `python -m packcli pack CORPUS --tokenizer TOK --seq-len L [--mode/--format/--workers] --json`.
- datasets (run_clm recipe): load_dataset("json") + map(tokenize, batched, num_proc=2)
  + map(group_texts, batched, num_proc=2) with block_size = seq_len + save_to_disk,
  in a fresh HF_DATASETS_CACHE directory per run. The save is counted.
- trl: load_dataset("json") + map(tokenize, batched, num_proc=2) + trl.pack_dataset(
  seq_length=seq_len, strategy="bfd") + save_to_disk, fresh cache directory per run.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
BATCH = 1024
MB = 1024 * 1024


# ----------------------------------------------------------------------------- corpus


def parse_count(text: str) -> int:
    text = text.strip().upper().replace("_", "")
    scale = {"K": 10**3, "M": 10**6, "G": 10**9}.get(text[-1:], 1)
    return int(float(text[:-1] if scale != 1 else text) * scale)


def base_documents(data: Path, python_tokens_share: float = 0.5) -> list[str]:
    """The real documents the corpus repeats: GSM8K, FastChat and Python sources."""
    docs: list[str] = []
    gsm8k = data / "gsm8k_train.jsonl"
    if gsm8k.is_file():
        for line in gsm8k.read_text(encoding="utf-8").splitlines():
            if line.strip():
                row = json.loads(line)
                docs.append(row["question"] + "\n" + row["answer"])
    chat = data / "fastchat_dummy_conversation.json"
    if chat.is_file():
        for conv in json.loads(chat.read_text(encoding="utf-8")):
            docs.append("\n".join(turn["value"] for turn in conv["conversations"]))
    chat_chars = sum(len(d) for d in docs)
    # About as many characters of Python source as of the rest (source is denser in tokens).
    import numpy

    site = Path(numpy.__file__).resolve().parents[1]
    budget, used = max(chat_chars, 4 * MB) * python_tokens_share / (1 - python_tokens_share), 0
    for path in sorted(site.rglob("*.py")):
        if used >= budget:
            break
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        if 200 <= len(text) <= 200_000 and "\x00" not in text:
            docs.append(text)
            used += len(text)
    if not docs:
        sys.exit(f"no documents found under {data} or in site-packages")
    return docs


def count_tokens(tokenizer_dir: str, docs: list[str]) -> list[int]:
    sys.path.insert(0, str(ROOT))
    from packcli.tokenizing import load_tokenizer

    backend = load_tokenizer(tokenizer_dir).backend_tokenizer
    counts: list[int] = []
    for i in range(0, len(docs), BATCH):
        counts.extend(len(e) for e in backend.encode_batch_fast(docs[i : i + BATCH], add_special_tokens=False))
    return counts


def build_corpus(workdir: Path, data: Path, tokenizer_dir: str, tokens: int) -> dict:
    """corpus-full.jsonl (>= tokens) and corpus-quarter.jsonl (its first quarter); reused if present."""
    meta_path = workdir / f"corpus-{tokens}.json"
    if meta_path.is_file():
        meta = json.loads(meta_path.read_text())
        if all(Path(meta[k]["path"]).is_file() for k in ("full", "quarter")):
            print(f"corpus: reusing {meta['full']['path']}", flush=True)
            return meta
    started = time.perf_counter()
    docs = base_documents(data)
    counts = count_tokens(tokenizer_dir, docs)
    order = list(range(len(docs)))
    random.Random(0).shuffle(order)
    meta = {}
    for name, target in (("quarter", tokens // 4), ("full", tokens)):
        path = workdir / f"corpus-{tokens}-{name}.jsonl"
        n_docs = n_tokens = n_bytes = 0
        with open(path, "w", encoding="utf-8") as f:
            while n_tokens < target:
                for i in order:
                    line = json.dumps({"text": docs[i]}, ensure_ascii=False) + "\n"
                    f.write(line)
                    n_docs += 1
                    n_tokens += counts[i]
                    n_bytes += len(line.encode("utf-8"))
                    if n_tokens >= target:
                        break
        meta[name] = {"path": str(path), "documents": n_docs, "tokens": n_tokens, "bytes": n_bytes}
    meta["base"] = {"documents": len(docs), "tokens": sum(counts)}
    meta_path.write_text(json.dumps(meta, indent=2))
    print(
        f"corpus: {meta['full']['tokens']:,} tokens, {meta['full']['documents']:,} documents, "
        f"{meta['full']['bytes'] / MB:,.0f} MB JSONL (base set: {len(docs):,} documents, "
        f"{sum(counts):,} tokens, repeated), built in {time.perf_counter() - started:.0f} s",
        flush=True,
    )
    return meta


# ----------------------------------------------------------------------------- children


def child_limit(args) -> None:
    """The tokenizer alone: encode_batch_fast over the corpus in batches of 1024, no writing."""
    sys.path.insert(0, str(ROOT))
    from packcli.tokenizing import load_tokenizer

    t0 = time.perf_counter()
    backend = load_tokenizer(args.tokenizer).backend_tokenizer
    t1 = time.perf_counter()
    with open(args.corpus, encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for line in f if line.strip()]
    batches = [texts[i : i + BATCH] for i in range(0, len(texts), BATCH)]
    t2 = time.perf_counter()
    tokens = 0
    for batch in batches:
        tokens += sum(map(len, backend.encode_batch_fast(batch, add_special_tokens=False)))
    t3 = time.perf_counter()
    print(json.dumps({"tokens": tokens, "load_s": t1 - t0, "read_s": t2 - t1, "encode_s": t3 - t2}))


def _datasets_env(cache: str):
    os.environ["HF_DATASETS_CACHE"] = cache
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["HF_DATASETS_OFFLINE"] = "1"
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


def child_datasets(args) -> None:
    """transformers' examples/pytorch/language-modeling/run_clm.py preprocessing, as written there."""
    _datasets_env(args.cache)
    from itertools import chain

    import datasets
    from transformers import AutoTokenizer

    datasets.utils.logging.disable_progress_bar()
    t0 = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    raw = datasets.load_dataset("json", data_files=args.corpus, split="train", cache_dir=args.cache)

    def tokenize_function(examples):
        return tokenizer(examples["text"])

    tokenized = raw.map(tokenize_function, batched=True, num_proc=args.num_proc, remove_columns=["text"])
    block_size = args.seq_len

    def group_texts(examples):
        concatenated = {k: list(chain(*examples[k])) for k in examples.keys()}
        total_length = len(concatenated[list(examples.keys())[0]])
        total_length = (total_length // block_size) * block_size
        result = {
            k: [t[i : i + block_size] for i in range(0, total_length, block_size)] for k, t in concatenated.items()
        }
        result["labels"] = result["input_ids"].copy()
        return result

    lm = tokenized.map(group_texts, batched=True, num_proc=args.num_proc)
    lm.save_to_disk(args.out)
    print(json.dumps({"rows": len(lm), "work_s": time.perf_counter() - t0}))


def child_trl(args) -> None:
    """Tokenize with datasets.map, then trl.pack_dataset (BFD) and save."""
    _datasets_env(args.cache)
    import datasets
    from transformers import AutoTokenizer
    from trl import pack_dataset

    datasets.utils.logging.disable_progress_bar()
    t0 = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    raw = datasets.load_dataset("json", data_files=args.corpus, split="train", cache_dir=args.cache)

    def tokenize_function(examples):
        return {"input_ids": tokenizer(examples["text"], add_special_tokens=False)["input_ids"]}

    tokenized = raw.map(tokenize_function, batched=True, num_proc=args.num_proc, remove_columns=["text"])
    packed = pack_dataset(tokenized, seq_length=args.seq_len, strategy=args.trl_strategy)
    packed.save_to_disk(args.out)
    print(json.dumps({"rows": len(packed), "work_s": time.perf_counter() - t0}))


# ----------------------------------------------------------------------------- running


def run_measured(cmd: list[str], env: dict, stdout_path: Path) -> dict:
    """Run a child; wall time, ru_maxrss of the child and the sampled RSS of its whole tree."""
    import psutil

    with open(stdout_path, "wb") as out, open(stdout_path.with_suffix(".err"), "wb") as err:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env, cwd=str(ROOT))
        peak_tree = 0
        done = threading.Event()

        def sample() -> None:
            nonlocal peak_tree
            try:
                root = psutil.Process(proc.pid)
            except psutil.NoSuchProcess:
                return
            while not done.is_set():
                total = 0
                try:
                    procs = [root, *root.children(recursive=True)]
                except psutil.NoSuchProcess:
                    break
                for p in procs:
                    try:
                        total += p.memory_info().rss
                    except psutil.NoSuchProcess:
                        pass
                peak_tree = max(peak_tree, total)
                done.wait(0.05)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        done.set()
        sampler.join()
    if proc.returncode != 0:
        tail = stdout_path.with_suffix(".err").read_text(errors="replace")[-2000:]
        raise RuntimeError(f"{' '.join(cmd[:6])}... exited {proc.returncode}:\n{tail}")
    text = stdout_path.read_text(errors="replace")
    result = json.loads(text[text.index("{") :]) if "{" in text else {}
    return {"wall": wall, "maxrss_mb": usage.ru_maxrss / 1024, "tree_mb": peak_tree / MB, "out": result}


def child_env(threads: int | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("RAYON_NUM_THREADS", "RAYON_RS_NUM_CPUS")}
    env["PYTHONUNBUFFERED"] = "1"
    env["TOKENIZERS_PARALLELISM"] = "true"
    if threads is not None:
        env["RAYON_NUM_THREADS"] = env["RAYON_RS_NUM_CPUS"] = str(threads)
    return env


class Config:
    def __init__(self, name: str, kind: str, corpus: str, extra=(), threads: int | None = None, group: str = "main"):
        self.name, self.kind, self.corpus, self.extra, self.threads, self.group = name, kind, corpus, list(extra), threads, group
        self.runs: list[dict] = []

    def command(self, args, out: Path, cache: Path) -> list[str]:
        script = str(Path(__file__).resolve())
        if self.kind == "limit":
            return [PYTHON, script, "--child", "limit", "--corpus", self.corpus, "--tokenizer", args.tokenizer]
        if self.kind == "packcli":
            return [
                PYTHON, "-m", "packcli", "pack", self.corpus, "--tokenizer", args.tokenizer,
                "--seq-len", str(args.seq_len), "-o", str(out), "--json", *self.extra,
            ]
        return [
            PYTHON, script, "--child", self.kind, "--corpus", self.corpus, "--tokenizer", args.tokenizer,
            "--seq-len", str(args.seq_len), "--out", str(out), "--cache", str(cache),
            "--num-proc", str(args.num_proc), "--trl-strategy", args.trl_strategy,
        ]

    def run(self, args, scratch: Path) -> dict:
        out, cache = scratch / "out", scratch / "cache"
        for path in (out, cache):
            shutil.rmtree(path, ignore_errors=True)
        cache.mkdir(parents=True)
        result = run_measured(self.command(args, out, cache), child_env(self.threads), scratch / "child.json")
        if self.kind == "packcli":
            manifest = json.loads((out / "manifest.json").read_text())
            result["rows"] = manifest["totals"]["rows"]
        size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file()) if out.exists() else 0
        result["out_mb"] = size / MB
        for path in (out, cache):
            shutil.rmtree(path, ignore_errors=True)
        self.runs.append(result)
        return result

    @property
    def best(self) -> dict:
        return min(self.runs, key=lambda r: r["wall"])

    @property
    def peak_mb(self) -> float:
        return max(max(r["maxrss_mb"], r["tree_mb"]) for r in self.runs)


def load_average() -> float:
    return os.getloadavg()[0]


def wait_for_quiet(max_load: float, max_wait: float) -> None:
    """Start when the 1-minute load is under max_load, or after max_wait seconds anyway."""
    deadline = time.monotonic() + max_wait
    while load_average() > max_load and time.monotonic() < deadline:
        print(f"  load {load_average():.2f} > {max_load}; waiting...", flush=True)
        time.sleep(30)


def have(module: str) -> str | None:
    """None if the module imports in a child, else the reason."""
    probe = subprocess.run([PYTHON, "-c", f"import {module}"], capture_output=True, text=True)
    return None if probe.returncode == 0 else (probe.stderr.strip().splitlines() or ["import failed"])[-1]


# ----------------------------------------------------------------------------- report


def tps(tokens: int, seconds: float) -> float:
    return tokens / seconds if seconds > 0 else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", default="50M", help="corpus size in tokens of the tokenizer (default 50M)")
    parser.add_argument("--quick", action="store_true", help="~2M tokens, 1 round: a smoke run")
    parser.add_argument("--repeats", type=int, default=3, help="rounds; each figure is the best over them")
    parser.add_argument("--baseline-repeats", type=int, default=1, help="rounds that also run datasets/TRL (slow)")
    parser.add_argument("--tokenizer", default="/tmp/qwen-tok")
    parser.add_argument("--data", default="/work/shared/data")
    parser.add_argument("--seq-len", type=int, default=4096)
    parser.add_argument("--num-proc", type=int, default=2, help="num_proc of the datasets/TRL map calls")
    parser.add_argument("--trl-strategy", default="bfd")
    parser.add_argument("--no-baselines", action="store_true", help="skip datasets and TRL")
    parser.add_argument("--workdir", help="keep the corpus here and reuse it (default: a temporary directory)")
    parser.add_argument("--max-load", type=float, default=1.5, help="wait for the 1-min load to drop below this")
    parser.add_argument("--max-wait", type=float, default=600, help="seconds to wait for a quiet machine, per round")
    parser.add_argument("--json-out", help="also write every run as JSON here")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--corpus", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--cache", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.child:
        {"limit": child_limit, "datasets": child_datasets, "trl": child_trl}[args.child](args)
        return

    tokens = parse_count("2M" if args.quick and args.tokens == "50M" else args.tokens)
    repeats = 1 if args.quick and args.repeats == 3 else args.repeats
    if not Path(args.tokenizer).exists():
        print(f"building the Qwen tokenizer in {args.tokenizer}", flush=True)
        subprocess.run([PYTHON, str(ROOT / "scripts" / "make_bench_tokenizer.py"), args.tokenizer], check=True)

    temp = None
    if args.workdir:
        workdir = Path(args.workdir)
        workdir.mkdir(parents=True, exist_ok=True)
    else:
        temp = tempfile.TemporaryDirectory(prefix="packcli-bench-")
        workdir = Path(temp.name)
    try:
        run_all(args, workdir, tokens, repeats)
    finally:
        if temp is not None:
            temp.cleanup()


def run_all(args, workdir: Path, tokens: int, repeats: int) -> None:
    import platform

    meta = build_corpus(workdir, Path(args.data), args.tokenizer, tokens)
    full, quarter = meta["full"]["path"], meta["quarter"]["path"]
    n_full, n_quarter = meta["full"]["tokens"], meta["quarter"]["tokens"]

    configs = [
        Config("limit: encode_batch_fast, all cores", "limit", full),
        Config("packcli bin parquet", "packcli", full),
        Config("packcli bin npy", "packcli", full, ["--format", "npy"]),
        Config("packcli concat parquet", "packcli", full, ["--mode", "concat"]),
        Config("packcli concat npy", "packcli", full, ["--mode", "concat", "--format", "npy"]),
        Config("limit: encode_batch_fast, 1 thread", "limit", full, threads=1, group="scaling"),
        Config("packcli bin parquet --workers 1", "packcli", full, ["--workers", "1"], group="scaling"),
        Config("packcli bin parquet --workers 2", "packcli", full, ["--workers", "2"], group="scaling"),
        Config("packcli bin parquet, N/4 input", "packcli", quarter, group="memory"),
    ]
    baselines = []
    if not args.no_baselines:
        missing = have("datasets")
        if missing:
            print(f"datasets baseline skipped: {missing}  (pip install datasets)", flush=True)
        else:
            baselines.append(Config("datasets map + group_texts (run_clm)", "datasets", full, group="baseline"))
        missing = have("trl")
        if missing:
            print(f"TRL baseline skipped: {missing}  (pip install torch==2.13.0 trl)", flush=True)
        else:
            baselines.append(Config(f"datasets map + trl.pack_dataset({args.trl_strategy})", "trl", full, group="baseline"))

    scratch = workdir / "scratch"
    scratch.mkdir(exist_ok=True)
    print(
        f"machine: {os.cpu_count()} cores, {platform.processor() or platform.machine()}, python {platform.python_version()}; "
        f"seq_len {args.seq_len}; {repeats} round(s)",
        flush=True,
    )
    loads = []
    for round_no in range(1, repeats + 1):
        wait_for_quiet(args.max_load, args.max_wait)
        loads.append(load_average())
        todo = configs + (baselines if round_no <= args.baseline_repeats else [])
        print(f"round {round_no}/{repeats} (load {loads[-1]:.2f})", flush=True)
        for config in todo:
            r = config.run(args, scratch)
            n = n_quarter if config.corpus == quarter else n_full
            print(
                f"  {config.name:<44} {r['wall']:8.1f} s  {tps(n, r['wall']) / 1e6:6.2f} M tok/s  "
                f"rss {max(r['maxrss_mb'], r['tree_mb']):7.0f} MB",
                flush=True,
            )
    loads.append(load_average())

    if args.json_out:
        Path(args.json_out).write_text(json.dumps(
            {"meta": meta, "seq_len": args.seq_len, "loads": loads,
             "configs": {c.name: c.runs for c in configs + baselines}}, indent=2))
    report(args, meta, configs, baselines, loads)


def report(args, meta: dict, configs: list[Config], baselines: list[Config], loads: list[float]) -> None:
    by_name = {c.name: c for c in configs + baselines}
    n_full, n_quarter = meta["full"]["tokens"], meta["quarter"]["tokens"]

    def rate(c: Config) -> float:
        return tps(n_quarter if c.group == "memory" else n_full, c.best["wall"])

    limit = by_name["limit: encode_batch_fast, all cores"]
    limit_rate = tps(n_full, limit.best["out"]["encode_s"])
    limit1 = by_name["limit: encode_batch_fast, 1 thread"]
    limit1_rate = tps(n_full, limit1.best["out"]["encode_s"])
    reference = by_name["packcli bin parquet"]

    print()
    print(
        f"corpus: {n_full:,} tokens ({meta['full']['documents']:,} documents, {meta['full']['bytes'] / MB:,.0f} MB JSONL), "
        f"seq_len {args.seq_len}, {len(reference.runs)} round(s), best wall time of each; 1-min load {min(loads):.2f}-{max(loads):.2f}"
    )
    rows = []
    for c in configs + baselines:
        if c.kind == "limit":
            r = tps(n_full, c.best["out"]["encode_s"])
            base = limit_rate if c is limit else limit1_rate
            vs = "1.00 (limit)" if c is limit else f"{r / limit_rate:.2f} of limit"
            note = f"encode only; load {c.best['out']['load_s']:.1f} s + read {c.best['out']['read_s']:.1f} s apart"
        elif c.kind == "packcli":
            r = rate(c)
            if c.group == "scaling":
                vs = f"{r / limit_rate:.2f} of limit"
            else:
                vs = f"{r / limit_rate:.2f} of limit"
            t = c.best["out"].get("timings", {})
            note = "in-process {total:.1f} s: read {read:.1f}, tokenize {tokenize:.1f}, pack {pack:.1f}, write {write:.1f}".format(**t) if t else ""
        else:
            r = rate(c)
            vs = f"{r / rate(reference):.2f} of packcli bin parquet"
            note = f"{c.best['out'].get('rows', 0):,} rows"
        rows.append((c.name, f"{r / 1e6:.2f}", vs, f"{c.peak_mb:,.0f}", f"{c.best['wall']:.1f}", note))
    headers = ("configuration", "M tokens/s", "ratio", "peak RSS MB", "wall s", "notes")
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(headers)]
    print("| " + " | ".join(h.ljust(w) for h, w in zip(headers, widths)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in rows:
        print("| " + " | ".join(v.ljust(w) for v, w in zip(row, widths)) + " |")

    print()
    print("targets:")
    checks = []
    for name in ("packcli bin parquet", "packcli bin npy", "packcli concat parquet", "packcli concat npy"):
        ratio = rate(by_name[name]) / limit_rate
        checks.append((f"{name}: >= 0.9x the limit's tokens/s", ratio >= 0.9, f"{ratio:.2f}x"))
    peak = reference.peak_mb
    checks.append(("peak RSS, default options: < 1 GB", peak < 1024, f"{peak:,.0f} MB"))
    small = by_name["packcli bin parquet, N/4 input"].peak_mb
    growth = peak / small - 1
    checks.append((f"peak RSS growth, input x{n_full / n_quarter:.1f}: < 20%", growth < 0.2, f"{small:,.0f} -> {peak:,.0f} MB ({growth:+.0%})"))
    w1, w2 = by_name["packcli bin parquet --workers 1"], by_name["packcli bin parquet --workers 2"]
    scaling = rate(w2) / rate(w1)
    checks.append((
        "--workers 2 >= 1.7x --workers 1", scaling >= 1.7,
        f"{scaling:.2f}x (tokenizer alone, 2 threads / 1 thread: {limit_rate / limit1_rate:.2f}x)",
    ))
    for b in baselines:
        faster = rate(reference) / rate(b)
        smaller = b.peak_mb / reference.peak_mb
        checks.append((f"packcli beats {b.name}", faster > 1 and smaller > 1, f"{faster:.1f}x the tokens/s, {smaller:.1f}x less peak RSS"))
    for what, ok, detail in checks:
        print(f"  [{'PASS' if ok else 'MISS'}] {what}: {detail}")


if __name__ == "__main__":
    main()
