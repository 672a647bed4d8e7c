"""`packcli stats DIR`: the efficiency report recomputed from the shards, with charts.

Nothing is copied from report.json: every figure is measured again from the rows, so
stats also checks what pack claimed.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from packcli.report import RowStats, no_packing_baseline, render_table
from packcli.shards import iter_output_rows, load_manifest

CHART_BINS = 16
CHART_WIDTH = 40


def stats_dir(path: str) -> dict:
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
    report["distributions"] = {
        name: binned(hist, seq_len if name != "sequences_per_row" else None)
        for name, hist in stats.histograms().items()
    }
    return report


def binned(hist: np.ndarray, span: int | None) -> list[dict]:
    """A histogram over 0..len-1 folded into at most CHART_BINS equal-width bins."""
    nonzero = np.flatnonzero(hist)
    if not len(nonzero):
        return []
    lo = 1 if span else int(nonzero[0])
    hi = span if span else int(nonzero[-1])
    width = max(1, -(-(hi - lo + 1) // CHART_BINS))
    bins = []
    for start in range(lo, hi + 1, width):
        stop = min(start + width - 1, hi)
        bins.append({"from": start, "to": stop, "count": int(hist[start : stop + 1].sum())})
    return bins


def render_stats(console, path: str, report: dict) -> None:
    from rich.table import Table

    console.print(render_table(report, f"packcli stats {path}"))
    titles = {
        "fill_per_row": "real tokens per row",
        "sequences_per_row": "sequences per row",
        "sequence_length": "sequence length (tokens)",
    }
    for name, bins in report["distributions"].items():
        if not bins:
            continue
        peak = max(b["count"] for b in bins) or 1
        chart = Table(title=titles[name], show_header=False, box=None, title_justify="left", pad_edge=False)
        chart.add_column("range", justify="right", style="dim")
        chart.add_column("bar", style="cyan", no_wrap=True)
        chart.add_column("count", justify="right")
        for b in bins:
            label = f"{b['from']:,}" if b["from"] == b["to"] else f"{b['from']:,}-{b['to']:,}"
            bar = "█" * round(CHART_WIDTH * b["count"] / peak)
            chart.add_row(label, bar, f"{b['count']:,}")
        console.print(chart)
