"""`packcli stats` on a packed output: the padding packing saved, measured.

Every figure of the rows is measured again from them, so stats also checks what pack
claimed; only what left before the rows (the `unlearned` count, which no row can show) is
taken from report.json, and of a mixture's sources what the manifest says of their weights
and documents (their tokens out and learned are counted again by `segment_source`). Raw
input goes to what_if.py.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import NotRequired, TypedDict, cast

import numpy as np

from packcli.plan.grouping import group_counts
from packcli.write.manifest import (
    Manifest,
    NoPacking,
    RowSummary,
    SourceEntry,
    Unlearned,
    WeightSummary,
    load_manifest,
)
from packcli.write.report import RowStats, no_packing_baseline
from packcli.write.shard_reader import iter_output_rows, read_group_column, read_shard

CHART_BINS = 16


def stats_dir(path: str) -> OutputStats:
    return dir_stats(path)[0]


class MeasuredPairs(TypedDict):
    """Preference pairs in the rows: how many, and per row (mean, max)."""

    pairs: int
    pairs_per_row: dict[str, float]


class OutputStats(RowSummary):
    """`packcli stats DIR`: the rows' figures, measured again, and their charts' bins."""

    no_packing: NoPacking
    mode: str | None
    algorithm: str | None
    format: str
    distributions: dict[str, list[dict[str, int]]]
    groups: NotRequired[list[dict]]  # a --group-by output: per group, measured from its rows
    unlearned: NotRequired[Unlearned]  # from report.json: segments dropped before the rows
    sources: NotRequired[list[SourceEntry]]  # a mixture: the manifest's, tokens out and learned measured
    pairs: NotRequired[MeasuredPairs]  # preference pairs, counted in the rows
    weights: NotRequired[WeightSummary]  # --weight-field: segment_weight over the segments


def dir_stats(path: str) -> tuple[OutputStats, dict[str, np.ndarray]]:
    """(the report, its full histograms); the histograms feed --plot at a finer grain."""
    out_dir = Path(path)
    manifest = load_manifest(out_dir)
    seq_len = manifest["seq_len"]
    stats = RowStats(seq_len)
    for _, rows in iter_output_rows(out_dir, manifest):
        stats.add(rows)
    summary = stats.summary()
    histograms = stats.histograms()
    groups = _measured_groups(out_dir, manifest)
    report: OutputStats = {
        **summary,
        # From shards alone each segment is one sequence; a concat document is not recoverable.
        # preference pairs: a pair alone in a row
        "no_packing": no_packing_baseline(
            stats.pairs if "pairs" in manifest else summary["sequences_packed"], summary["real_tokens"], seq_len
        ),
        "mode": manifest.get("mode"),
        "algorithm": manifest.get("algorithm"),
        "format": manifest["format"],
        "distributions": {name: distribution(name, hist) for name, hist in histograms.items()},
    }
    if groups is not None:
        report["groups"] = groups
    if "sources" in manifest:
        report["sources"] = measured_sources(manifest["sources"], stats)
    if "pairs" in manifest:
        per_row = summary["sequences_per_row"]
        report["pairs"] = {
            "pairs": stats.pairs,
            "pairs_per_row": {"mean": per_row["mean"] / 2, "max": per_row["max"] // 2},
        }
    weights = stats.weights.summary()
    if weights is not None:
        report["weights"] = weights
    unlearned = _reported_unlearned(out_dir)
    if unlearned is not None:
        report["unlearned"] = unlearned
    return report, histograms


def measured_sources(table: list[SourceEntry], stats: RowStats) -> list[SourceEntry]:
    """A mixture's sources as the manifest lists them, with the real and learned tokens of
    their segments in the rows (counted by `segment_source`) as `tokens.out` and `.learned`."""
    figures = stats.per_source(len(table))
    out: list[SourceEntry] = []
    for entry, (_, real, learned) in zip(table, figures.tolist()):
        measured = cast(SourceEntry, json.loads(json.dumps(entry)))  # a copy: the manifest stays as read
        measured["tokens"] = {**entry["tokens"], "out": real, "learned": learned}
        out.append(measured)
    return out


def _reported_unlearned(out_dir: Path) -> Unlearned | None:
    """pack's count of segments with nothing to learn: dropped ones left no trace in the rows."""
    try:
        report = json.loads((out_dir / "report.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    unlearned = report.get("unlearned") if isinstance(report, dict) else None
    return cast(Unlearned, unlearned) if isinstance(unlearned, dict) else None


def _measured_groups(out_dir: Path, manifest: Manifest) -> list[dict] | None:
    """A --group-by output's groups, measured from the `group` column and the rows (the
    manifest gives only the values and documents)."""
    table = manifest.get("groups")
    if manifest.get("group_by") is None or not table:
        return None
    counts = np.zeros((len(table), 3), dtype=np.int64)
    for shard in manifest["shards"]:
        path = out_dir / shard["path"]
        blocks = zip(
            read_shard(path, manifest["format"], manifest["seq_len"]), read_group_column(path, manifest["format"])
        )
        for rows, group in blocks:
            counts += group_counts(group, rows.num_segments, rows.real_lengths(), len(table))
    seq_len = manifest["seq_len"]
    return [
        {
            "id": entry["id"],
            "value": entry["value"],
            "documents": entry["documents"],
            "sequences": int(sequences),
            "rows": int(rows),
            "real_tokens": int(real),
            "efficiency": real / (rows * seq_len) if rows else 0.0,
        }
        for entry, (rows, sequences, real) in zip(table, counts.tolist())
    ]


def distribution(name: str, hist: np.ndarray, bins: int = CHART_BINS) -> list[dict[str, int]]:
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


def binned(hist: np.ndarray, lo: int, hi: int, bins: int = CHART_BINS) -> list[dict[str, int]]:
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
