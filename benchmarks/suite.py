"""The benchmarks: each a short function from the inputs to its cases and ratios.

A benchmark function takes the Context (sizes, inputs, the commands of a program) and
returns a Benchmark: the cases the runner measures for every program, and the ratios
printed when one program runs alone (a figure over a baseline of the same rounds).
Commands are built for a program, so the same case measures the working tree's packcli
and a commit's: `ctx.pack(program, ...)` is its `packcli pack`, `ctx.entry(program, ...)`
one of benchmarks/entries run by its interpreter.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.data import BUNDLED, Corpus, Inputs
from benchmarks.programs import Program
from benchmarks.runner import ENTRIES, HIGHER, LOWER, Benchmark, Case, Failed, Ratio, flatten, parse_output

BENCHMARKS: dict[str, Callable[[Context], Benchmark]] = {}


def benchmark(name: str) -> Callable[[Callable[[Context], Benchmark]], Callable[[Context], Benchmark]]:
    def register(function: Callable[[Context], Benchmark]) -> Callable[[Context], Benchmark]:
        BENCHMARKS[name] = function
        return function

    return register


@dataclass
class Context:
    """What every benchmark function is given: the mode, the inputs, the commands."""

    quick: bool
    tokenizer: str
    inputs: Inputs
    work: Path
    scale: float = 1.0
    prepared: dict[tuple[str, str], Path] = field(default_factory=dict)

    def size(self, full: float, quick: float) -> int:
        """A size for this mode: `quick` in a smoke run, else `full` times --scale."""
        return int(quick if self.quick else full * self.scale)

    @property
    def repeats(self) -> int:
        return 1 if self.quick else 3

    def entry(self, program: Program, name: str, *args: object) -> list[str]:
        return [program.python, str(ENTRIES / f"{name}.py"), *map(str, args)]

    def pack(self, program: Program, corpus: Path | Corpus, out: Path, *options: object) -> list[str]:
        path = corpus.path if isinstance(corpus, Corpus) else corpus
        return [program.packcli, "pack", str(path), "-o", str(out), "--json", "--overwrite", *map(str, options)]

    def ids_options(self) -> list[object]:
        eos = self.inputs.eos()
        return ["--ids-field", "ids", "--eos-token", eos, "--pad-id", eos]

    def packed(self, program: Program, name: str, corpus: Corpus, *options: object) -> Path:
        """A packed output of `corpus` made by the program's own `pack` (untimed), once per
        program and name: the input of the benchmarks that read an output."""
        key = (program.label, name)
        if key not in self.prepared:
            out = self.work / "prepared" / program.label / name
            shutil.rmtree(out, ignore_errors=True)
            out.parent.mkdir(parents=True, exist_ok=True)
            done = subprocess.run(
                self.pack(program, corpus, out, *options),
                capture_output=True,
                text=True,
                env=program.environ(self.work / "caches" / program.label),
                cwd=out.parent,
            )
            if done.returncode != 0:
                lines = done.stderr.strip().splitlines() or ["no message"]
                raise Failed(f"its pack of the input failed: {lines[-1][:200]}", True)
            self.prepared[key] = out
        return self.prepared[key]


def manifest_rows(out: Path) -> int:
    return int(json.loads((out / "manifest.json").read_text())["totals"]["rows"])


# ---------------------------------------------------------------------------- start-up

IMPORTS = "import numpy, pyarrow, numba, tokenizers"


@benchmark("startup")
def startup(ctx: Context) -> Benchmark:
    """`packcli pack` of five documents, warm and cold start-up cache, against importing the
    libraries any run needs (the program's own interpreter); `packcli --version`."""
    five = ctx.inputs.five_documents()
    cases = [
        Case("import-baseline", lambda p, s: [p.python, "-c", IMPORTS], baseline=True),
        Case("version", lambda p, s: [p.packcli, "--version"]),
    ]
    ratios = []
    tokenizers = dict.fromkeys([ctx.tokenizer, BUNDLED])
    for tokenizer in tokenizers:
        tag = "demo" if tokenizer == BUNDLED else "tok"

        def pack(p: Program, s: Path, tokenizer: str = tokenizer, *extra: str) -> list[str]:
            return ctx.pack(p, five, s / "out", "--tokenizer", tokenizer, "--seq-len", 512, *extra)

        cases += [
            Case(f"pack-warm-{tag}", pack),
            Case(f"pack-cold-{tag}", lambda p, s, pack=pack: [*pack(p, s), "--no-cache"]),
        ]
        for figure, what in (("wall_s", "wall"), ("cpu_s", "CPU")):
            ratios.append(
                Ratio(
                    f"pack {tag}, warm / imports, {what}",
                    (f"pack-warm-{tag}", figure),
                    ("import-baseline", figure),
                    ("<=", 1.5),
                )
            )
            ratios.append(
                Ratio(f"pack {tag}, cold / imports, {what}", (f"pack-cold-{tag}", figure), ("import-baseline", figure))
            )
    return Benchmark(
        "startup", cases, ratios, [f"five documents, tokenizers: {', '.join(tokenizers)}"], 1 if ctx.quick else 7
    )


# ---------------------------------------------------------------------------- pack


def report_rows(figure: str = "rows") -> dict[str, str]:
    return {figure: LOWER}


@benchmark("pack-text")
def pack_text(ctx: Context) -> Benchmark:
    """`pack` of real text end to end (N and 4N tokens): time, peak memory, rows; against
    the tokenizer alone and, in a full run, the `datasets` recipes."""
    full = ctx.inputs.text(ctx.size(8e6, 2e5))
    n = ctx.inputs.text(full.tokens // 4)
    tok = ["--tokenizer", ctx.tokenizer, "--seq-len", 2048]
    figures = {"rows": LOWER, "timings.write": LOWER}

    def pack(corpus: Corpus, *extra: object) -> Callable[[Program, Path], list[str]]:
        return lambda p, s: ctx.pack(p, corpus, s / "out", *tok, *extra)

    cases = [
        Case(
            "limit-n",
            lambda p, s: ctx.entry(p, "limit", ctx.inputs.tokenizer_file(), n.path),
            {"encode_s": LOWER},
            baseline=True,
        ),
        Case("default-n", pack(n), figures, tree=True),
        Case("default-4n", pack(full), figures, tree=True, warmup=False),
        Case("hf-n", pack(n, "--tokenizer-backend", "hf"), figures),
        Case("concat-npy-n", pack(n, "--mode", "concat", "--format", "npy"), figures),
        Case("workers1-n", pack(n, "--workers", 1), figures),
    ]
    ratios = [
        Ratio("default N: tokens/s over the HF limit's", ("limit-n", "encode_s"), ("default-n", "wall_s")),
        Ratio("hf backend N: tokens/s over the HF limit's", ("limit-n", "encode_s"), ("hf-n", "wall_s"), (">=", 0.9)),
        Ratio("peak RSS 4N / N", ("default-4n", "peak_rss_mb"), ("default-n", "peak_rss_mb"), ("<=", 1.1)),
        Ratio("tree PSS 4N / N", ("default-4n", "tree_pss_mb"), ("default-n", "tree_pss_mb"), ("<=", 1.2)),
        Ratio("rows 4N / lower bound", ("default-4n", "rows"), ("default-4n", "lower_bound_rows"), ("<=", 1.0001)),
        Ratio("--workers 1 / default (all cores), wall", ("workers1-n", "wall_s"), ("default-n", "wall_s")),
        Ratio(
            "rows 4N over the unpacked rows (a sequence a row)",
            ("default-4n", "rows"),
            ("default-4n", "no_packing.rows"),
        ),
    ]
    if not ctx.quick and isinstance(ctx.tokenizer, str) and Path(ctx.tokenizer).is_dir():
        for recipe in ("run_clm", "trl"):
            cases.append(
                Case(
                    f"{recipe}-n",
                    lambda p, s, r=recipe: ctx.entry(
                        p, "clm", r, ctx.tokenizer, n.path, s / "out", s / "out" / "cache"
                    ),
                    baseline=True,
                    warmup=False,
                    tree=True,
                )
            )
            ratios.append(
                Ratio(f"{recipe} recipe / pack, wall", (f"{recipe}-n", "wall_s"), ("default-n", "wall_s"), (">", 1))
            )
            ratios.append(
                Ratio(
                    f"{recipe} recipe / pack, tree PSS",
                    (f"{recipe}-n", "tree_pss_mb"),
                    ("default-n", "tree_pss_mb"),
                    (">", 1),
                )
            )
    notes = [f"text: 4N {full.tokens:,} tokens ({full.documents:,} documents), N {n.tokens:,}; seq_len 2048"]
    return Benchmark("pack-text", cases, ratios, notes, ctx.repeats)


@benchmark("pack-ids")
def pack_ids(ctx: Context) -> Benchmark:
    """`pack --ids-field` of long pre-tokenized documents (N and 4N tokens, seq_len 32768):
    peak memory flat in the input, rows, speed against a plain copy of the same ids."""
    full, n = ctx.inputs.ids("long", ctx.size(16e6, 4e5), 5000)
    ids = [*ctx.ids_options(), "--seq-len", 32768]
    figures = {"rows": LOWER, "timings.write": LOWER}
    cases = [
        Case("copy-4n", lambda p, s: ctx.entry(p, "copy_ids", full.path, s / "out"), {"copy_s": LOWER}, baseline=True),
        Case("parquet-n", lambda p, s: ctx.pack(p, n, s / "out", *ids), figures),
        Case("parquet-4n", lambda p, s: ctx.pack(p, full, s / "out", *ids), figures, warmup=False),
        Case("npy-4n", lambda p, s: ctx.pack(p, full, s / "out", *ids, "--format", "npy"), figures),
    ]
    ratios = [
        Ratio("peak RSS 4N / N", ("parquet-4n", "peak_rss_mb"), ("parquet-n", "peak_rss_mb"), ("<=", 1.1)),
        Ratio("-> npy, speed over the copy's", ("copy-4n", "wall_s"), ("npy-4n", "wall_s"), (">=", 0.5)),
        Ratio("-> parquet, speed over the copy's", ("copy-4n", "wall_s"), ("parquet-4n", "wall_s"), (">=", 0.3)),
        Ratio("rows 4N / lower bound", ("parquet-4n", "rows"), ("parquet-4n", "lower_bound_rows"), ("<=", 1.0001)),
    ]
    notes = [
        f"ids: 4N {full.tokens:,} tokens ({full.documents:,} sequences, mean 5,000), N {n.tokens:,}; seq_len 32768"
    ]
    return Benchmark("pack-ids", cases, ratios, notes, ctx.repeats)


@benchmark("pack-mix")
def pack_mix(ctx: Context) -> Benchmark:
    """`pack --mix` of three sources of very different sizes (the largest sampled down, the
    smallest repeated), against the same files packed as one corpus, at N and 4N tokens:
    the mixture's target is the corpus's tokens, so the two write as many."""
    tok = ["--tokenizer", ctx.tokenizer, "--seq-len", 2048]
    cases, ratios = [], []
    for tag, big_tokens in (("n", ctx.size(2e6, 5e4)), ("4n", ctx.size(8e6, 2e5))):
        sources = ctx.inputs.sources(big_tokens)
        target = sum(c.tokens + c.documents for c in sources)  # EOS after every document
        mix = ctx.work / f"mix-{tag}.toml"
        mix.parent.mkdir(parents=True, exist_ok=True)
        body = [f"seed = 1\ntarget_tokens = {target}\n"]
        for name, corpus, weight in zip(("big", "medium", "small"), sources, (0.5, 0.3, 0.2)):
            body.append(f'[[source]]\nname = "{name}"\npaths = ["{corpus.path}"]\nweight = {weight}\n')
        mix.write_text("\n".join(body), encoding="utf-8")
        paths = [str(c.path) for c in sources]

        def one(p: Program, s: Path, paths: list[str] = paths) -> list[str]:
            return [p.packcli, "pack", *paths, "-o", str(s / "out"), "--json", "--overwrite", *map(str, tok)]

        def mixed(p: Program, s: Path, mix: Path = mix) -> list[str]:
            return [p.packcli, "pack", "--mix", str(mix), "-o", str(s / "out"), "--json", "--overwrite", *map(str, tok)]

        figures = {"rows": LOWER, "real_tokens": HIGHER}
        cases += [
            Case(f"one-corpus-{tag}", one, figures, tree=True, warmup=tag == "n"),
            Case(f"mixture-{tag}", mixed, figures, tree=True, warmup=tag == "n"),
        ]
        ratios += [
            Ratio(
                f"{tag}: mixture / one corpus, wall",
                (f"mixture-{tag}", "wall_s"),
                (f"one-corpus-{tag}", "wall_s"),
                ("<=", 1.1),
            ),
            Ratio(
                f"{tag}: mixture / one corpus, peak RSS",
                (f"mixture-{tag}", "peak_rss_mb"),
                (f"one-corpus-{tag}", "peak_rss_mb"),
                ("<=", 1.1),
            ),
            Ratio(
                f"{tag}: real tokens, mixture / one corpus",
                (f"mixture-{tag}", "real_tokens"),
                (f"one-corpus-{tag}", "real_tokens"),
            ),
        ]
    notes = [
        "sources: the shuffled documents (N: 2M tokens, 4N: 8M; weight 0.5), GSM8K's (0.3), forty Python files (0.2)",
        "the mixture's target_tokens is the one corpus's tokens: the wall ratio is the inverse of the tokens/s ratio",
    ]
    return Benchmark("pack-mix", cases, ratios, notes, ctx.repeats)


def pair_bound(ctx: Context, seq_len: int) -> Callable[[Program, Path, dict[str, float]], dict[str, float]]:
    """The fewest rows of `seq_len` the run's pairs fit in whole (`pair_lb_rows`), read from
    its output by an entry in the program's interpreter."""

    def after(p: Program, scratch: Path, figures: dict[str, float]) -> dict[str, float]:
        done = subprocess.run(
            ctx.entry(p, "pair_bound", scratch / "out", seq_len),
            capture_output=True,
            text=True,
            env=p.environ(ctx.work / "caches" / p.label),
            cwd=scratch,
        )
        printed = parse_output(done.stdout)
        if done.returncode != 0:
            lines = done.stderr.strip().splitlines() or ["no message"]
            raise Failed(str(printed.get("n/a", lines[-1][:300])), "n/a" in printed)
        return flatten(printed)

    return after


@benchmark("pack-pairs")
def pack_pairs(ctx: Context) -> Benchmark:
    """`pack` of preference pairs (chosen and rejected in one row, never apart) against the
    same texts as SFT records, two per pair, at N and 4N pairs: tokens/s, and rows against
    the fewest whole pairs fit in, by bfd and by concat."""
    n = ctx.size(len(ctx.inputs.gsm8k_texts()), 500)
    scales = [("n", n)] + ([] if ctx.quick else [("4n", 4 * n)])
    pair_fields = ["--prompt-field", "prompt", "--chosen-field", "chosen", "--rejected-field", "rejected"]
    sft_fields = ["--prompt-field", "prompt", "--completion-field", "completion"]
    seq_len = 2048
    tok = ["--tokenizer", ctx.tokenizer, "--seq-len", seq_len]
    figures = {"rows": LOWER, "tokens_per_second": HIGHER}
    cases, ratios, sizes = [], [], []
    for tag, count in scales:
        pairs, sft = ctx.inputs.pairs(count)
        sizes.append(f"{tag.upper()} {count:,} pairs")

        def pack(corpus: Corpus, *extra: object) -> Callable[[Program, Path], list[str]]:
            return lambda p, s: ctx.pack(p, corpus, s / "out", *tok, *extra)

        cases += [
            Case(f"sft-{tag}", pack(sft, *sft_fields), figures, warmup=tag == "n"),
            Case(f"pairs-{tag}", pack(pairs, *pair_fields), figures, after=pair_bound(ctx, seq_len), warmup=tag == "n"),
            Case(f"concat-{tag}", pack(pairs, *pair_fields, "--mode", "concat"), {"rows": LOWER}, warmup=tag == "n"),
        ]
        ratios += [
            Ratio(
                f"{tag}: pairs tokens/s over SFT's",
                (f"pairs-{tag}", "tokens_per_second"),
                (f"sft-{tag}", "tokens_per_second"),
                (">=", 0.85),
            ),
            Ratio(f"{tag}: SFT wall / pairs wall", (f"sft-{tag}", "wall_s"), (f"pairs-{tag}", "wall_s")),
            Ratio(f"{tag}: SFT CPU / pairs CPU", (f"sft-{tag}", "cpu_s"), (f"pairs-{tag}", "cpu_s")),
            Ratio(f"{tag}: tokens read, pairs / SFT", (f"pairs-{tag}", "tokens_read"), (f"sft-{tag}", "tokens_read")),
            Ratio(
                f"{tag}: bfd rows over the lower bound for whole pairs",
                (f"pairs-{tag}", "rows"),
                (f"pairs-{tag}", "pair_lb_rows"),
                ("<=", 1.01),
            ),
            Ratio(
                f"{tag}: concat rows over the lower bound for whole pairs",
                (f"concat-{tag}", "rows"),
                (f"pairs-{tag}", "pair_lb_rows"),
            ),
            Ratio(f"{tag}: SFT records' rows over the pairs'", (f"sft-{tag}", "rows"), (f"pairs-{tag}", "rows")),
        ]
    notes = [
        f"GSM8K train as preference pairs ({', '.join(sizes)}): prompt the question, chosen the answer, rejected "
        "the answer with one number of its working changed and its final answer off by one; SFT: the same "
        f"texts as prompt/completion records, two per pair; seq_len {seq_len}, Parquet"
    ]
    return Benchmark("pack-pairs", cases, ratios, notes, ctx.repeats)


@benchmark("pack-short")
def pack_short(ctx: Context) -> Benchmark:
    """`pack --ids-field` of many short sequences (mean 37 tokens), N and 4N sequences, bin
    and concat: peak memory against the number of sequences; the write stage per token
    against the same tokens as 2,048-token documents."""
    big, small = ctx.inputs.ids("short", ctx.size(37e6, 1.5e6), 37, row_group=1 << 16)
    documents = ctx.inputs.documents_ids(small.tokens)
    ids = [*ctx.ids_options(), "--seq-len", 2048, "--format", "npy"]
    figures = {"rows": LOWER, "timings.write": LOWER}

    def pack(corpus: Corpus, mode: str) -> Callable[[Program, Path], list[str]]:
        return lambda p, s: ctx.pack(p, corpus, s / "out", *ids, "--mode", mode)

    cases = [
        Case("bin-n", pack(small, "bin"), figures),
        Case("bin-4n", pack(big, "bin"), figures, warmup=False),
        Case("concat-n", pack(small, "concat"), figures),
        Case("concat-4n", pack(big, "concat"), figures, warmup=False),
        Case("documents-n", pack(documents, "bin"), figures),
    ]
    ratios = [
        Ratio("bin: peak RSS 4N / N", ("bin-4n", "peak_rss_mb"), ("bin-n", "peak_rss_mb"), ("<=", 1.1)),
        Ratio("concat: peak RSS 4N / N", ("concat-4n", "peak_rss_mb"), ("concat-n", "peak_rss_mb"), ("<=", 1.1)),
        Ratio(
            "write stage, short / documents (same tokens)",
            ("bin-n", "timings.write"),
            ("documents-n", "timings.write"),
            ("<=", 1.25),
        ),
    ]
    notes = [
        f"short: 4N {big.documents:,} sequences ({big.tokens:,} tokens), N {small.documents:,}; "
        f"documents: {documents.documents:,} of 2,047 ids; seq_len 2048, npy"
    ]
    return Benchmark("pack-short", cases, ratios, notes, ctx.repeats)


# ---------------------------------------------------------------------------- plan


@benchmark("plan")
def plan(ctx: Context) -> Benchmark:
    """The planner alone: a plan from the counts of a billion sequences, grouped plans,
    and the repair pass after every packer on synthetic and real lengths."""
    sequences = ctx.size(1e9, 1e6)
    lengths = {seq_len: ctx.inputs.segment_lengths(seq_len) for seq_len in (512, 1024)}
    repair_figures = {f"{a}_{f}": LOWER for a in ("ffd", "bfd", "spfhp", "lpfhp") for f in ("rows", "pass_s")}
    cases = [
        Case(
            "from-counts",
            lambda p, s: ctx.entry(
                p, "plan", "from-counts", "--sequences", sequences, "--shards", 10 if ctx.quick else 100
            ),
            {"plan_s": LOWER, "rows": LOWER, "shards_s": LOWER, "plan_mb": LOWER},
        ),
        Case(
            "groups",
            lambda p, s: ctx.entry(
                p, "plan", "groups", "--n", ctx.size(1e6, 2e4), "--rounds", ctx.repeats, "--seq-len", 2048
            ),
            {"plain_s": LOWER, "grouped_s": LOWER, "rows": LOWER, "plan_mb": LOWER},
        ),
        Case(
            "repair-lognormal",
            lambda p, s: ctx.entry(
                p, "plan", "repair", "--n", ctx.size(2e5, 2e4), "--capacity", 2048, "--rounds", ctx.repeats
            ),
            repair_figures,
        ),
    ]
    for seq_len, path in lengths.items():
        cases.append(
            Case(
                f"repair-real-{seq_len}",
                lambda p, s, path=path, seq_len=seq_len: ctx.entry(
                    p,
                    "plan",
                    "repair",
                    "--lengths",
                    path,
                    "--n",
                    ctx.size(1e9, 2000),
                    "--capacity",
                    seq_len,
                    "--rounds",
                    ctx.repeats,
                ),
                repair_figures,
            )
        )
    ratios = [
        Ratio(
            "from counts: peak RSS over the process after imports and kernels",
            ("from-counts", "peak_rss_mb"),
            ("from-counts", "base_rss_mb"),
        ),
        Ratio(
            "from counts: rows over the lower bound",
            ("from-counts", "rows"),
            ("from-counts", "lb_rows"),
            ("<=", 1.0001),
        ),
        Ratio("from counts: plan seconds", ("from-counts", "plan_s"), None, ("<", 10)),
        Ratio("groups: rows over the per-group lower bounds, %", ("groups", "gap_pct"), None, ("<=", 0.05)),
    ]
    for seq_len in lengths:
        ratios.append(
            Ratio(
                f"repair, real at {seq_len}: bfd rows / lower bound",
                (f"repair-real-{seq_len}", "bfd_rows"),
                (f"repair-real-{seq_len}", "lb_rows"),
                ("<=", 1.0001),
            )
        )
    notes = [
        f"from counts: {sequences:,} lognormal lengths (mean 500) at 8192; real lengths: the text documents' segments"
    ]
    return Benchmark("plan", cases, ratios, notes, ctx.repeats)


# ---------------------------------------------------------------------------- kernels


@benchmark("kernels")
def kernels(ctx: Context) -> Benchmark:
    """The packing kernels on synthetic and real length sets: CPU time against np.sort of
    the same lengths, rows against the bounds, the cost of --buffer-size windows, TRL."""
    n = ctx.size(1e6, 1e5)
    sets = [("lognormal", n, 2048), ("lognormal", n, 8192), ("uniform", n, 2048), ("bimodal", n, 2048)]
    if not ctx.quick:
        sets.append(("lognormal", 10 * n, 2048))
    speed = {f"{a}_{f}": LOWER for a in ("bfd", "spfhp", "lpfhp") for f in ("s", "rows")}
    rounds = ctx.repeats

    def kernel_case(name: str, *args: object, **kwargs: object) -> Case:
        return Case(name, lambda p, s: ctx.entry(p, "kernels", *args, "--rounds", rounds), speed, **kwargs)  # type: ignore[arg-type]

    cases = [
        kernel_case(f"{kind}-{size:,}-{capacity}", "--set", kind, "--n", size, "--capacity", capacity)
        for kind, size, capacity in sets
    ]
    gsm8k = ctx.inputs.gsm8k_lengths()
    cases.append(kernel_case("gsm8k-2048", "--lengths", gsm8k, "--capacity", 2048))
    windows = "1000,10000" if ctx.quick else "1000,10000,100000"
    window_case = kernel_case(
        f"windows-{n:,}-2048", "--set", "lognormal", "--n", n, "--capacity", 2048, "--windows", windows
    )
    window_case.figures = {f"{a}_w{k}_extra_rows": LOWER for a in ("bfd", "spfhp", "lpfhp") for k in windows.split(",")}
    cases.append(window_case)
    ratios = [
        Ratio(f"{a}, lognormal {n:,} at 2048: speed over np.sort's", (f"lognormal-{n:,}-2048", f"{a}_x_sort"), None)
        for a in ("bfd", "spfhp", "lpfhp")
    ]
    ratios += [
        Ratio(
            f"bfd, lognormal {n:,} at 2048: % over the lower bound",
            (f"lognormal-{n:,}-2048", "bfd_gap_lb_pct"),
            None,
            ("<=", 0.02),
        ),
        Ratio(
            f"spfhp, lognormal {n:,} at 2048: % over the lower bound",
            (f"lognormal-{n:,}-2048", "spfhp_gap_lb_pct"),
            None,
            ("<=", 0.5),
        ),
    ]
    targets = (
        ("bfd", 2048, 20),
        ("spfhp", 2048, 100),
        ("lpfhp", 2048, 100),
        ("spfhp", 8192, 100),
        ("lpfhp", 8192, 100),
    )
    ratios += [
        Ratio(
            f"{a}, lognormal {n:,} at {c}: M sequences a CPU second",
            (f"lognormal-{n:,}-{c}", f"{a}_m_per_s"),
            None,
            None if ctx.quick else (">=", t),  # 100k lengths are no target set: fixed costs weigh more
        )
        for a, c, t in targets
    ]
    if not ctx.quick:
        trl_n = n // 10
        cases.append(kernel_case(f"lognormal-{trl_n:,}-2048", "--set", "lognormal", "--n", trl_n, "--capacity", 2048))
        cases.append(
            Case(
                f"trl-{trl_n:,}-2048",
                lambda p, s: ctx.entry(p, "trl_pack", "--n", trl_n, "--capacity", 2048),
                baseline=True,
                warmup=False,
            )
        )
        for a in ("bfd", "spfhp"):
            ratios.append(
                Ratio(
                    f"{a} speed over TRL bfd's, {trl_n:,} at 2048",
                    (f"trl-{trl_n:,}-2048", "trl_s"),
                    (f"lognormal-{trl_n:,}-2048", f"{a}_s"),
                    (">=", 100),
                )
            )
            ratios.append(
                Ratio(
                    f"{a} rows over TRL bfd's (default batches)",
                    (f"lognormal-{trl_n:,}-2048", f"{a}_rows"),
                    (f"trl-{trl_n:,}-2048", "trl_rows"),
                    ("<=", 1),
                )
            )
    return Benchmark(
        "kernels", cases, ratios, [f"sets of {n:,} lengths; GSM8K train as tokenized; one process a run"], ctx.repeats
    )


# ---------------------------------------------------------------------------- tokenizer


@benchmark("tokenizer")
def tokenizer(ctx: Context) -> Benchmark:
    """packcli's tiktoken path against Hugging Face's encode_batch_fast, in the process, on
    the same texts and cores, ids compared over the whole corpus."""
    corpora = {"gsm8k": ctx.inputs.texts("gsm8k"), "python": ctx.inputs.texts("python")}
    cases, ratios = [], []
    for tokenizer in dict.fromkeys([ctx.tokenizer, BUNDLED]):
        tag = "demo" if tokenizer == BUNDLED else "tok"
        for name, corpus in corpora.items():
            for encoder in ("hf", "tiktoken"):
                cases.append(
                    Case(
                        f"{encoder}-{tag}-{name}",
                        lambda p, s, t=tokenizer, c=corpus, e=encoder: ctx.entry(
                            p, "tokenizer", t, c, "--encoder", e, "--rounds", 1, "--cache", s / "encoder-cache"
                        ),
                        {"encode_s": LOWER, "identical": HIGHER},
                    )
                )
            ratios.append(
                Ratio(
                    f"{tag} {name}: tiktoken speed over HF's",
                    (f"hf-{tag}-{name}", "encode_s"),
                    (f"tiktoken-{tag}-{name}", "encode_s"),
                    (">=", 1),
                )
            )
            ratios.append(
                Ratio(f"{tag} {name}: ids identical", (f"tiktoken-{tag}-{name}", "identical"), None, (">=", 1))
            )
    return Benchmark(
        "tokenizer",
        cases,
        ratios,
        [f"corpora: {', '.join(f'{k} {v.stat().st_size:,} B' for k, v in corpora.items())}"],
        ctx.repeats,
    )


# ---------------------------------------------------------------------------- outputs


def verify_outputs(ctx: Context) -> tuple[Corpus, int]:
    full, _ = ctx.inputs.ids("long", ctx.size(20e6, 2e5), 600)
    return full, 4096


@benchmark("verify")
def verify(ctx: Context) -> Benchmark:
    """`packcli verify --json` of npy and Parquet outputs (its own seconds: the checks and
    every shard's SHA-256), against hashing and reading the same files."""
    corpus, seq_len = verify_outputs(ctx)
    cases, ratios = [], []
    for fmt in ("npy", "parquet"):

        def out(p: Program, fmt: str = fmt) -> Path:
            return ctx.packed(p, f"verify-{fmt}", corpus, *ctx.ids_options(), "--seq-len", seq_len, "--format", fmt)

        cases.append(
            Case(
                f"verify-{fmt}", lambda p, s, out=out: [p.packcli, "verify", str(out(p)), "--json"], {"seconds": LOWER}
            )
        )
        for mode in ("sha256", "read"):
            cases.append(
                Case(
                    f"{mode}-{fmt}",
                    lambda p, s, out=out, m=mode: ctx.entry(p, "files", out(p), "--mode", m),
                    {"seconds": LOWER},
                    baseline=True,
                )
            )
            ratios.append(
                Ratio(f"{fmt}: verify speed over {mode}'s", (f"{mode}-{fmt}", "seconds"), (f"verify-{fmt}", "seconds"))
            )
    notes = [f"outputs of {corpus.tokens:,} tokens (mean sequence 600, seq_len {seq_len}), packed by each program"]
    return Benchmark("verify", cases, ratios, notes, ctx.repeats)


EXPORTS = ("megatron", "nanotron", "mds", "mds-zstd", "energon")


def copy_time(p: Program, scratch: Path, figures: dict[str, float]) -> dict[str, float]:
    """The copy of the run's own output right after it (same bytes, page cache warm)."""
    out, target = scratch / "out", scratch / "copy"
    shutil.rmtree(target, ignore_errors=True)
    started = time.perf_counter()
    shutil.copytree(out, target)
    seconds = time.perf_counter() - started
    shutil.rmtree(target, ignore_errors=True)
    return {"copy_s": seconds, "x_copy": seconds / figures["seconds"]}


@benchmark("export")
def export(ctx: Context) -> Benchmark:
    """`packcli export` in every format from npy outputs of two sizes: the export's time in
    its process against copying its own output right after it, and peak RSS flat in the size."""
    n_tokens = ctx.size(4e6, 1e5)
    sizes = {"n": ctx.inputs.ids("long", n_tokens * 4, 600)[1], "4n": ctx.inputs.ids("long", n_tokens * 4, 600)[0]}
    cases, ratios = [], []
    for kind in EXPORTS:
        for size, corpus in sizes.items():

            def build(p: Program, s: Path, kind: str = kind, corpus: Corpus = corpus, size: str = size) -> list[str]:
                source = ctx.packed(
                    p, f"export-{size}", corpus, *ctx.ids_options(), "--seq-len", 4096, "--format", "npy"
                )
                (s / "out").mkdir()
                return ctx.entry(p, "export", kind, source, s / "out")

            figures = {"seconds": LOWER, "x_copy": HIGHER}
            cases.append(Case(f"{kind}-{size}", build, figures, before=lambda p, s: os_sync(), after=copy_time))
        ratios.append(Ratio(f"{kind} 4N: copy time over the export's", (f"{kind}-4n", "x_copy"), None, (">=", 0.5)))
        ratios.append(
            Ratio(f"{kind}: peak RSS 4N / N", (f"{kind}-4n", "peak_rss_mb"), (f"{kind}-n", "peak_rss_mb"), ("<=", 1.1))
        )
    notes = [
        f"npy outputs of {sizes['n'].tokens:,} and {sizes['4n'].tokens:,} tokens (seq_len 4096), packed by each program"
    ]
    return Benchmark("export", cases, ratios, notes, ctx.repeats)


def os_sync() -> None:
    """Nothing left to write back when a timed step starts: the disk is slower than memory."""
    import os

    os.sync()


@benchmark("show")
def show(ctx: Context) -> Benchmark:
    """`packcli show OUT --row N --json` of a row in the last shard of a large output, against
    a one-row output and `packcli --version`: show reads only the row it renders."""
    corpus, seq_len = verify_outputs(ctx)
    one = ctx.inputs.documents_ids(100)

    def shown(name: str, source: Corpus, fmt: str, last: bool) -> Callable[[Program, Path], list[str]]:
        def command(p: Program, s: Path) -> list[str]:
            out = ctx.packed(p, name, source, *ctx.ids_options(), "--seq-len", seq_len, "--format", fmt)
            return [p.packcli, "show", str(out), "--row", str(manifest_rows(out) - 3 if last else 0), "--json"]

        return command

    cases = [
        Case("version", lambda p, s: [p.packcli, "--version"]),
        Case("one-row", shown("show-one", one, "npy", False)),
        Case("npy-last", shown("verify-npy", corpus, "npy", True)),
        Case("parquet-last", shown("verify-parquet", corpus, "parquet", True)),
    ]
    ratios = [
        Ratio(f"{c} / one-row output, wall", (c, "wall_s"), ("one-row", "wall_s"), ("<=", 1.5))
        for c in ("npy-last", "parquet-last")
    ]
    return Benchmark(
        "show", cases, ratios, [f"outputs of {corpus.tokens:,} tokens, seq_len {seq_len}"], 1 if ctx.quick else 5
    )


# ---------------------------------------------------------------------------- rows


def spearman_of_rows(p: Program, scratch: Path, figures: dict[str, float]) -> dict[str, float]:
    """The rank correlation between row index and sequences per row of the run's output."""
    import numpy as np
    import pyarrow.parquet as pq

    out = scratch / "out"
    shards = json.loads((out / "manifest.json").read_text())["shards"]
    segments = np.concatenate(
        [pq.read_table(out / s["path"], columns=["num_segments"]).column(0).to_numpy() for s in shards]
    )

    def ranks(a: np.ndarray) -> np.ndarray:
        _, inverse = np.unique(a, return_inverse=True)
        position = np.empty(len(a))
        position[np.argsort(a, kind="stable")] = np.arange(len(a))
        return (np.bincount(inverse, weights=position) / np.bincount(inverse))[inverse]

    rho = float(np.corrcoef(ranks(np.arange(len(segments), dtype=float)), ranks(segments.astype(float)))[0, 1])
    return {"spearman_abs": abs(rho)}


@benchmark("rows")
def rows(ctx: Context) -> Benchmark:
    """Row order (default against --no-shuffle: rank correlation of row index and sequences
    per row) and the rows of --pad-to-multiple-of 8, on GSM8K prompt/completion records."""
    corpus = ctx.inputs.gsm8k_repeated(1 if ctx.quick else 4)
    sft = [
        "--tokenizer",
        ctx.tokenizer,
        "--prompt-field",
        "question",
        "--completion-field",
        "answer",
        "--seq-len",
        2048,
    ]

    def pack(*extra: object) -> Callable[[Program, Path], list[str]]:
        return lambda p, s: ctx.pack(p, corpus, s / "out", *sft, *extra)

    cases = [
        Case("shuffled", pack(), {"rows": LOWER, "spearman_abs": LOWER}, after=spearman_of_rows),
        Case("no-shuffle", pack("--no-shuffle"), {"rows": LOWER}, after=spearman_of_rows),
        Case("pad-8", pack("--pad-to-multiple-of", 8), {"rows": LOWER}),
    ]
    ratios = [
        Ratio(
            "default order: |rank correlation| of row index and sequences per row",
            ("shuffled", "spearman_abs"),
            None,
            ("<", 0.05),
        ),
        Ratio("--no-shuffle: |rank correlation|", ("no-shuffle", "spearman_abs"), None),
        Ratio("--pad-to-multiple-of 8: rows over unpadded rows", ("pad-8", "rows"), ("shuffled", "rows")),
    ]
    return Benchmark("rows", cases, ratios, [f"GSM8K train x{1 if ctx.quick else 4}, prompt/completion"], ctx.repeats)


# ---------------------------------------------------------------------------- ray


@benchmark("ray")
def ray(ctx: Context) -> Benchmark:
    """`--engine ray` (a local cluster started by the run) against `--engine local` on the
    same text corpus, on this machine: the Ray engine's overhead."""
    corpus = ctx.inputs.text(ctx.size(8e6, 2e5))
    tok = ["--tokenizer", ctx.tokenizer, "--seq-len", 2048]
    cases = [
        Case("local", lambda p, s: ctx.pack(p, corpus, s / "out", *tok, "--engine", "local"), {"rows": LOWER}),
        Case("ray", lambda p, s: ctx.pack(p, corpus, s / "out", *tok, "--engine", "ray"), {"rows": LOWER}),
    ]
    ratios = [
        Ratio(
            "ray speed over local's (own cluster, start-up included)",
            ("local", "wall_s"),
            ("ray", "wall_s"),
            (">=", 0.8),
        )
    ]
    return Benchmark("ray", cases, ratios, [f"text: {corpus.tokens:,} tokens"], 1 if ctx.quick else 2)
