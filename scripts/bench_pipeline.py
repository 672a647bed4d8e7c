"""Benchmark `packcli pack` end to end: tokens/s against the tokenizer alone, peak memory,
scaling over workers, and the `datasets` / TRL recipes, all measured side by side in one run.

    python scripts/bench_pipeline.py                    # 50M tokens, 2 rounds (about 35 minutes on 2 cores)
    python scripts/bench_pipeline.py --quick            # ~2M tokens, 1 round, a smoke run of a few minutes
    python scripts/bench_pipeline.py --tokens 20M --no-baselines --no-hf
    python scripts/bench_pipeline.py --targets          # the default backend / HF limit on 10M and 1M tokens

docs/benchmarks/ has the measured runs (pipeline-*.md).

Corpus (built in a temporary directory, never in the repo): GSM8K train (question + "\\n" +
answer), the FastChat conversations (turns joined with "\\n") and Python source files from
this interpreter's site-packages (long documents), shuffled with a fixed seed and repeated
until the corpus holds `--tokens` tokens of the tokenizer. Written as JSONL; the memory
growth check, the --workers scaling of the hf backend and the datasets/TRL baselines use
its first quarter ("N/4 input"); the full corpus is 4N.

Tokenizer: a real 151k-vocabulary Qwen tokenizer directory (`--tokenizer`, default
/tmp/qwen-tok, built with scripts/make_bench_tokenizer.py if missing).

Every configuration runs as its own subprocess. tokens/s is the corpus's text tokens
(the same number for every configuration, EOS not counted) divided by the wall time
measured around the subprocess, interpreter start-up and tokenizer loading included.
Peak memory is the larger of the child's `ru_maxrss` (from `os.wait4`) and the sum of the
PSS of the child and all its descendants, sampled every 50 ms (packcli and the `datasets`
recipes run worker processes; `ru_maxrss` only gives the largest single process). PSS,
not RSS: forked workers share the pages of the tokenizer their parent loaded, and an RSS
sum counts each shared page once per process. The RSS sum is printed beside it.

The machine may be shared, so every figure is a ratio to a baseline of the same run: the
configurations run interleaved in rounds (limit, packcli..., baselines, limit, ...) and
each takes its best (shortest) wall time over the rounds; memory is the largest seen.

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
    from packcli.tokenize.tokenizer import load_tokenizer

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
    """The tokenizer alone, over the corpus in batches of 1024, no writing.

    hf: backend_tokenizer.encode_batch_fast (Encoding objects, ids never leave Rust);
    tiktoken: packcli's own tiktoken encoder (fastbpe), which returns numpy arrays."""
    sys.path.insert(0, str(ROOT))
    from packcli.tokenize.tokenizer import load_tokenizer

    t0 = time.perf_counter()
    tokenizer = load_tokenizer(args.tokenizer)
    if args.backend == "hf":
        backend = tokenizer.backend_tokenizer

        def encode(batch):
            return sum(map(len, backend.encode_batch_fast(batch, add_special_tokens=False)))
    else:
        from packcli.tokenize import fastbpe

        encoder = fastbpe.make_encoder(tokenizer, "tiktoken", [])

        def encode(batch):
            return int(encoder.encode_batch(batch)[1].sum())

    t1 = time.perf_counter()
    with open(args.corpus, encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for line in f if line.strip()]
    batches = [texts[i : i + BATCH] for i in range(0, len(texts), BATCH)]
    t2 = time.perf_counter()
    tokens = 0
    for batch in batches:
        tokens += encode(batch)
    t3 = time.perf_counter()
    print(json.dumps({"tokens": tokens, "load_s": t1 - t0, "read_s": t2 - t1, "encode_s": t3 - t2}))


