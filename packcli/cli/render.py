"""Everything packcli draws: the Rich tables and terminal charts, the summary lines, the
--plot figures and the JSON on stdout.

The figures come computed (report.py, stats.py, verify.py, megatron.py hand over plain
values); this module only lays them out, so what a command measures can be tested
without a terminal and what it shows without a corpus.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from packcli.core.errors import PackcliError, needs_extra

CHART_WIDTH = 40  # widest bar; narrower when the terminal is
PLOT_BINS = 64
BLOCKS = " ▏▎▍▌▋▊▉█"  # eighths of a character cell
SPARKS = "▁▂▃▄▅▆▇█"
CHART_TITLES = {
    "fill_per_row": "real tokens per row",
    "sequences_per_row": "sequences per row",
    "sequence_length": "sequence length (tokens)",
}


# ----------------------------------------------------------------------------- report tables


def to_json(value: object) -> str:
    return json.dumps(value, indent=2, sort_keys=False) + "\n"


def packing_lines(report: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The rows' figures, as the terminal table and the HTML page both show them."""
    lines = [
        ("sequences packed", f"{report['sequences_packed']:,}"),
        ("rows", f"{report['rows']:,} x {report['seq_len']:,} tokens"),
        ("lower bound", f"{report['lower_bound_rows']:,} rows"),
        ("real tokens", f"{report['real_tokens']:,}"),
        ("padding tokens", f"{report['padding_tokens']:,}"),
        ("label tokens", f"{report['label_tokens']:,}"),
        ("efficiency", f"{report['efficiency']:.2%}"),
    ]
    if "no_packing" in report:
        base = report["no_packing"]
        lines.append(("no packing", f"{base['efficiency']:.2%} ({base['rows']:,} rows)"))
    per_row, fill = report["sequences_per_row"], report["fill_per_row"]
    lines += [
        ("sequences per row", f"mean {per_row['mean']:.2f}, max {per_row['max']}"),
        ("fill per row", f"min {fill['min']:,}, median {fill['median']:,.0f}"),
    ]
    return lines


def render_table(report: Mapping[str, Any], title: str) -> Table | Group:
    """A Rich table of the figures a user looks at first."""

    table = Table(title=title, show_header=False, title_justify="left")
    table.add_column("metric", style="bold")
    table.add_column("value", justify="right")
    lines = []
    notes: list[str] = []  # records named under the table: paths are too long for its columns
    if "documents" in report:
        docs = report["documents"]
        lines.append(("documents read", f"{docs['read']:,}"))
        if docs["skipped"]:
            lines.append(("documents skipped", f"{docs['skipped']:,}"))
            notes += _skipped_notes(docs.get("skipped_examples") or [], docs["skipped"])
        if docs.get("zero_weight"):
            lines.append(("documents of weight 0", f"{docs['zero_weight']:,} (dropped)"))
    lines += _pair_lines(report.get("pairs"))
    if "overlong" in report and report["overlong"]["count"]:
        over = report["overlong"]
        lines.append((f"overlong ({over['policy']})", f"{over['count']:,} ({over['tokens_lost']:,} tokens lost)"))
    lines += _unlearned_lines(report.get("unlearned"))
    notes += _unlearned_notes(report.get("unlearned"))
    lines += packing_lines(report)
    if report.get("weights"):
        w = report["weights"]
        lines.append(("segment weights", f"min {w['min']:.4g}, mean {w['mean']:.4g}, max {w['max']:.4g}"))
    if "remainder" in report and report["remainder"]["tokens"]:
        rem = report["remainder"]
        lines.append((f"remainder ({rem['policy']})", f"{rem['tokens']:,} tokens"))
    lines += _group_and_cap_lines(report)
    if "timings" in report:
        t = report["timings"]
        lines.append(("time", f"{t['total']:.2f} s, {report['tokens_per_second']:,.0f} tokens/s"))
        stages = [name for name in ("read", "tokenize", "spill", "plan", "write") if name in t]
        by_stage = [f"{name} {t[name]:.2f}" for name in stages]  # two lines: one would wrap at 80 columns
        lines.append(("  by stage", ", ".join(by_stage[:3])))
        if by_stage[3:]:
            lines.append(("", ", ".join(by_stage[3:])))
    for name, value in lines:
        table.add_row(name, value)
    parts: list[Any] = [table]
    if notes:
        parts.append(Text("\n".join(notes)))
    if report.get("sources"):
        parts += render_sources(report["sources"])
    return Group(*parts) if len(parts) > 1 else table


