"""`packcli stats`: the padding packing saved, measured; and what it would save, before packing.

On a packed output every figure is measured again from the rows (nothing is copied from
report.json), so stats also checks what pack claimed. On raw input it tokenizes the way
pack does, then runs every packer and the no-packing baselines on the sequence lengths:
a what-if table. Nothing is written.
"""

from __future__ import annotations

import math
import time
from contextlib import closing
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from packcli.errors import PackcliError, needs_extra
from packcli.options import PackOptions
from packcli.report import RowStats, no_packing_baseline, render_table
from packcli.rows import IGNORE_INDEX
from packcli.shards import iter_output_rows, load_manifest

CHART_BINS = 16
CHART_WIDTH = 40  # widest bar; narrower when the terminal is
PLOT_BINS = 64
DEFAULT_BATCH_SIZE = 8
BLOCKS = " ▏▎▍▌▋▊▉█"  # eighths of a character cell
SPARKS = "▁▂▃▄▅▆▇█"
CHART_TITLES = {
    "fill_per_row": "real tokens per row",
    "sequences_per_row": "sequences per row",
    "sequence_length": "sequence length (tokens)",
}


def is_packed_output(path) -> bool:
    """A directory with a manifest: what stats reads as a packed output, not as raw input."""
    return Path(path).is_dir() and (Path(path) / "manifest.json").is_file()


# ----------------------------------------------------------------------------- packed DIR


def stats_dir(path: str) -> dict:
    return dir_stats(path)[0]


def dir_stats(path: str) -> tuple[dict, dict]:
    """(the report, its full histograms); the histograms feed --plot at a finer grain."""
    out_dir = Path(path)
    manifest = load_manifest(out_dir)
    seq_len = manifest["seq_len"]
    stats = RowStats(seq_len)
    for _, rows in iter_output_rows(out_dir, manifest):
        stats.add(rows)
    report = stats.summary()
    # From shards alone each segment is one sequence; a concat document is not recoverable.
    report["no_packing"] = no_packing_baseline(report["sequences_packed"], report["real_tokens"], seq_len)
    report["mode"] = manifest.get("mode")
    report["algorithm"] = manifest.get("algorithm")
    report["format"] = manifest.get("format")
    histograms = stats.histograms()
    report["distributions"] = {name: distribution(name, hist) for name, hist in histograms.items()}
    return report, histograms


def distribution(name: str, hist: np.ndarray, bins: int = CHART_BINS) -> list[dict]:
    """A histogram binned for a chart: fill over 1..seq_len (the scale of a row), the
    others over the range that occurs, so no chart is a column of empty lines."""
    nonzero = np.flatnonzero(hist)
    if not len(nonzero):
        return []
    if name == "fill_per_row":
        lo, hi = 1, len(hist) - 1
    elif name == "sequences_per_row":
        lo, hi = int(nonzero[0]), int(nonzero[-1])
    else:
        lo, hi = 1, int(nonzero[-1])
    return binned(hist, lo, hi, bins)