def child_conversion(args) -> None:
    """Encodings -> one flat int32 array: the generator packcli used before, encode_texts'
    chained lists, and Encoding.merge. Same encodings (the first 8 batches of the corpus), interleaved per
    batch, best of 3 each; this is time the main thread holds the GIL."""
    import itertools

    import numpy as np

    sys.path.insert(0, str(ROOT))
    from tokenizers import Encoding

    from packcli.tokenize.tokenizer import load_tokenizer

    backend = load_tokenizer(args.tokenizer).backend_tokenizer
    with open(args.corpus, encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for line, _ in zip(f, range(8 * BATCH))]

    def generator(encodings):  # before
        lengths = np.fromiter((len(e.ids) for e in encodings), dtype=np.int64, count=len(encodings))
        return np.fromiter((i for e in encodings for i in e.ids), dtype=np.int32, count=int(lengths.sum())), lengths

    def merged(encodings):  # an alternative: Encoding.merge in Rust, one list (copies every field)
        lengths = np.fromiter(map(len, encodings), dtype=np.int64, count=len(encodings))
        ids = Encoding.merge(encodings, growing_offsets=False).ids
        return np.fromiter(ids, dtype=np.int32, count=int(lengths.sum())), lengths

    def chained(encodings):  # encode_texts now: one list per document, chained
        lengths = np.fromiter(map(len, encodings), dtype=np.int64, count=len(encodings))
        ids = itertools.chain.from_iterable(e.ids for e in encodings)
        return np.fromiter(ids, dtype=np.int32, count=int(lengths.sum())), lengths

    seconds = {"encode": 0.0, "generator": 0.0, "merge": 0.0, "chain": 0.0}
    tokens = 0
    for i in range(0, len(texts), BATCH):
        t0 = time.perf_counter()
        encodings = backend.encode_batch_fast(texts[i : i + BATCH], add_special_tokens=False)
        seconds["encode"] += time.perf_counter() - t0
        results, best = {}, {}
        for _ in range(args.conversion_repeats):
            for name, fn in (("generator", generator), ("merge", merged), ("chain", chained)):
                t0 = time.perf_counter()
                results[name] = fn(encodings)
                best[name] = min(best.get(name, float("inf")), time.perf_counter() - t0)
        for name, value in best.items():
            seconds[name] += value
        ref = results["generator"]
        assert all(np.array_equal(r[0], ref[0]) and np.array_equal(r[1], ref[1]) for r in results.values())
        tokens += len(ref[0])
    print(json.dumps({"tokens": tokens, **{k + "_s": v for k, v in seconds.items()}}))


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
        concatenated = {k: list(chain(*examples[k])) for k in examples}
        total_length = len(concatenated[next(iter(examples))])
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