# A mixture's sources: (heading, cell) per column, in the terminal's two tables and the HTML page's one
SOURCE_MIX_COLUMNS = ("source", "weight", "target share", "achieved share", "epochs")
SOURCE_TOKEN_COLUMNS = ("tokens in", "tokens out", "learned")
SOURCE_DOCUMENT_COLUMNS = ("read", "skipped", "dropped", "held out", "taken (repeats)")


def source_cells(source: Mapping[str, Any]) -> dict[str, str]:
    """One source of a mixture as the cells of its row, by column heading."""

    def share(value: float | None) -> str:
        return "-" if value is None else f"{value:.1%}"

    docs, tokens = source["documents"], source["tokens"]
    repeats = f" ({docs['repeated']:,})" if docs["repeated"] else ""
    return {
        "source": str(source["name"]),
        "weight": "-" if source["weight"] is None else f"{source['weight']:g}",
        "target share": share(source["target_share"]),
        "achieved share": share(source["achieved_share"]),
        "epochs": f"{source['epochs']:.2f}",
        "tokens in": f"{tokens['in']:,}",
        "tokens out": f"{tokens['out']:,}",
        "learned": f"{tokens['learned']:,}",
        "read": f"{docs['read']:,}",
        "skipped": f"{docs['skipped']:,}",
        "dropped": f"{docs['dropped']:,}",
        "held out": f"{docs['held_out']:,}",
        "taken (repeats)": f"{docs['taken']:,}{repeats}",
    }


def render_sources(sources: Sequence[Mapping[str, Any]]) -> list[Table]:
    """A mixture's sources, a row each: their weights, shares and tokens, then their documents
    (two tables, so each fits 80 columns)."""
    cells = [source_cells(source) for source in sources]
    tables = []
    for title, columns in (
        ("sources", (*SOURCE_MIX_COLUMNS, *SOURCE_TOKEN_COLUMNS)),
        ("source documents", ("source", *SOURCE_DOCUMENT_COLUMNS)),
    ):
        table = Table(title=title, title_justify="left")
        for column in columns:
            table.add_column(
                column, justify="left" if column == "source" else "right", style="bold" if column == "source" else None
            )
        for row in cells:
            table.add_row(*(row[column] for column in columns))
        tables.append(table)
    return tables


