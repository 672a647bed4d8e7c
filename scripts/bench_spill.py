"""Benchmark `packcli pack`'s spill, one plan and gather: peak memory against the input size,
rows against the lower bound, `--ids-field` speed against a plain copy, and end-to-end
speed against the tokenizer alone, each a ratio to a baseline measured in the same run.

    python scripts/bench_spill.py --tokenizer bench-out/qwen-tokenizer            # 40M text tokens, 250M ids, 2 rounds
    python scripts/bench_spill.py --tokenizer bench-out/qwen-tokenizer --quick    # 2M text, 8M ids, 1 round: a smoke run
    python scripts/bench_spill.py --code /path/to/packcli-checkout --before /path/to/older-checkout
    python scripts/bench_spill.py --only limit,new-text-n,old-text-n --repeats 3   # a subset, by key

`--code` is the checkout whose packcli is measured (default: this one); `--before`, if
given, another checkout run side by side on the same inputs (same interpreter), for the
memory, row and throughput comparisons. docs/benchmarks/ has the measured figures.

Inputs (built in `--workdir`, or a temporary directory; reused when present):

- text: scripts/bench_pipeline.py's corpus (GSM8K, FastChat, Python sources, repeated) at
  `--tokens` tokens ("4N") and its first quarter ("N"), packed at seq_len 2048.
- ids: Parquet files with one `ids` list<int32> column, random ids below 151,643, lengths
  lognormal (sigma 1, mean about 5,000 tokens), row groups of 1,024 sequences, at
  `--ids-tokens` tokens ("4N") and the first quarter of the same sequences ("N"), packed
  at seq_len 32768 with `--ids-field ids --eos-token 151643`.

Measurements (every packcli run its own subprocess; peak memory is the larger of the
child's ru_maxrss (os.wait4) and the PSS sum of its process tree sampled every 50 ms):

1. peak memory with default options on N and 4N, for text and for ids; the 4N/N ratio.
2. bin rows against ceil(real tokens / seq_len) (real tokens include EOS), text corpus.
3. ids Parquet -> npy and -> Parquet: tokens/s over the copy limit, a child that reads
   the same `ids` column with pyarrow and writes all ids to one .npy. Both are wall time
   around the subprocess (interpreter start-up included for both); the copy's in-process
   time is printed too.
4. end-to-end tokens/s (text N) over bench_pipeline's `limit` child (HF
   encode_batch_fast, all cores, encode loop only), default backend and
   `--tokenizer-backend hf`, for `--code` and `--before`.
5. every packcli run's stage times from its report.

Throughput configurations (the limits, text N, ids 4N) run in every round, interleaved,
best wall time of the rounds; the others (text 4N, ids N, --before on ids) run in the
first round only. Memory is the largest seen. Every run starts after an `os.sync()`, so
none pays for the writeback of the run before it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_pipeline as bp

ROOT = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
MB = bp.MB
TEXT_SEQ_LEN = 2048
IDS_SEQ_LEN = 32768
EOS_ID = 151643
ROW_GROUP = 1024
IDS_OPTS = ["--ids-field", "ids", "--eos-token", str(EOS_ID)]
STAGES = ("read", "tokenize", "spill", "plan", "pack", "write", "total")


# ----------------------------------------------------------------------------- inputs


def build_ids_corpus(workdir: Path, tokens: int, seed: int = 0) -> dict:
    """ids-<tokens>-full.parquet and -quarter.parquet (the same first sequences); reused if present."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    meta_path = workdir / f"ids-{tokens}.json"
    if meta_path.is_file():
        meta = json.loads(meta_path.read_text())
        if all(Path(meta[k]["path"]).is_file() for k in ("full", "quarter")):
            return meta
    meta = {}
    for name, target in (("quarter", tokens // 4), ("full", tokens)):
        rng = np.random.default_rng(seed)
        path = workdir / f"ids-{tokens}-{name}.parquet"
        schema = pa.schema([("ids", pa.list_(pa.int32()))])
        written = sequences = 0
        with pq.ParquetWriter(path, schema) as writer:
            while written < target:
                lengths = np.maximum(1, rng.lognormal(math.log(5000) - 0.5, 1.0, ROW_GROUP).astype(np.int64))
                ends = np.cumsum(lengths)
                keep = int(np.searchsorted(ends, target - written, side="left")) + 1
                lengths = lengths[:keep]
                offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
                values = rng.integers(0, EOS_ID, int(offsets[-1]), dtype=np.int32)
                column = pa.ListArray.from_arrays(pa.array(offsets), pa.array(values))
                writer.write_table(pa.table({"ids": column}, schema=schema))
                written += int(offsets[-1])
                sequences += len(lengths)
        meta[name] = {"path": str(path), "documents": sequences, "tokens": written, "bytes": path.stat().st_size}
    meta_path.write_text(json.dumps(meta, indent=2))
    print(
        f"ids corpus: {meta['full']['tokens']:,} tokens, {meta['full']['documents']:,} sequences, "
        f"{meta['full']['bytes'] / MB:,.0f} MB Parquet",
        flush=True,
    )
    return meta


def build_inputs(args, workdir: Path) -> tuple[dict, dict]:
    """Both corpora, built in a child: this process stays small, because a child's
    ru_maxrss starts at the RSS of the process that forked it."""
    cmd = [
        PYTHON,
        str(Path(__file__).resolve()),
        "--child",
        "inputs",
        "--workdir",
        str(workdir),
        "--tokens",
        args.tokens,
        "--ids-tokens",
        args.ids_tokens,
        "--tokenizer",
        args.tokenizer,
        "--data",
        args.data,
    ]
    done = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True)
    for line in done.stdout.splitlines()[:-1]:
        print(line, flush=True)
    meta = json.loads(done.stdout.splitlines()[-1])
    return meta["text"], meta["ids"]


# ----------------------------------------------------------------------------- children


def child_inputs(args) -> None:
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    text = bp.build_corpus(workdir, Path(args.data), args.tokenizer, bp.parse_count(args.tokens))
    ids = build_ids_corpus(workdir, bp.parse_count(args.ids_tokens))
    print(json.dumps({"text": text, "ids": ids}))


def child_copy(args) -> None:
    """The copy limit: read the `ids` column with pyarrow, write every id to one .npy."""
    t0 = time.perf_counter()
    import numpy as np
    import pyarrow.parquet as pq

    column = pq.read_table(args.corpus, columns=["ids"]).column("ids")
    t1 = time.perf_counter()
    total = sum(len(chunk.flatten()) for chunk in column.chunks)
    with open(args.out, "wb") as f:
        np.lib.format.write_array_header_2_0(f, {"descr": "<i4", "fortran_order": False, "shape": (total,)})
        for chunk in column.chunks:
            f.write(chunk.flatten().to_numpy(zero_copy_only=False).data)
    t2 = time.perf_counter()
    print(json.dumps({"tokens": total, "read_s": t1 - t0, "write_s": t2 - t1, "copy_s": t2 - t0}))


# ----------------------------------------------------------------------------- runs


class Case:
    """One configuration: its command, the tokens it counts, and its runs."""

    def __init__(
        self,
        key: str,
        name: str,
        cmd: list[str],
        tokens: int,
        pythonpath: str | None = None,
        every_round: bool = True,
        limit: bool = False,
    ):
        self.key, self.name, self.cmd, self.tokens = key, name, cmd, tokens
        self.pythonpath, self.every_round, self.limit = pythonpath, every_round, limit
        self.runs: list[dict] = []

    def run(self, scratch: Path) -> dict:
        out = scratch / "out"
        remove(out)
        env = bp.child_env()
        if self.pythonpath:  # the checkout's packcli, not the one in the working directory
            env["PYTHONPATH"], env["PYTHONSAFEPATH"] = self.pythonpath, "1"
        # A start-up cache per checkout: two versions sharing one rebuild each other's entries
        # (a stale entry is rebuilt, never trusted), and every run would start cold.
        env.pop("PACKCLI_CACHE_DIR", None)
        env["XDG_CACHE_HOME"] = str(
            scratch / "caches" / hashlib.sha1((self.pythonpath or "").encode()).hexdigest()[:12]
        )
        cmd = [str(out) if part == "{out}" else part for part in self.cmd]
        os.sync()  # no run pays for the writeback of the one before it (the disk is slower than memory)
        result = bp.run_measured(cmd, env, scratch / "child.json")
        remove(out)
        self.runs.append(result)
        return result

    @property
    def best(self) -> dict:
        return min(self.runs, key=lambda r: r["out"]["encode_s"] if self.limit else r["wall"])

    @property
    def seconds(self) -> float:
        return self.best["out"]["encode_s"] if self.limit else self.best["wall"]

    @property
    def rate(self) -> float:
        return self.tokens / self.seconds

    @property
    def peak_mb(self) -> float:
        return max(max(r["maxrss_mb"], r["pss_mb"]) for r in self.runs)


def remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    elif path.exists():
        path.unlink()


def pack_cmd(corpus: str, tokenizer: str | None, seq_len: int, extra=()) -> list[str]:
    tok = ["--tokenizer", tokenizer] if tokenizer else []
    return [PYTHON, "-m", "packcli", "pack", corpus, *tok, "--seq-len", str(seq_len), "-o", "{out}", "--json", *extra]


def make_cases(args, text: dict, ids: dict) -> dict[str, Case]:
    """Keys: new-/old- prefixes for --code and --before; -4n/-n for the input size."""
    cases = baselines(args, text, ids)
    code = str(Path(args.code).resolve())
    cases += version_cases(args, "new", "", code, text, ids)
    if args.before:
        cases += version_cases(args, "old", " (before)", str(Path(args.before).resolve()), text, ids)
    npy = pack_cmd(ids["full"]["path"], None, IDS_SEQ_LEN, [*IDS_OPTS, "--format", "npy"])
    cases.append(Case("new-ids-npy-4n", "ids 4N, --format npy", npy, ids["full"]["tokens"], code))
    if args.before:
        before = str(Path(args.before).resolve())
        cases.append(Case("old-ids-npy-4n", "ids 4N, --format npy (before)", npy, ids["full"]["tokens"], before))
    return {c.key: c for c in cases}


def baselines(args, text: dict, ids: dict) -> list[Case]:
    tq, jf = text["quarter"], ids["full"]
    limit = [PYTHON, str(Path(bp.__file__).resolve()), "--child", "limit", "--backend", "hf"]
    limit += ["--corpus", tq["path"], "--tokenizer", args.tokenizer]
    copy = [PYTHON, str(Path(__file__).resolve()), "--child", "copy", "--corpus", jf["path"], "--out", "{out}"]
    return [
        Case("limit", "limit: HF encode_batch_fast, all cores (text N)", limit, tq["tokens"], limit=True),
        Case("copy", "copy limit: pyarrow read ids -> one .npy (ids 4N)", copy, jf["tokens"]),
    ]


def version_cases(args, v: str, label: str, path: str, text: dict, ids: dict) -> list[Case]:
    """One checkout's packcli runs; `every_round=False` for those that only give memory."""
    tf, tq, jf, jq = text["full"], text["quarter"], ids["full"], ids["quarter"]
    tok, hf = args.tokenizer, ["--tokenizer-backend", "hf"]
    cases = [
        Case(
            f"{v}-text-4n",
            f"text 4N, default{label}",
            pack_cmd(tf["path"], tok, TEXT_SEQ_LEN),
            tf["tokens"],
            path,
            every_round=False,
        ),
        Case(f"{v}-text-n", f"text N, default{label}", pack_cmd(tq["path"], tok, TEXT_SEQ_LEN), tq["tokens"], path),
        Case(
            f"{v}-text-hf-n",
            f"text N, --tokenizer-backend hf{label}",
            pack_cmd(tq["path"], tok, TEXT_SEQ_LEN, hf),
            tq["tokens"],
            path,
        ),
        Case(
            f"{v}-ids-n",
            f"ids N, default (parquet){label}",
            pack_cmd(jq["path"], None, IDS_SEQ_LEN, IDS_OPTS),
            jq["tokens"],
            path,
            every_round=False,
        ),
    ]
    if v == "new" or args.before_ids_4n:
        cmd = pack_cmd(jf["path"], None, IDS_SEQ_LEN, IDS_OPTS)
        cases.append(
            Case(f"{v}-ids-4n", f"ids 4N, default (parquet){label}", cmd, jf["tokens"], path, every_round=(v == "new"))
        )
    return cases


def warm_up(cases: dict[str, Case], text: dict, ids: dict, scratch: Path) -> None:
    """One unmeasured run of every packcli configuration on a slice of its input: Numba
    compiles a checkout's kernels on its first run and caches them, and that compile
    (seconds, and LLVM's memory) is not what the figures are about."""
    import itertools

    slices = {}
    with open(text["quarter"]["path"], encoding="utf-8") as f, open(scratch / "warm.jsonl", "w") as w:
        w.writelines(itertools.islice(f, 300))
    slices[text["quarter"]["path"]] = slices[text["full"]["path"]] = str(scratch / "warm.jsonl")
    subprocess.run(
        [
            PYTHON,
            "-c",
            "import sys, pyarrow.parquet as pq; "
            "pq.write_table(pq.ParquetFile(sys.argv[1]).read_row_group(0).slice(0, 64), sys.argv[2])",
            ids["quarter"]["path"],
            str(scratch / "warm.parquet"),
        ],
        check=True,
    )
    slices[ids["quarter"]["path"]] = slices[ids["full"]["path"]] = str(scratch / "warm.parquet")
    seen = set()
    for case in cases.values():
        if case.limit or case.pythonpath is None:
            continue
        cmd = [slices.get(part, part) for part in case.cmd]
        if (case.pythonpath, tuple(cmd)) in seen:
            continue
        seen.add((case.pythonpath, tuple(cmd)))
        warm = Case("warm", "warm-up", cmd, 1, case.pythonpath)
        warm.run(scratch)
    print(f"warm-up: {len(seen)} runs on slices of the inputs (not counted)", flush=True)


def run_rounds(args, cases: dict[str, Case], scratch: Path) -> list[float]:
    loads = []
    for round_no in range(1, args.repeats + 1):
        bp.wait_for_quiet(args.max_load, args.max_wait)
        loads.append(bp.load_average())
        print(f"round {round_no}/{args.repeats} (load {loads[-1]:.2f})", flush=True)
        for case in cases.values():
            if round_no > 1 and not case.every_round:
                continue
            r = case.run(scratch)
            seconds = r["out"]["encode_s"] if case.limit else r["wall"]
            print(
                f"  {case.name:<48} {r['wall']:7.1f} s wall  {r['cpu']:6.1f} s CPU  {case.tokens / seconds / 1e6:7.2f} M tok/s  "
                f"peak {max(r['maxrss_mb'], r['pss_mb']):6.0f} MB  (maxrss {r['maxrss_mb']:.0f}, "
                f"pss sum {r['pss_mb']:.0f})  {stage_line(r['out'])}",
                flush=True,
            )
            loads.append(bp.load_average())
    return loads


def stage_line(report: dict) -> str:
    t = report.get("timings")
    if not t:
        return ""
    return " ".join(f"{k} {t[k]:.1f}" for k in STAGES if k in t)


# ----------------------------------------------------------------------------- figures


Figure = tuple[str, str, str, "bool | None"]


def check(name: str, value: str, target: str, met: bool, counts: bool) -> Figure:
    """A figure; its target and verdict only where it is the code under test's."""
    return (name, value, target, met) if counts else (name, value, "", None)


def figures(cases: dict[str, Case]) -> list[Figure]:
    """(figure, value, target, met or None) for the table."""
    return memory_figures(cases) + row_figures(cases) + copy_figures(cases) + speed_figures(cases)


def memory_figures(c: dict[str, Case]) -> list[Figure]:
    rows = []
    for kind in ("text", "ids"):
        for v, label in (("new", ""), ("old", " (before)")):
            big, small, mine = c.get(f"{v}-{kind}-4n"), c.get(f"{v}-{kind}-n"), v == "new"
            for size, case in (("N", small), ("4N", big)):
                if case is not None:
                    mb = case.peak_mb
                    rows.append(check(f"peak MB, {kind} {size}{label}", f"{mb:,.0f}", "< 600", mb < 600, mine))
            if big is not None and small is not None:
                ratio = big.peak_mb / small.peak_mb
                rows.append(check(f"peak 4N / N, {kind}{label}", f"{ratio:.2f}x", "<= 1.1x", ratio <= 1.1, mine))
    return rows


def copy_figures(c: dict[str, Case]) -> list[Figure]:
    copy, rows = c.get("copy"), []
    for v, which in (("new", ""), ("old", " (before)")):
        for key, label, goal in ((f"{v}-ids-npy-4n", "npy", 0.5), (f"{v}-ids-4n", "parquet", 0.3)):
            if copy is not None and key in c:
                ratio = c[key].rate / copy.rate
                name = f"ids -> {label}{which} / copy limit ({copy.rate / 1e6:.0f} M tok/s)"
                rows.append(check(name, f"{ratio:.2f}x", f">= {goal}x", ratio >= goal, v == "new"))
    return rows


def speed_figures(c: dict[str, Case]) -> list[Figure]:
    limit, rows = c.get("limit"), []
    for suffix, label in (("text-n", "default backend"), ("text-hf-n", "--tokenizer-backend hf")):
        new, old = c.get(f"new-{suffix}"), c.get(f"old-{suffix}")
        if limit is None or new is None:
            continue
        faster = old is not None and new.rate >= old.rate
        rows.append(check(f"text N / limit, {label}", f"{new.rate / limit.rate:.2f}x", ">= before", faster, bool(old)))
        if old:
            rows.append((f"text N / limit, {label} (before)", f"{old.rate / limit.rate:.2f}x", "", None))
            ratio = f"{new.rate / old.rate:.2f}x"
            rows.append(check(f"text N speed, new / before, {label}", ratio, ">= 1.00x", faster, True))
    return rows


def row_figures(c: dict[str, Case]) -> list[tuple[str, str, str, bool | None]]:
    rows = []
    for key in ("new-text-4n", "old-text-4n", "new-ids-4n", "old-ids-4n"):
        case = c.get(key)
        if case is None:
            continue
        report = case.best["out"]
        seq_len = TEXT_SEQ_LEN if "text" in key else IDS_SEQ_LEN
        bound = math.ceil(report["real_tokens"] / seq_len)
        extra = report["rows"] / bound - 1
        target = key == "new-text-4n"
        name = f"rows / ceil(tokens / seq_len), {case.name} ({report.get('sequences_packed', 0):,} segments)"
        rows.append(
            (
                name,
                f"{report['rows']:,} / {bound:,} = +{extra:.4%}",
                "<= +0.01%" if target else "",
                extra <= 1e-4 if target else None,
            )
        )
    return rows


def print_runs(cases: dict[str, Case]) -> None:
    headers = (
        "configuration",
        "best wall s",
        "M tok/s",
        "peak MB",
        "maxrss MB",
        "PSS sum MB",
        "rows",
        "stages (s, best run)",
    )
    table = []
    for case in cases.values():
        b = case.best
        table.append(
            (
                case.name,
                f"{b['wall']:.1f}",
                f"{case.rate / 1e6:.2f}",
                f"{case.peak_mb:,.0f}",
                f"{max(r['maxrss_mb'] for r in case.runs):,.0f}",
                f"{max(r['pss_mb'] for r in case.runs):,.0f}",
                f"{b['out'].get('rows', '')}",
                stage_line(b["out"]) or note(case),
            )
        )
    print_table(headers, table)


def note(case: Case) -> str:
    o = case.best["out"]
    if case.limit:
        return f"encode loop {o['encode_s']:.1f} (load {o['load_s']:.1f}, json read {o['read_s']:.1f} not counted)"
    return f"in-process: read {o.get('read_s', 0):.1f}, write {o.get('write_s', 0):.1f}"


def print_table(headers, rows) -> None:
    widths = [max(len(h), *(len(str(r[i])) for r in rows)) for i, h in enumerate(headers)]
    print("| " + " | ".join(h.ljust(w) for h, w in zip(headers, widths)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in rows:
        print("| " + " | ".join(str(v).ljust(w) for v, w in zip(r, widths)) + " |")


def report(args, text: dict, ids: dict, cases: dict[str, Case], loads: list[float]) -> None:
    print()
    print(
        f"text: 4N {text['full']['tokens']:,} tokens ({text['full']['documents']:,} documents), "
        f"N {text['quarter']['tokens']:,}; seq_len {TEXT_SEQ_LEN}"
    )
    print(
        f"ids: 4N {ids['full']['tokens']:,} tokens ({ids['full']['documents']:,} sequences, "
        f"{ids['full']['bytes'] / MB:,.0f} MB), N {ids['quarter']['tokens']:,}; seq_len {IDS_SEQ_LEN}"
    )
    print(f"{args.repeats} round(s); 1-min load {min(loads):.2f}-{max(loads):.2f}")
    print()
    print_runs(cases)
    print()
    table = [
        (name, value, target, "" if met is None else ("met" if met else "MISSED"))
        for name, value, target, met in figures(cases)
    ]
    print_table(("figure", "value", "target", ""), table)


# ----------------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", default="40M", help="text corpus (4N) in tokens of the tokenizer (default 40M)")
    parser.add_argument("--ids-tokens", default="250M", help="ids corpus (4N) in tokens (default 250M)")
    parser.add_argument("--quick", action="store_true", help="2M text tokens, 8M ids, 1 round: a smoke run")
    parser.add_argument("--repeats", type=int, default=2, help="rounds; speed figures are the best over them")
    parser.add_argument("--tokenizer", default="/tmp/qwen-tok")
    parser.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    parser.add_argument("--code", default=str(ROOT), help="checkout whose packcli is measured (default: this one)")
    parser.add_argument("--before", help="another checkout to run side by side (optional)")
    parser.add_argument(
        "--no-before-ids-4n", dest="before_ids_4n", action="store_false", help="run --before on the ids N input only"
    )
    parser.add_argument("--only", help="comma-separated configuration keys to run (e.g. limit,new-text-n,old-text-n)")
    parser.add_argument("--workdir", help="keep the inputs here and reuse them (default: a temporary directory)")
    parser.add_argument("--max-load", type=float, default=1.5)
    parser.add_argument("--max-wait", type=float, default=120)
    parser.add_argument("--json-out", help="also write every run as JSON here")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--corpus", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        {"copy": child_copy, "inputs": child_inputs}[args.child](args)
        return
    if args.quick:
        args.tokens, args.ids_tokens, args.repeats = "2M", "8M", 1
    if not Path(args.tokenizer).exists():
        print(f"building the Qwen tokenizer in {args.tokenizer}", flush=True)
        subprocess.run([PYTHON, str(ROOT / "scripts" / "make_bench_tokenizer.py"), args.tokenizer], check=True)
    measure(args)


def measure(args) -> None:
    temp = None if args.workdir else tempfile.TemporaryDirectory(prefix="packcli-spill-bench-")
    workdir = Path(args.workdir or temp.name)
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        text, ids = build_inputs(args, workdir)
        cases = make_cases(args, text, ids)
        if args.only:
            cases = {k: cases[k] for k in args.only.split(",")}
        scratch = workdir / "scratch"
        scratch.mkdir(exist_ok=True)
        print(
            f"machine: {os.cpu_count()} cores, {platform.machine()}, python {platform.python_version()}; "
            f"code {args.code}; before {args.before or '-'}",
            flush=True,
        )
        warm_up(cases, text, ids, scratch)
        loads = run_rounds(args, cases, scratch)
        if args.json_out:
            Path(args.json_out).write_text(
                json.dumps(
                    {
                        "text": text,
                        "ids": ids,
                        "loads": loads,
                        "cases": {k: {"name": c.name, "tokens": c.tokens, "runs": c.runs} for k, c in cases.items()},
                    },
                    indent=1,
                )
            )
        report(args, text, ids, cases, loads)
    finally:
        if temp is not None:
            temp.cleanup()


if __name__ == "__main__":
    main()