def _tree_memory(root: int) -> tuple[int, int]:
    """(RSS, PSS) in bytes of a process and all its descendants, from /proc (Linux).

    RSS counts a page shared by N processes N times: forked workers share the parent's
    loaded tokenizer, so their RSS sum overstates what the run takes. PSS charges each
    process 1/N of every page it shares, so the PSS sum is the memory the run really holds."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:
                    stat = f.read()
            except OSError:
                continue
            ppid = int(stat[stat.rindex(b")") + 2 :].split()[1])
            parents.setdefault(ppid, []).append(int(entry))
    rss = pss = 0
    todo = [root]
    page = os.sysconf("SC_PAGE_SIZE")
    while todo:
        pid = todo.pop()
        todo.extend(parents.get(pid, ()))
        try:
            with open(f"/proc/{pid}/statm", "rb") as f:
                rss += int(f.read().split()[1]) * page
            with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
                for line in f:
                    if line.startswith(b"Pss:"):
                        pss += int(line.split()[1]) * 1024
                        break
        except OSError:
            pass
    return rss, pss


def run_measured(cmd: list[str], env: dict, stdout_path: Path) -> dict:
    """Run a child: wall time, CPU time, ru_maxrss, and the peak RSS and PSS of its whole process tree."""
    with open(stdout_path, "wb") as out, open(stdout_path.with_suffix(".err"), "wb") as err:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env, cwd=str(ROOT))
        peak_tree = peak_pss = 0
        done = threading.Event()

        def sample() -> None:
            nonlocal peak_tree, peak_pss
            while not done.is_set():
                rss, pss = _tree_memory(proc.pid)
                peak_tree, peak_pss = max(peak_tree, rss), max(peak_pss, pss)
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
        raise RuntimeError(f"{' '.join(cmd[:8])}... exited {proc.returncode}:\n{tail}")
    text = stdout_path.read_text(errors="replace")
    result = json.loads(text[text.index("{") :]) if "{" in text else {}
    return {
        "wall": wall,
        "cpu": usage.ru_utime + usage.ru_stime,
        "maxrss_mb": usage.ru_maxrss / 1024,
        "tree_mb": peak_tree / MB,
        "pss_mb": peak_pss / MB,
        "out": result,
    }


def child_env(threads: int | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("RAYON_NUM_THREADS", "RAYON_RS_NUM_CPUS")}
    env["PYTHONUNBUFFERED"] = "1"
    env["TOKENIZERS_PARALLELISM"] = "true"
    if threads is not None:
        env["RAYON_NUM_THREADS"] = env["RAYON_RS_NUM_CPUS"] = str(threads)
    return env


class Config:
    """One configuration: how to run it, on which corpus, and its runs."""

    def __init__(self, key: str, name: str, kind: str, corpus: str, tokens: int, extra=(), threads=None, backend="hf"):
        self.key, self.name, self.kind, self.corpus, self.tokens = key, name, kind, corpus, tokens
        self.extra, self.threads, self.backend = list(extra), threads, backend
        self.runs: list[dict] = []
        self.keep: Path | None = None

    def command(self, args, out: Path, cache: Path) -> list[str]:
        script = str(Path(__file__).resolve())
        if self.kind in ("limit", "conversion"):
            return [
                PYTHON,
                script,
                "--child",
                self.kind,
                "--backend",
                self.backend,
                "--corpus",
                self.corpus,
                "--tokenizer",
                args.tokenizer,
            ]
        if self.kind == "packcli":
            return [
                PYTHON,
                "-m",
                "packcli",
                "pack",
                self.corpus,
                "--tokenizer",
                args.tokenizer,
                "--seq-len",
                str(args.seq_len),
                "-o",
                str(out),
                "--json",
                *self.extra,
            ]
        return [
            PYTHON,
            script,
            "--child",
            self.kind,
            "--corpus",
            self.corpus,
            "--tokenizer",
            args.tokenizer,
            "--seq-len",
            str(args.seq_len),
            "--out",
            str(out),
            "--cache",
            str(cache),
            "--num-proc",
            str(args.num_proc),
            "--trl-strategy",
            args.trl_strategy,
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
            result["backend"] = manifest["tokenizer"].get("backend")
        result["out_mb"] = sum(f.stat().st_size for f in out.rglob("*") if f.is_file()) / MB if out.exists() else 0
        if self.keep is not None and out.exists():  # the last run's shards, for the identity check
            shutil.rmtree(self.keep, ignore_errors=True)
            out.rename(self.keep)
        for path in (out, cache):
            shutil.rmtree(path, ignore_errors=True)
        self.runs.append(result)
        return result

    @property
    def best(self) -> dict:
        """The fastest run: by its encode loop for the limits, else by wall time."""
        return min(self.runs, key=lambda r: r["out"]["encode_s"] if self.kind == "limit" else r["wall"])

    @property
    def seconds(self) -> float:
        """Limits: the encode loop alone; everything else: wall time around the subprocess."""
        return self.best["out"]["encode_s"] if self.kind == "limit" else self.best["wall"]

    @property
    def rate(self) -> float:
        return self.tokens / self.seconds

    @property
    def peak_mb(self) -> float:
        """Peak memory: the PSS sum of the process tree, or the largest single process if more."""
        return max(max(r["maxrss_mb"], r["pss_mb"]) for r in self.runs)

    @property
    def peak_rss_sum_mb(self) -> float:
        return max(r["tree_mb"] for r in self.runs)


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", default="50M", help="corpus size in tokens of the tokenizer (default 50M)")
    parser.add_argument("--quick", action="store_true", help="~2M tokens, 1 round: a smoke run")
    parser.add_argument("--repeats", type=int, default=2, help="rounds; each figure is the best over them")
    parser.add_argument("--baseline-repeats", type=int, default=1, help="rounds that also run datasets/TRL (slow)")
    parser.add_argument(
        "--baseline-input",
        choices=("quarter", "full"),
        default="quarter",
        help="corpus of the datasets/TRL baselines and of the packcli run they are compared with",
    )
    parser.add_argument("--tokenizer", default="/tmp/qwen-tok")
    parser.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    parser.add_argument("--seq-len", type=int, default=4096)
    parser.add_argument("--num-proc", type=int, default=2, help="num_proc of the datasets/TRL map calls")
    parser.add_argument("--trl-strategy", default="bfd")
    parser.add_argument("--no-baselines", action="store_true", help="skip datasets and TRL")
    parser.add_argument("--no-hf", action="store_true", help="skip the --tokenizer-backend hf runs (slow)")
    parser.add_argument("--workdir", help="keep the corpus here and reuse it (default: a temporary directory)")
    parser.add_argument("--max-load", type=float, default=1.5, help="wait for the 1-min load to drop below this")
    parser.add_argument("--max-wait", type=float, default=300, help="seconds to wait for a quiet machine, per round")
    parser.add_argument("--json-out", help="also write every run as JSON here")
    parser.add_argument(
        "--targets",
        action="store_true",
        help="the default backend against the HF limit on 10M and 1M tokens cut from --source (see run_targets)",
    )
    parser.add_argument(
        "--source", default="/tmp/bsw-full/corpus-40000000-full.jsonl", help="--targets: the JSONL to cut"
    )
    parser.add_argument(
        "--memory", action="store_true", help="--targets: also pack the whole --source once (peak memory)"
    )
    parser.add_argument("--extra", help="a directory appended to the children's PYTHONPATH (e.g. a pip --target)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--backend", default="hf", help=argparse.SUPPRESS)
    parser.add_argument("--conversion-repeats", type=int, default=3, help=argparse.SUPPRESS)
    parser.add_argument("--corpus", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--cache", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.child:
        {"limit": child_limit, "conversion": child_conversion, "datasets": child_datasets, "trl": child_trl}[
            args.child
        ](args)
        return

    tokens = parse_count("2M" if args.quick and args.tokens == "50M" else args.tokens)
    repeats = 1 if args.quick else args.repeats
    if not Path(args.tokenizer).exists():
        print(f"building the Qwen tokenizer in {args.tokenizer}", flush=True)
        subprocess.run([PYTHON, str(ROOT / "scripts" / "make_bench_tokenizer.py"), args.tokenizer], check=True)

    if args.extra:
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), args.extra]))
    temp = None
    if args.workdir:
        workdir = Path(args.workdir)
        workdir.mkdir(parents=True, exist_ok=True)
    else:
        temp = tempfile.TemporaryDirectory(prefix="packcli-bench-")
        workdir = Path(temp.name)
    try:
        if args.targets:
            run_targets(args, workdir, repeats)
        else:
            run_all(args, workdir, tokens, repeats)
    finally:
        if temp is not None:
            temp.cleanup()


# ----------------------------------------------------------------------------- --targets

TARGETS = (("10M", 10_000_000, 2.5), ("1M", 1_000_000, 2.0))  # size, tokens, the ratio to reach


def cut_corpus(source: Path, workdir: Path, tokenizer_dir: str, tokens: int) -> dict:
    """The first documents of `source` holding at least `tokens` tokens (counted with the HF
    tokenizer), as a JSONL file in workdir; reused if present."""
    meta_path = workdir / f"cut-{tokens}.json"
    if meta_path.is_file():
        meta = json.loads(meta_path.read_text())
        if Path(meta["path"]).is_file() and meta["source"] == str(source):
            return meta
    sys.path.insert(0, str(ROOT))
    from packcli.tokenize.tokenizer import load_tokenizer

    backend = load_tokenizer(tokenizer_dir).backend_tokenizer
    path, n_tokens, n_docs = workdir / f"cut-{tokens}.jsonl", 0, 0
    with open(source, encoding="utf-8") as src, open(path, "w", encoding="utf-8") as out:
        while n_tokens < tokens:
            lines = [line for line in (src.readline() for _ in range(256)) if line.strip()]
            if not lines:
                sys.exit(f"{source} holds fewer than {tokens:,} tokens")
            texts = [json.loads(line)["text"] for line in lines]
            counts = [len(e) for e in backend.encode_batch_fast(texts, add_special_tokens=False)]
            for line, count in zip(lines, counts):
                if n_tokens >= tokens:
                    break
                out.write(line)
                n_tokens, n_docs = n_tokens + count, n_docs + 1
    meta = {"path": str(path), "source": str(source), "tokens": n_tokens, "documents": n_docs}
    meta_path.write_text(json.dumps(meta))
    return meta


def same_shards(a: Path, b: Path) -> bool:
    """Every shard file byte-identical (the manifest, the report and the run record name the
    backend or the options, so they differ)."""

    def shards(directory: Path) -> list[str]:
        return sorted(p.name for p in directory.iterdir() if p.suffix not in (".json", ".tmp"))

    names, other = shards(a), shards(b)
    return bool(names) and names == other and all((a / n).read_bytes() == (b / n).read_bytes() for n in names)


def run_targets(args, workdir: Path, repeats: int) -> None:
    """The default backend (`pack` with no --tokenizer-backend, a subprocess, start-up included)
    against the HF limit (encode_batch_fast alone, all cores, loading and reading excluded) on
    10M and 1M tokens of real text cut from --source; also --tokenizer-backend tiktoken and hf,
    and whether the default's shards are byte-identical to hf's. The start-up cache is warmed
    first (PACKCLI_CACHE_DIR in the work directory), so the runs are warm runs."""
    source = Path(args.source)
    if not source.is_file():
        source = Path(build_corpus(workdir, Path(args.data), args.tokenizer, 40_000_000)["full"]["path"])
    os.environ["PACKCLI_CACHE_DIR"] = str(workdir / "packcli-cache")
    scratch = workdir / "scratch"
    scratch.mkdir(exist_ok=True)
    sizes = []
    for label, tokens, goal in TARGETS:
        meta = cut_corpus(source, workdir, args.tokenizer, tokens)
        path, n = meta["path"], meta["tokens"]
        configs = [
            Config("limit", "limit: HF encode_batch_fast, all cores", "limit", path, n),
            Config("auto", "packcli pack (default backend)", "packcli", path, n),
            Config(
                "tiktoken",
                "packcli pack --tokenizer-backend tiktoken",
                "packcli",
                path,
                n,
                ["--tokenizer-backend", "tiktoken"],
            ),
            Config("hf", "packcli pack --tokenizer-backend hf", "packcli", path, n, ["--tokenizer-backend", "hf"]),
        ]
        for config in configs[1:]:
            config.keep = workdir / f"kept-{label}-{config.key}"
        sizes.append((label, goal, meta, {c.key: c for c in configs}))
    warm = Config("warm", "warm-up", "packcli", sizes[-1][2]["path"], 0)  # compiles the kernels, fills the cache
    for extra in ([], ["--tokenizer-backend", "tiktoken"]):
        warm.extra = extra
        warm.run(args, scratch)
    for round_no in range(1, repeats + 1):
        wait_for_quiet(args.max_load, args.max_wait)
        print(f"round {round_no}/{repeats} (load {load_average():.2f})", flush=True)
        for label, _, _, configs in sizes:
            for config in configs.values():
                r = config.run(args, scratch)
                seconds = r["out"]["encode_s"] if config.kind == "limit" else r["wall"]
                print(
                    f"  {label:>4} {config.name:<44} {seconds:6.2f} s  cpu {r['cpu']:6.2f} s  "
                    f"pss {max(r['maxrss_mb'], r['pss_mb']):6.0f} MB  backend {r.get('backend', '-')}",
                    flush=True,
                )
    memory = None
    if args.memory:
        memory = Config("memory", "packcli pack, whole source", "packcli", str(source), 0)
        memory.run(args, scratch)
    print()
    for label, goal, meta, c in sizes:
        limit, auto, tiktoken_run, hf = c["limit"], c["auto"], c["tiktoken"], c["hf"]
        ratio = limit.seconds / auto.seconds
        same = same_shards(auto.keep, hf.keep) and same_shards(tiktoken_run.keep, hf.keep)
        print(
            f"{label} ({meta['tokens']:,} tokens, {meta['documents']:,} documents): default backend "
            f"[{auto.best.get('backend')}] {ratio:.2f}x the HF limit (target {goal}x: "
            f"{'met' if ratio >= goal else 'NOT met'}); shards byte-identical to --tokenizer-backend hf: "
            f"{'yes' if same else 'NO'}"
        )
        print(
            f"    limit {limit.seconds:.2f} s (+ {limit.best['out']['load_s']:.2f} s loading the tokenizer, "
            f"{limit.best['out']['read_s']:.2f} s reading); pack: default {auto.seconds:.2f} s "
            f"(cpu {auto.best['cpu']:.2f} s), tiktoken {tiktoken_run.seconds:.2f} s (cpu {tiktoken_run.best['cpu']:.2f} s), "
            f"hf {hf.seconds:.2f} s; limit with loading {(limit.seconds + limit.best['out']['load_s']) / auto.seconds:.2f}x; "
            f"default / tiktoken end to end {tiktoken_run.seconds / auto.seconds:.2f}x; "
            f"hf {limit.seconds / hf.seconds:.2f}x the limit; default peak {auto.peak_mb:.0f} MB"
        )
    if memory is not None:
        print(f"peak memory of the default backend on the whole source: {memory.peak_mb:.0f} MB (PSS of the tree)")


def make_configs(args, meta: dict) -> tuple[list[Config], list[Config]]:
    full, quarter = meta["full"]["path"], meta["quarter"]["path"]
    nf, nq = meta["full"]["tokens"], meta["quarter"]["tokens"]
    C = Config
    configs = [
        C("limit", "limit: HF encode_batch_fast, all cores", "limit", full, nf),
        C(
            "limit-tt",
            "tiktoken encoder alone (packcli's auto backend), all cores",
            "limit",
            full,
            nf,
            backend="tiktoken",
        ),
    ]
    for mode in ("bin", "concat"):
        for fmt in ("parquet", "npy"):
            configs.append(
                C(f"{mode}-{fmt}", f"packcli {mode} {fmt}", "packcli", full, nf, ["--mode", mode, "--format", fmt])
            )
    if not args.no_hf:  # the same tokenizer as the limit: the pipeline's own overhead
        for mode, fmt in (("bin", "parquet"), ("concat", "npy")):
            if True:
                configs.append(
                    C(
                        f"hf-{mode}-{fmt}",
                        f"packcli {mode} {fmt} --tokenizer-backend hf",
                        "packcli",
                        full,
                        nf,
                        ["--mode", mode, "--format", fmt, "--tokenizer-backend", "hf"],
                    )
                )
    # Memory growth and scaling run on the quarter corpus (N) too; the full one is 4N.
    configs.append(C("bin-parquet-q", "packcli bin parquet (N/4 input)", "packcli", quarter, nq))
    configs += [
        C("w1", "packcli --workers 1", "packcli", full, nf, ["--workers", "1"]),
        C("w2", "packcli --workers 2", "packcli", full, nf, ["--workers", "2"]),
        C("limit-tt-1", "tiktoken encoder alone, 1 thread", "limit", full, nf, threads=1, backend="tiktoken"),
        C("limit-tt-2", "tiktoken encoder alone, 2 threads", "limit", full, nf, threads=2, backend="tiktoken"),
    ]
    if not args.no_hf:
        configs += [
            C(
                "hf-w1",
                "packcli --tokenizer-backend hf --workers 1 (N/4 input)",
                "packcli",
                quarter,
                nq,
                ["--workers", "1", "--tokenizer-backend", "hf"],
            ),
            C(
                "hf-w2",
                "packcli --tokenizer-backend hf --workers 2 (N/4 input)",
                "packcli",
                quarter,
                nq,
                ["--workers", "2", "--tokenizer-backend", "hf"],
            ),
            C("limit-1", "limit: HF encode_batch_fast, 1 thread (N/4 input)", "limit", quarter, nq, threads=1),
            C("limit-2", "limit: HF encode_batch_fast, 2 threads (N/4 input)", "limit", quarter, nq, threads=2),
        ]
    baselines = []
    if not args.no_baselines:
        path, n = (quarter, nq) if args.baseline_input == "quarter" else (full, nf)
        suffix = " (N/4 input)" if args.baseline_input == "quarter" else ""
        for key, module, name, hint in (
            ("datasets", "datasets", "datasets map + group_texts (run_clm)", "pip install datasets"),
            ("trl", "trl", f"datasets map + trl.pack_dataset({args.trl_strategy})", "pip install torch==2.13.0 trl"),
        ):
            missing = have(module)
            if missing:
                print(f"{name}: skipped, {module} does not import ({missing}); {hint}", flush=True)
            else:
                baselines.append(C(key, name + suffix, key, path, n))
    return configs, baselines


def run_all(args, workdir: Path, tokens: int, repeats: int) -> None:
    import platform

    meta = build_corpus(workdir, Path(args.data), args.tokenizer, tokens)
    configs, baselines = make_configs(args, meta)
    scratch = workdir / "scratch"
    scratch.mkdir(exist_ok=True)
    print(
        f"machine: {os.cpu_count()} cores, {platform.machine()}, python {platform.python_version()}; "
        f"seq_len {args.seq_len}; {repeats} round(s)",
        flush=True,
    )
    conversion = Config("conversion", "encodings -> flat int32", "conversion", meta["quarter"]["path"], 0)
    loads = []
    for round_no in range(1, repeats + 1):
        wait_for_quiet(args.max_load, args.max_wait)
        loads.append(load_average())
        todo = configs + (baselines if round_no <= args.baseline_repeats else [])
        print(f"round {round_no}/{repeats} (load {loads[-1]:.2f})", flush=True)
        for config in todo:
            r = config.run(args, scratch)
            seconds = r["out"]["encode_s"] if config.kind == "limit" else r["wall"]
            print(
                f"  {config.name:<62} {r['wall']:7.1f} s wall  {config.tokens / seconds / 1e6:6.2f} M tok/s  "
                f"cpu {r['cpu']:7.1f} s  pss {max(r['maxrss_mb'], r['pss_mb']):7.0f} MB  rss sum {r['tree_mb']:7.0f} MB",
                flush=True,
            )
            loads.append(load_average())
    if not args.no_hf:
        conversion.run(args, scratch)
    if args.json_out:
        Path(args.json_out).write_text(
            json.dumps(
                {
                    "meta": meta,
                    "seq_len": args.seq_len,
                    "loads": loads,
                    "configs": {c.key: {"name": c.name, "runs": c.runs} for c in configs + baselines + [conversion]},
                },
                indent=2,
            )
        )
    report(args, meta, configs, baselines, loads, conversion)


def report(args, meta, configs, baselines, loads, conversion) -> None:
    c = {x.key: x for x in configs + baselines}
    limit = c["limit"]
    print()
    print(
        f"corpus: {meta['full']['tokens']:,} tokens = 4N ({meta['full']['documents']:,} documents, "
        f"{meta['full']['bytes'] / MB:,.0f} MB JSONL); N/4 input: {meta['quarter']['tokens']:,} tokens; "
        f"seq_len {args.seq_len}; best wall time of {len(limit.runs)} round(s); 1-min load {min(loads):.2f}-{max(loads):.2f}"
    )

    def ratio_to(x: Config) -> str:
        if x.kind == "limit":
            ref = c["limit"] if x.tokens == limit.tokens else c.get("limit-2", c["limit-tt-2"])
            return (
                "1.00" if x is limit else f"{x.rate / c['limit'].rate:.2f} of limit" if x.tokens == limit.tokens else ""
            )
        if x.kind == "packcli":
            return f"{x.rate / limit.rate:.2f} of limit" if x.tokens == limit.tokens else ""
        ref = c["bin-parquet" if x.tokens == limit.tokens else "bin-parquet-q"]
        return f"{x.rate / ref.rate:.2f} of packcli"

    rows = []
    for x in configs + baselines:
        b = x.best
        if x.kind == "limit":
            note = (
                f"encode loop only; load {b['out']['load_s']:.1f} s, json read {b['out']['read_s']:.1f} s not counted"
            )
        elif x.kind == "packcli":
            t = b["out"].get("timings", {})
            note = (
                f"backend {b.get('backend')}; in-process {t.get('total', 0):.1f} s: read {t.get('read', 0):.1f}, "
                f"tokenize {t.get('tokenize', 0):.1f}, pack {t.get('pack', 0):.1f}, write {t.get('write', 0):.1f}"
            )
        else:
            note = (
                f"{b['out'].get('rows', 0):,} rows; work in-process {b['out'].get('work_s', 0):.1f} s; "
                f"largest process {max(r['maxrss_mb'] for r in x.runs):,.0f} MB"
            )
        rows.append(
            (
                x.name,
                f"{x.rate / 1e6:.2f}",
                ratio_to(x),
                f"{x.peak_mb:,.0f}",
                f"{x.peak_rss_sum_mb:,.0f}",
                f"{b['wall']:.1f}",
                f"{b['cpu']:.1f}",
                note,
            )
        )
    headers = ("configuration", "M tok/s", "ratio", "peak PSS MB", "RSS sum MB", "wall s", "CPU s", "notes")
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    print("| " + " | ".join(h.ljust(w) for h, w in zip(headers, widths)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in rows:
        print("| " + " | ".join(v.ljust(w) for v, w in zip(r, widths)) + " |")

    print()
    print("targets:")
    checks = []
    for prefix, label in (("", "default backend"), ("hf-", "--tokenizer-backend hf")):
        for mode in ("bin", "concat"):
            for fmt in ("parquet", "npy"):
                x = c.get(f"{prefix}{mode}-{fmt}")
                if x:
                    ratio = x.rate / limit.rate
                    checks.append((f"packcli {mode} {fmt} ({label}) >= 0.9x the limit", ratio >= 0.9, f"{ratio:.2f}x"))
    for key in ("bin-parquet", "concat-npy"):  # the auto backend against the HF limit
        x = c[key]
        if x.best.get("backend") == "tiktoken":
            ratio = x.rate / limit.rate
            checks.append(
                (f"{x.name} with the auto backend (tiktoken) >= 2.5x the HF limit", ratio >= 2.5, f"{ratio:.2f}x")
            )
    big, small = c["bin-parquet"], c["bin-parquet-q"]
    checks.append(
        (
            "peak memory (PSS sum), default options, < 1 GB",
            big.peak_mb < 1024,
            f"{big.peak_mb:,.0f} MB (RSS sum, shared pages counted per process: {big.peak_rss_sum_mb:,.0f} MB)",
        )
    )
    growth = big.peak_mb / small.peak_mb - 1
    checks.append(
        (
            f"peak memory growth for {big.tokens / small.tokens:.1f}x the input < 20%",
            growth < 0.2,
            f"{small.peak_mb:,.0f} -> {big.peak_mb:,.0f} MB ({growth:+.0%})",
        )
    )
    for w1, w2, l1, l2, label in (
        ("w1", "w2", "limit-tt-1", "limit-tt-2", "default backend"),
        ("hf-w1", "hf-w2", "limit-1", "limit-2", "--tokenizer-backend hf"),
    ):
        if w1 in c:
            scaling = c[w2].rate / c[w1].rate
            checks.append(
                (
                    f"--workers 2 >= 1.7x --workers 1 ({label})",
                    scaling >= 1.7,
                    f"{scaling:.2f}x (the tokenizer alone, 2 threads / 1 thread: {c[l2].rate / c[l1].rate:.2f}x)",
                )
            )
    for b in baselines:
        ref = c["bin-parquet" if b.tokens == limit.tokens else "bin-parquet-q"]
        faster, smaller = ref.rate / b.rate, b.peak_mb / ref.peak_mb
        checks.append(
            (
                f"packcli bin parquet beats {b.name}",
                faster > 1 and smaller > 1,
                f"{faster:.1f}x the tokens/s, {smaller:.1f}x less peak memory",
            )
        )
    for what, ok, detail in checks:
        print(f"  [{'PASS' if ok else 'MISS'}] {what}: {detail}")
    if conversion.runs:
        o = conversion.runs[-1]["out"]
        n = o["tokens"]
        print(
            f"\nencodings -> flat int32 ({n:,} tokens, GIL held, best of 3 per batch): "
            f"generator over e.ids (before) {o['generator_s'] / n * 1e9:.0f} ns/token, "
            f"chained e.ids (encode_texts now) {o['chain_s'] / n * 1e9:.0f} ns/token, "
            f"Encoding.merge {o['merge_s'] / n * 1e9:.0f} ns/token; HF encode itself {o['encode_s'] / n * 1e9:.0f} ns/token"
        )


if __name__ == "__main__":
    main()