def _pair_lines(pairs: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    """Preference pairs: kept (pack) or counted in the rows (stats), and what pack left out."""
    if not pairs:
        return []
    lines = [("pairs", f"{pairs['pairs']:,}")]
    if "pairs_per_row" in pairs:
        per_row = pairs["pairs_per_row"]
        lines.append(("pairs per row", f"mean {per_row['mean']:.2f}, max {per_row['max']}"))
    if pairs.get("identical_skipped"):
        lines.append(("  chosen = rejected", f"{pairs['identical_skipped']:,} skipped"))
    if pairs.get("overlong_dropped"):
        lines.append(("  too long for a row", f"{pairs['overlong_dropped']:,} dropped"))
    return lines


def warnings(report: Mapping[str, Any]) -> list[str]:
    """What pack did that a user must hear of even under --json (on stderr)."""
    pairs = report.get("pairs") or {}
    identical = pairs.get("identical_skipped", 0)
    if not identical:
        return []
    first = pairs.get("identical_examples") or []
    where = f" (first: {first[0]})" if first else ""
    return [f"warning: skipped {identical:,} pair(s) whose chosen and rejected are the same{where}"]


UNLEARNED_CAUSES = {"no_labels": "no labels", "split_pieces": "split pieces", "truncated": "truncated"}


def _unlearned_lines(unlearned: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    """Segments with nothing to learn, dropped or kept: the total, then each cause that occurred."""
    if not unlearned or not unlearned["sequences"]:
        return []
    verb = "kept" if unlearned["policy"] == "keep" else "dropped"
    lines = [(f"unlearned ({verb})", f"{unlearned['sequences']:,} sequences, {unlearned['tokens']:,} tokens")]
    for cause, figures in unlearned["by_cause"].items():
        if figures["sequences"]:
            name = UNLEARNED_CAUSES.get(cause, cause.replace("_", " "))
            lines.append((f"  {name}", f"{figures['sequences']:,} sequences, {figures['tokens']:,} tokens"))
    return lines


SHOWN_EXAMPLES = 3  # skipped or unlearned records named under the summary (report.json keeps more)


def _skipped_notes(examples: list[str], total: int) -> list[str]:
    """The first few skipped records, `file:line: reason`, as report.json has them."""
    notes = [f"skipped {example}" for example in examples[:SHOWN_EXAMPLES]]
    if total > len(notes):
        notes.append(f"skipped ... {total - len(notes):,} more (report.json lists the first {len(examples)})")
    return notes


def _unlearned_notes(unlearned: Mapping[str, Any] | None) -> list[str]:
    """The first few records that had nothing to learn (under --train-on, for chat), by location."""
    if not unlearned:
        return []
    examples = unlearned.get("examples") or []
    verb = "kept" if unlearned["policy"] == "keep" else "dropped"
    notes = [f"{verb} {where}: nothing to learn" for where in examples[:SHOWN_EXAMPLES]]
    more = unlearned["by_cause"]["no_labels"]["sequences"] - len(notes)
    if notes and more > 0:
        notes.append(f"{verb} ... {more:,} more with nothing to learn (report.json lists the first {len(examples)})")
    return notes


def _group_and_cap_lines(report: Mapping[str, Any], shown: int = 10) -> list[tuple[str, str]]:
    """--max-sequences-per-row's cost and the --group-by groups (the first `shown`; all in JSON)."""
    lines = []
    cap = report.get("max_sequences_per_row")
    if cap is not None:
        cost = (
            ""
            if cap["uncapped_rows"] is None
            else f" ({cap['extra_rows']:+,} rows vs {cap['uncapped_rows']:,} uncapped)"
        )
        lines.append((f"max sequences per row {cap['cap']}", f"{cap['rows']:,} rows{cost}"))
    groups = report.get("groups") or []
    for group in groups[:shown]:
        lines.append(
            (
                f"  group {json.dumps(group['value'])}",
                f"{group['documents']:,} docs, {group['sequences']:,} seqs, {group['rows']:,} rows, {group['efficiency']:.2%}",
            )
        )
    if len(groups) > shown:
        lines.append(("  ...", f"{len(groups) - shown:,} more groups (--json lists them all)"))
    if groups:
        lines.insert(len(lines) - min(len(groups), shown + 1), ("groups", f"{len(groups):,}"))
    return lines


# ----------------------------------------------------------------------------- summary lines


BYTE_UNITS = ("B", "kB", "MB", "GB", "TB", "PB")
SHORTEST_TIMED = 1e-3  # seconds; below it a speed is mostly timer noise


def human_bytes(size: float) -> str:
    """3 significant digits in decimal units: 512 B, 12.3 kB, 1.00 MB, 45.6 GB."""
    if round(size) < 1000:
        return f"{round(size)} B"
    for power, unit in enumerate(BYTE_UNITS[1:], start=1):
        digits = f"{size / 1000**power:#.3g}"  # '#' keeps the zeros of 1.00
        if float(digits) < 1000:
            return f"{digits.rstrip('.')} {unit}"
    return f"{size / 1000 ** (len(BYTE_UNITS) - 1):,.0f} {BYTE_UNITS[-1]}"


def _checked_at(size: int, seconds: float) -> str:
    if seconds < SHORTEST_TIMED:
        return f"{human_bytes(size)} checked in under 1 ms"
    return f"{human_bytes(size)} checked at {human_bytes(size / seconds)}/s"


def verify_line(path: str, summary: dict[str, Any]) -> str:
    """`packcli verify`'s one line on success."""
    return (
        f"ok: {path}: {summary['shards']} shard(s), {summary['rows']:,} rows, "
        f"{summary['sequences']:,} sequences, {summary['real_tokens']:,} real tokens "
        f"({_checked_at(summary['bytes'], summary['seconds'])})"
    )


# ----------------------------------------------------------------------------- terminal


def render_stats(console: Console, path: str, report: Mapping[str, Any]) -> None:
    console.print(render_table(report, f"packcli stats {path}"))
    for name, bins in report["distributions"].items():
        if bins:
            console.print(render_chart(_chart_title(name, report), bins, console.width))


def _chart_title(name: str, report: Mapping[str, Any]) -> str:
    seq_len = report["seq_len"]
    if name == "fill_per_row":
        fill = report["fill_per_row"]
        return f"{CHART_TITLES[name]} (of {seq_len:,}): min {fill['min']:,}, median {fill['median']:,.0f}"
    if name == "sequences_per_row":
        per_row = report["sequences_per_row"]
        return f"{CHART_TITLES[name]}: mean {per_row['mean']:.2f}, max {per_row['max']:,}"
    lengths = report["sequence_length"]
    return f"{CHART_TITLES[name]}: min {lengths['min']:,}, median {lengths['median']:,.0f}, max {lengths['max']:,}"


def render_chart(title: str, bins: list[dict], width: int = 80) -> Group:
    """A horizontal bar chart: one line per bin, `range | bar | count | share`."""

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


def render_compare(console: Console, paths: list[str], reports: Sequence[Mapping[str, Any]]) -> None:
    """Several packed outputs in one table, a column each."""

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


def render_what_if(console: Console, report: Mapping[str, Any]) -> None:

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
        placed = "pairs, each placed whole" if "pairs" in result else "sequences"
        title = f"what if --seq-len {result['seq_len']}: {result['sequences']:,} {placed}"
        if over["count"]:
            lost = f", {over['tokens_lost']:,} tokens lost" if over["tokens_lost"] else ""
            if over.get("dropped_without_labels") and "unlearned" not in result:
                lost += f", {over['dropped_without_labels']:,} dropped with nothing to learn"
            title += f" ({over['count']:,} longer, {over['policy']}{lost})"
        unlearned = result.get("unlearned")
        if unlearned and unlearned["sequences"]:
            verb = "kept" if unlearned["policy"] == "keep" else "dropped"
            title += f", {unlearned['sequences']:,} with nothing to learn {verb} ({unlearned['tokens']:,} tokens)"
        if result.get("pad_to_multiple_of"):
            title += f", each padded to a multiple of {result['pad_to_multiple_of']}"
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
        + (
            " concat: pairs in input order, next fit, never cut."
            if any("pairs" in r for r in report["what_if"])
            else " concat: documents joined and cut at row ends."
        )
        + "[/dim]"
    )


def _duration(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"


# ----------------------------------------------------------------------------- --plot


def matplotlib_figure() -> type:
    with needs_extra("plot", "--plot needs matplotlib"):  # lazy: matplotlib is an optional extra
        from matplotlib.figure import Figure
    return Figure


def plot_dirs(
    file: str, paths: list[str], histograms: list[dict[str, np.ndarray]], reports: Sequence[Mapping[str, Any]]
) -> None:
    """The three distributions of one or several outputs, as shares so sizes compare."""
    from packcli.inspect.stats import binned  # here, so that pack's summary table does not load stats

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


def plot_what_if(file: str, report: Mapping[str, Any]) -> None:
    """Sequence lengths against each seq_len, and efficiency of every method."""
    from packcli.inspect.stats import binned

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


def _save(fig: Any, file: str) -> None:
    try:
        fig.savefig(file, dpi=110)
    except (OSError, ValueError) as exc:
        raise PackcliError(f"--plot {file}: cannot write the image ({exc})") from exc