def binned(hist: np.ndarray, lo: int, hi: int, bins: int = CHART_BINS) -> list[dict]:
    """hist[lo..hi] folded into at most `bins` bins of a round width (1, 2, 5 x 10^k or 2^k)."""
    width = _round_width(-(-(hi - lo + 1) // bins))
    cumulative = np.concatenate([[0], np.cumsum(hist)])
    out = []
    for start in range(lo, hi + 1, width):
        stop = min(start + width - 1, hi)
        out.append({"from": start, "to": stop, "count": int(cumulative[stop + 1] - cumulative[start])})
    return out


def _round_width(at_least: int) -> int:
    if at_least <= 1:
        return 1
    candidates = [1 << math.ceil(math.log2(at_least))]
    decade = 10 ** math.floor(math.log10(at_least))
    candidates += [m * decade for m in (1, 2, 5, 10) if m * decade >= at_least]
    return min(candidates)


# ----------------------------------------------------------------------------- raw input


@dataclass
class WhatIfOptions:
    """pack's options for the input, the --seq-len values to compare, and the baseline's batch size.

    `input` carries every input option of pack (fields, tokenizer, BOS/EOS, backend, bad
    records, workers, overlong, buffer size); its seq_len and output are not used."""

    input: PackOptions
    seq_lens: list[int]
    batch_size: int = DEFAULT_BATCH_SIZE

    @property
    def inputs(self) -> list[str]:
        return self.input.inputs

    def pack_options(self, seq_len: int) -> PackOptions:
        """pack's own options for these inputs, so checks, messages and tokens are pack's."""
        return replace(self.input, seq_len=seq_len, output="")

    def validate(self) -> None:
        if not self.seq_lens:
            raise PackcliError("--seq-len is needed for raw input (repeat it to compare several)", usage=True)
        if self.batch_size < 1:
            raise PackcliError(f"--batch-size must be at least 1, not {self.batch_size}", usage=True)
        for seq_len in self.seq_lens:
            self.pack_options(seq_len).validate()


@dataclass
class Corpus:
    """Sequence lengths of the input, in input order, as pack would see them."""

    lengths: np.ndarray
    documents_read: int
    skipped: dict
    first_longer_than: dict = field(default_factory=dict)  # seq_len -> (location, length)
    unlearnable_when_truncated: dict = field(default_factory=dict)  # seq_len -> bool per sequence
    seconds: float = 0.0
    bos: bool = False
    eos: bool = True


def read_lengths(opts: WhatIfOptions, progress=None) -> Corpus:
    """Read and tokenize with pack's own setup, backend choice and sequence builder."""
    from packcli import reading
    from packcli.flow import Timer
    from packcli.ingest import TokenStream, use_workers
    from packcli.tokensetup import setup_tokens

    pack_opts = opts.pack_options(opts.seq_lens[0])
    use_workers(pack_opts.workers)
    started = time.perf_counter()
    paths = reading.expand_inputs(pack_opts.inputs)
    setup = setup_tokens(pack_opts)
    bad = reading.BadRecords()
    chunks, first_longer = [], {}
    unlearnable = {seq_len: [] for seq_len in opts.seq_lens}
    stream = TokenStream(pack_opts, setup, paths, bad, Timer())  # pack's backend choice and workers
    with closing(stream):
        for batch, sequences in stream:
            lengths = sequences.lengths.astype(np.int64)
            chunks.append(lengths)
            for seq_len in opts.seq_lens:
                unlearnable[seq_len].append(_unlearnable_when_truncated(sequences, seq_len))
                if seq_len not in first_longer and (lengths > seq_len).any():
                    i = int(np.argmax(lengths > seq_len))
                    first_longer[seq_len] = (batch.location(i), int(lengths[i]))
            if progress is not None:
                progress(len(lengths), int(lengths.sum()))
    lengths = np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.int64)
    if not len(lengths):
        skipped = f" ({bad.total:,} bad records skipped)" if bad.total else ""
        raise PackcliError(f"no documents in the input{skipped}")
    return Corpus(
        lengths=lengths,
        documents_read=bad.records_seen,
        skipped=dict(bad.counts),
        first_longer_than=first_longer,
        unlearnable_when_truncated={seq_len: np.concatenate(masks) for seq_len, masks in unlearnable.items()},
        seconds=time.perf_counter() - started,
        bos=setup.add_bos,
        eos=pack_opts.eos,
    )


def _unlearnable_when_truncated(sequences, seq_len: int) -> np.ndarray:
    """Sequences longer than seq_len whose first seq_len tokens hold no learned label:
    --overlong truncate leaves them nothing to learn, so pack drops them."""
    from packcli.ingest import learns_after_first

    long = sequences.lengths > seq_len
    if sequences.labels is None or not long.any():
        return np.zeros(len(sequences.lengths), dtype=bool)
    starts = np.cumsum(sequences.lengths) - sequences.lengths
    learned = sequences.labels != IGNORE_INDEX
    return long & ~learns_after_first(learned, starts, np.minimum(sequences.lengths, seq_len))


def apply_overlong(
    lengths: np.ndarray, seq_len: int, policy: str, unlearnable: np.ndarray | None = None
) -> tuple[np.ndarray, int]:
    """Lengths as bin mode packs them (pieces of split sequences in place), and tokens lost.
    `unlearnable`: the sequences truncation leaves nothing to learn, which pack drops."""
    long = lengths > seq_len
    if not long.any():
        return lengths, 0
    if policy == "truncate":
        kept, lost = np.minimum(lengths, seq_len), int((lengths[long] - seq_len).sum())
        if unlearnable is not None and unlearnable.any():
            lost += int(kept[unlearnable].sum())
            kept = kept[~unlearnable]
        return kept, lost
    if policy == "drop":
        return lengths[~long], int(lengths[long].sum())
    pieces_per = -(-lengths // seq_len)
    pieces = np.full(int(pieces_per.sum()), seq_len, dtype=np.int64)
    pieces[np.cumsum(pieces_per) - 1] = lengths - (pieces_per - 1) * seq_len
    return pieces, 0


def pad_to_longest_tokens(lengths: np.ndarray, batch_size: int) -> int:
    """Tokens a model processes when each batch (in input order) is padded to its longest."""
    if not len(lengths):
        return 0
    starts = np.arange(0, len(lengths), batch_size)
    sizes = np.diff(np.append(starts, len(lengths)))
    return int((np.maximum.reduceat(lengths, starts) * sizes).sum())


def what_if(
    lengths: np.ndarray,
    seq_len: int,
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    buffer_size: int | None = None,
    overlong: str | None = None,
    first_longer: tuple[str, int] | None = None,
    unlearnable: np.ndarray | None = None,
) -> dict:
    """Rows and efficiency of every packer and of no packing, for one seq_len.

    Packers see what `pack` would give them: overlong sequences handled by the policy,
    then windows of `buffer_size` sequences. Tokens processed count padding, since a
    model computes on it; the speed-up is the ratio of tokens processed, which leaves
    out attention's cost that grows with the square of the segment length."""
    from packcli.kernels import ALGORITHMS, pack_lengths

    policy = overlong or "split"
    n_long = int((lengths > seq_len).sum())
    if n_long and policy == "error":
        _refuse_overlong(lengths, seq_len, first_longer)
    sequences, lost = apply_overlong(lengths, seq_len, policy, unlearnable)
    no_labels = int(unlearnable.sum()) if policy == "truncate" and unlearnable is not None else 0
    real = int(sequences.sum())
    pad_tokens = len(sequences) * seq_len
    longest_tokens = pad_to_longest_tokens(sequences, batch_size)

    def entry(method: str, rows: int, processed: int, seconds: float | None, kind: str) -> dict:
        return {
            "method": method,
            "kind": kind,
            "rows": rows,
            "tokens_processed": processed,
            "efficiency": real / processed if processed else 0.0,
            "speedup_vs_pad_to_seq_len": pad_tokens / processed if processed else 0.0,
            "speedup_vs_pad_to_longest": longest_tokens / processed if processed else 0.0,
            "seconds": seconds,
        }

    methods = [
        entry("pad to seq_len", len(sequences), pad_tokens, None, "no packing"),
        entry(f"pad to longest/{batch_size}", len(sequences), longest_tokens, None, "no packing"),
    ]
    _warm_up_packers()
    for algorithm in ALGORITHMS:
        started, rows = time.perf_counter(), 0
        window = buffer_size or max(1, len(sequences))
        for start in range(0, len(sequences), window):
            rows += pack_lengths(sequences[start : start + window], seq_len, algorithm).n_rows
        methods.append(entry(algorithm, rows, rows * seq_len, time.perf_counter() - started, "bin"))
    # concat joins whole documents (no overlong policy) and pads the last row.
    concat_rows = -(-int(lengths.sum()) // seq_len)
    concat = entry("concat", concat_rows, concat_rows * seq_len, None, "concat")
    concat["efficiency"] = int(lengths.sum()) / (concat_rows * seq_len)
    methods.append(concat)
    bound = -(-real // seq_len)
    methods.append(entry("lower bound", bound, bound * seq_len, None, "bound"))
    return {
        "seq_len": seq_len,
        "sequences": len(sequences),
        "real_tokens": real,
        "overlong": {"policy": policy, "count": n_long, "tokens_lost": lost, "dropped_without_labels": no_labels},
        "batch_size": batch_size,
        "buffer_size": buffer_size,
        "lower_bound_rows": bound,
        "methods": methods,
    }


def _refuse_overlong(lengths: np.ndarray, seq_len: int, first_longer: tuple[str, int] | None) -> None:
    where, length = first_longer or ("input", int(lengths[np.argmax(lengths > seq_len)]))
    raise PackcliError(
        f"{where}: document has {length:,} tokens, more than --seq-len {seq_len:,} "
        "(--overlong error; use split, truncate or drop)"
    )


_warmed = False


def _warm_up_packers() -> None:
    """Load (or compile) every kernel before timing, so no packer is charged for it."""
    global _warmed
    if not _warmed:
        from packcli.kernels import ALGORITHMS, pack_lengths

        for algorithm in ALGORITHMS:
            pack_lengths(np.array([3, 2, 1], dtype=np.int64), 4, algorithm)
        _warmed = True


def stats_raw(opts: WhatIfOptions, progress=None) -> dict:
    opts.validate()
    corpus = read_lengths(opts, progress=progress)
    lengths = corpus.lengths
    hist = np.bincount(lengths)
    return {
        "inputs": list(opts.inputs),
        "tokenizer": opts.input.tokenizer,
        "bos": corpus.bos,
        "eos": corpus.eos,
        "documents": {
            "read": corpus.documents_read,
            "skipped": sum(corpus.skipped.values()),
            "skipped_by_reason": corpus.skipped,
        },
        "tokens": int(lengths.sum()),
        "sequence_length": {
            "min": int(lengths.min()),
            "median": float(np.median(lengths)),
            "mean": float(lengths.mean()),
            "max": int(lengths.max()),
        },
        "distributions": {"sequence_length": distribution("sequence_length", hist)},
        "what_if": [
            what_if(
                lengths,
                seq_len,
                batch_size=opts.batch_size,
                buffer_size=opts.input.buffer_size,
                overlong=opts.input.resolved_overlong,
                first_longer=corpus.first_longer_than.get(seq_len),
                unlearnable=corpus.unlearnable_when_truncated.get(seq_len),
            )
            for seq_len in opts.seq_lens
        ],
        "timings": {"read_and_tokenize": round(corpus.seconds, 4)},
        "_lengths": lengths,  # for --plot; the CLI drops it before printing JSON
    }


# ----------------------------------------------------------------------------- terminal


def render_stats(console, path: str, report: dict) -> None:
    console.print(render_table(report, f"packcli stats {path}"))
    for name, bins in report["distributions"].items():
        if bins:
            console.print(render_chart(_chart_title(name, report), bins, console.width))


def _chart_title(name: str, report: dict) -> str:
    seq_len = report["seq_len"]
    if name == "fill_per_row":
        fill = report["fill_per_row"]
        return f"{CHART_TITLES[name]} (of {seq_len:,}): min {fill['min']:,}, median {fill['median']:,.0f}"
    if name == "sequences_per_row":
        per_row = report["sequences_per_row"]
        return f"{CHART_TITLES[name]}: mean {per_row['mean']:.2f}, max {per_row['max']:,}"
    lengths = report["sequence_length"]
    return f"{CHART_TITLES[name]}: min {lengths['min']:,}, median {lengths['median']:,.0f}, max {lengths['max']:,}"


def render_chart(title: str, bins: list[dict], width: int = 80):
    """A horizontal bar chart: one line per bin, `range | bar | count | share`."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    bins = _collapse_empty_ends(bins)
    total = sum(b["count"] for b in bins) or 1
    peak = max(b["count"] for b in bins) or 1
    labels = [f"{b['from']:,}" if b["from"] == b["to"] else f"{b['from']:,}-{b['to']:,}" for b in bins]
    counts = [f"{b['count']:,}" for b in bins]
    shares = [_share(b["count"], total) for b in bins]
    # One space after each of the first three columns.
    used = max(map(len, labels)) + max(map(len, counts)) + max(map(len, shares)) + 3
    bar_width = max(8, min(CHART_WIDTH, width - used - 1))
    chart = Table(show_header=False, box=None, pad_edge=False, padding=(0, 1, 0, 0))
    chart.add_column("range", justify="right", style="dim", no_wrap=True)
    chart.add_column("bar", style="cyan", no_wrap=True, width=bar_width)
    chart.add_column("count", justify="right", no_wrap=True)
    chart.add_column("share", justify="right", style="dim", no_wrap=True)
    for label, b, count, share in zip(labels, bins, counts, shares):
        chart.add_row(label, _bar(b["count"], peak, bar_width), count, share)
    return Group(Text(title, style="italic"), chart)


def _collapse_empty_ends(bins: list[dict]) -> list[dict]:
    """Runs of empty bins at either end become one line each: the chart keeps its scale
    (a row's fill still reads from 1 to seq_len) without a screen of zeros."""
    counts = [b["count"] for b in bins]
    if not any(counts):
        return bins
    first = next(i for i, c in enumerate(counts) if c)
    last = len(counts) - 1 - next(i for i, c in enumerate(reversed(counts)) if c)
    out = list(bins[first : last + 1])
    if first > 0:
        out.insert(0, {"from": bins[0]["from"], "to": bins[first - 1]["to"], "count": 0})
    if last < len(bins) - 1:
        out.append({"from": bins[last + 1]["from"], "to": bins[-1]["to"], "count": 0})
    return out


def _share(count: int, total: int) -> str:
    share = 100 * count / total
    return "<0.1%" if count and share < 0.05 else f"{share:.1f}%"


def _bar(count: int, peak: int, width: int) -> str:
    """A bar in eighths of a cell; any non-zero count shows at least a sliver."""
    eighths = round(8 * width * count / peak)
    if count and not eighths:
        eighths = 1
    full, rest = divmod(eighths, 8)
    return "█" * full + (BLOCKS[rest] if rest else "")


def sparkline(bins: list[dict]) -> str:
    peak = max((b["count"] for b in bins), default=0)
    if not peak:
        return ""
    return "".join(" " if not b["count"] else SPARKS[min(7, (len(SPARKS) * b["count"] - 1) // peak)] for b in bins)


def render_compare(console, paths: list[str], reports: list[dict]) -> None:
    """Several packed outputs in one table, a column each."""
    from rich.table import Table

    table = Table(title="packcli stats: " + ", ".join(paths), title_justify="left")
    table.add_column("", style="bold", no_wrap=True)
    for path in paths:
        table.add_column(path, justify="right", overflow="fold")

    def row(name: str, fmt) -> None:
        table.add_row(name, *[fmt(r) for r in reports])

    row("mode", lambda r: f"{r['mode'] or '?'}" + (f" {r['algorithm']}" if r.get("algorithm") else ""))
    row("seq_len", lambda r: f"{r['seq_len']:,}")
    row("rows", lambda r: f"{r['rows']:,}")
    row("lower bound", lambda r: f"{r['lower_bound_rows']:,}")
    row("sequences", lambda r: f"{r['sequences_packed']:,}")
    row("real tokens", lambda r: f"{r['real_tokens']:,}")
    row("padding tokens", lambda r: f"{r['padding_tokens']:,}")
    row("efficiency", lambda r: f"{r['efficiency']:.2%}")
    row("no packing", lambda r: f"{r['no_packing']['efficiency']:.2%}")
    row("sequences/row", lambda r: f"{r['sequences_per_row']['mean']:.2f} (max {r['sequences_per_row']['max']})")
    row("fill min/median", lambda r: f"{r['fill_per_row']['min']:,}/{r['fill_per_row']['median']:,.0f}")
    row("length median", lambda r: f"{r['sequence_length']['median']:,.0f} (max {r['sequence_length']['max']:,})")
    table.add_section()
    for name in ("fill_per_row", "sequences_per_row", "sequence_length"):
        row(CHART_TITLES[name].replace(" (tokens)", ""), lambda r, name=name: sparkline(r["distributions"][name]))
    console.print(table)
    console.print("[dim]charts: low to high, left to right; bins as in `packcli stats DIR --json`[/dim]")


def render_what_if(console, report: dict) -> None:
    from rich.table import Table

    docs = report["documents"]
    lengths = report["sequence_length"]
    skipped = f" ({docs['skipped']:,} skipped)" if docs["skipped"] else ""
    boundaries = " + ".join(name for name, on in (("BOS", report["bos"]), ("EOS", report["eos"])) if on)
    console.print(
        f"[bold]{docs['read']:,} documents{skipped}, {report['tokens']:,} tokens[/bold] "
        f"({report['tokenizer'] or 'token ids'}{', with ' + boundaries if boundaries else ''}; "
        f"read and tokenized in {report['timings']['read_and_tokenize']:.2f} s)"
    )
    bins = report["distributions"]["sequence_length"]
    title = (
        f"sequence length (tokens): min {lengths['min']:,}, median {lengths['median']:,.0f}, "
        f"mean {lengths['mean']:,.0f}, max {lengths['max']:,}"
    )
    console.print(render_chart(title, bins, console.width))
    for result in report["what_if"]:
        over = result["overlong"]
        title = f"what if --seq-len {result['seq_len']}: {result['sequences']:,} sequences"
        if over["count"]:
            lost = f", {over['tokens_lost']:,} tokens lost" if over["tokens_lost"] else ""
            if over.get("dropped_without_labels"):
                lost += f", {over['dropped_without_labels']:,} dropped with nothing to learn"
            title += f" ({over['count']:,} longer, {over['policy']}{lost})"
        table = Table(title=title, title_justify="left")
        table.add_column("method", no_wrap=True)
        table.add_column("rows", justify="right")
        table.add_column("efficiency", justify="right")
        table.add_column("speed-up vs\nseq_len pad", justify="right")
        table.add_column("speed-up vs\nlongest pad", justify="right")
        table.add_column("time", justify="right")
        best = min(m["rows"] for m in result["methods"] if m["kind"] == "bin")
        for m in result["methods"]:
            style = "dim" if m["kind"] in ("no packing", "bound") else None
            name = m["method"] + (" (default)" if m["method"] == "bfd" else "")
            if m["kind"] == "bin" and m["rows"] == best:
                name = f"[bold]{name}[/bold]"
            seconds = "" if m["seconds"] is None else _duration(m["seconds"])
            table.add_row(
                name,
                f"{m['rows']:,}",
                f"{m['efficiency']:.2%}",
                f"{m['speedup_vs_pad_to_seq_len']:.2f}x",
                f"{m['speedup_vs_pad_to_longest']:.2f}x",
                seconds,
                style=style,
            )
        console.print(table)
    console.print(
        "[dim]speed-up: tokens a model processes without packing / with it (padding included;"
        " attention's quadratic term left out). pad to longest/N: batches of N in input order."
        " concat: documents joined and cut at row ends.[/dim]"
    )


def _duration(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"


# ----------------------------------------------------------------------------- --plot


def matplotlib_figure():
    with needs_extra("plot", "--plot needs matplotlib"):
        from matplotlib.figure import Figure
    return Figure


def plot_dirs(file: str, paths: list[str], histograms: list[dict], reports: list[dict]) -> None:
    """The three distributions of one or several outputs, as shares so sizes compare."""
    Figure = matplotlib_figure()
    fig = Figure(figsize=(13, 4), layout="constrained")
    axes = fig.subplots(1, 3)
    several = len(paths) > 1
    for ax, name in zip(axes, ("fill_per_row", "sequences_per_row", "sequence_length")):
        # Same bins for every output (fill: relative to each one's seq_len), so shares compare.
        occupied = [np.flatnonzero(h[name]) for h in histograms]
        occupied = [o for o in occupied if len(o)]
        if not occupied:
            continue
        lo = min(int(o[0]) for o in occupied) if name == "sequences_per_row" else 1
        hi = max(int(o[-1]) for o in occupied)
        for path, hists, report in zip(paths, histograms, reports):
            hist = hists[name]
            if not hist.sum():
                continue
            if name == "fill_per_row":
                bins = binned(hist, 1, len(hist) - 1, PLOT_BINS)
                x = [100 * (b["from"] + b["to"]) / 2 / report["seq_len"] for b in bins]
            else:
                padded = np.zeros(hi + 1, dtype=np.int64)
                padded[: min(len(hist), hi + 1)] = hist[: hi + 1]
                bins = binned(padded, lo, hi, PLOT_BINS)
                x = [(b["from"] + b["to"]) / 2 for b in bins]
            y = [100 * b["count"] / hist.sum() for b in bins]
            if several:
                ax.step(x, y, where="mid", label=path)
            else:
                ax.bar(x, y, width=(x[1] - x[0]) * 0.9 if len(x) > 1 else 0.8, color="tab:blue")
        ax.set_title(CHART_TITLES[name])
        ax.set_xlabel(
            {"fill_per_row": "% of seq_len", "sequences_per_row": "sequences", "sequence_length": "tokens"}[name]
        )
        ax.set_ylabel("% of sequences" if name == "sequence_length" else "% of rows")
        ax.grid(alpha=0.3)
    if several:
        axes[0].legend(fontsize="small", loc="upper left")
    summary = ", ".join(f"{p}: {r['efficiency']:.1%} efficient" for p, r in zip(paths, reports))
    fig.suptitle(f"packcli stats  {summary}")
    _save(fig, file)


def plot_what_if(file: str, report: dict) -> None:
    """Sequence lengths against each seq_len, and efficiency of every method."""
    Figure = matplotlib_figure()
    fig = Figure(figsize=(13, 4.5), layout="constrained")
    left, right = fig.subplots(1, 2, width_ratios=[1, 1.4])
    lengths = report["_lengths"]
    bins = binned(np.bincount(lengths), 1, int(lengths.max()), PLOT_BINS)
    x = [(b["from"] + b["to"]) / 2 for b in bins]
    left.bar(x, [b["count"] for b in bins], width=(x[1] - x[0]) * 0.9 if len(x) > 1 else 0.8, color="tab:blue")
    for result in report["what_if"]:
        left.axvline(result["seq_len"], color="tab:red", linestyle="--", linewidth=1)
        left.annotate(
            f"{result['seq_len']:,}",
            (result["seq_len"], 1),
            xycoords=("data", "axes fraction"),
            rotation=90,
            va="top",
            ha="right",
            fontsize="small",
            color="tab:red",
        )
    left.set_title(f"sequence length ({len(lengths):,} documents)")
    left.set_xlabel("tokens")
    left.set_ylabel("documents")
    left.grid(alpha=0.3)
    methods = [m["method"] for m in report["what_if"][0]["methods"]]
    width = 0.8 / len(report["what_if"])
    for i, result in enumerate(report["what_if"]):
        effs = [100 * m["efficiency"] for m in result["methods"]]
        right.bar(
            np.arange(len(methods)) + i * width - 0.4 + width / 2, effs, width, label=f"--seq-len {result['seq_len']}"
        )
    right.set_xticks(np.arange(len(methods)), methods, rotation=30, ha="right")
    right.set_ylabel("efficiency (% of tokens that are real)")
    right.set_ylim(0, 118)  # headroom for the legend above the 100% bars
    right.set_yticks(range(0, 101, 20))
    right.set_title("what if: efficiency by method")
    right.legend(fontsize="small", loc="upper left", ncol=len(report["what_if"]))
    right.grid(alpha=0.3, axis="y")
    fig.suptitle(f"packcli stats {' '.join(report['inputs'])}")
    _save(fig, file)


def _save(fig, file: str) -> None:
    try:
        fig.savefig(file, dpi=110)
    except (OSError, ValueError) as exc:
        raise PackcliError(f"--plot {file}: cannot write the image ({exc})") from exc
