"""What `pack` writes about a run: the report and the manifest, built from the run's objects.

The files' schema and reader live in write/manifest.py; this module fills them from the
options, the tokenizer setup and the counts, which only the engine holds.
"""

from __future__ import annotations

from typing import Any

from packcli.core.flow import Timer
from packcli.core.options import PackOptions
from packcli.core.version import __version__
from packcli.engine.ingest import IngestCounts
from packcli.engine.job import Job, Outcome, resolved_options
from packcli.engine.pairs import value_columns
from packcli.plan.grouping import GroupEntry, group_entries
from packcli.plan.kernels.pack import bfd_rows_from_counts
from packcli.tokenize.setup import TokenSetup
from packcli.write.columns import ids_dtype
from packcli.write.manifest import (
    FORMAT_VERSION,
    BadRecordCounts,
    Buffer,
    Manifest,
    NoPacking,
    PairsSummary,
    Report,
    RowSummary,
    ShardEntry,
    SpillSummary,
    Totals,
    Unlearned,
    UnlearnedCause,
)
from packcli.write.report import RowStats, no_packing_baseline
from packcli.write.values import WEIGHT_COLUMN


def build_manifest(
    opts: PackOptions,
    setup: TokenSetup,
    *,
    labels: str,
    options: dict[str, Any],
    npy_ids_dtype: str,
    totals: Totals,
    shards: list[ShardEntry],
    groups: list[GroupEntry] | None = None,
) -> Manifest:
    """What `pack` writes last. `options`: the resolved options that change the shards;
    `npy_ids_dtype`: the dtype of input_ids.npy, were the shards npy; `groups`: the
    --group-by table."""
    manifest: Manifest = {
        "format_version": FORMAT_VERSION,
        "packcli_version": __version__,
        "mode": opts.mode,
        "algorithm": opts.algorithm if opts.mode == "bin" else None,
        "plan": "global" if opts.buffer_size is None else "windows",
        "seq_len": opts.seq_len,
        "format": opts.format,
        "labels": labels,
        "options": options,
        "tokenizer": {
            "name_or_path": opts.tokenizer,
            "vocab_size": setup.vocab_size,
            "eos_id": setup.eos_id,
            "bos_id": setup.bos_id,
            "pad_id": setup.pad_id,
            "fingerprint": setup.fingerprint,
            "backend": setup.backend,
        },
        "columns": {
            "input_ids": "list<int32>" if opts.format == "parquet" else npy_ids_dtype,
            "labels": "int32",
            "position_ids": "int32",
            "cu_seqlens": "int32",
            "num_segments": "int32",
            "max_seqlen": "int32",
        },
        "totals": totals,
        "shards": shards,
    }
    manifest["group_by"] = opts.group_by
    if opts.group_by is not None:
        manifest["columns"]["group"] = "int32"
        manifest["groups"] = groups or []
    if opts.pad_multiple > 1:
        manifest["columns"]["cu_seqlens_unpadded"] = "int32"
    return manifest


def build_report(
    opts: PackOptions,
    setup: TokenSetup,
    *,
    summary: RowSummary,
    no_packing: NoPacking,
    counts: IngestCounts,
    bad: BadRecordCounts,
    workers: dict[str, Any],
    remainder_tokens: int,
    buffer: Buffer | None,
    spill: SpillSummary,
    timings: dict[str, float],
    total_seconds: float,
) -> Report:
    """pack's report: the rows' figures, and what happened on the way to them.
    `no_packing`: the baseline of `report.no_packing_baseline`; `buffer` is None in concat mode (which reports its remainder instead)."""
    report: Report = {
        "documents": {
            "read": bad["read"],
            "skipped": bad["skipped"],
            "skipped_by_reason": bad["by_reason"],
            "skipped_examples": bad["examples"],
            "special_token_records": counts.special_token_records,
        },
        "input": opts.input_kind,
        "mode": opts.mode,
        "algorithm": opts.algorithm if opts.mode == "bin" else None,
        "tokenizer_backend": setup.backend,
        "tokenizer_backend_reason": setup.backend_reason,
        "workers": workers,
        "overlong": {
            "policy": opts.resolved_overlong if opts.mode == "bin" else "none (concat mode crosses rows)",
            "count": counts.overlong,
            "tokens_lost": counts.overlong_tokens_lost,
            "dropped_without_labels": counts.no_labels_dropped,
        },
        "unlearned": unlearned_section(counts, opts.keep_unlearned),
        "tokens_read": counts.tokens_in,
        **summary,
        "no_packing": no_packing,
    }
    if buffer is None:
        report["remainder"] = {"policy": opts.remainder, "tokens": remainder_tokens}
    else:
        report["buffer"] = buffer
    report["spill"] = spill
    report["timings"] = {**{k: round(v, 4) for k, v in timings.items()}, "total": round(total_seconds, 4)}
    report["tokens_per_second"] = counts.tokens_in / total_seconds if total_seconds > 0 else 0.0
    return report


def unlearned_section(counts: IngestCounts, keep: bool) -> Unlearned:
    """The report's count of segments with nothing to learn, by cause."""
    by_cause: dict[str, UnlearnedCause] = {
        "no_labels": {"sequences": counts.unlearned_no_labels, "tokens": counts.unlearned_no_labels_tokens},
        "split_pieces": {"sequences": counts.unlearned_split_pieces, "tokens": counts.unlearned_split_pieces_tokens},
        "truncated": {"sequences": counts.unlearned_truncated, "tokens": counts.unlearned_truncated_tokens},
    }
    return {
        "policy": "keep" if keep else "drop",
        "sequences": sum(c["sequences"] for c in by_cause.values()),
        "tokens": sum(c["tokens"] for c in by_cause.values()),
        "by_cause": by_cause,
        "examples": list(counts.unlearned_examples),
    }


def buffer_section(opts: PackOptions, summary: RowSummary, *, windows: int, bfd_rows_in_one_window: int) -> Buffer:
    """Bin mode: what planning in windows cost against one plan over everything."""
    one = bfd_rows_in_one_window
    return {
        "plan": "global" if opts.buffer_size is None else "windows",
        "size": opts.buffer_size,
        "windows": windows,
        "bfd_rows_in_one_window": one,
        "extra_rows": summary["rows"] - one,
        "efficiency_in_one_window": summary["real_tokens"] / (one * opts.seq_len) if one else 0.0,
    }


def run_report(job: Job, outcome: Outcome, workers: dict[str, Any], timer: Timer, total: float) -> Report:
    """pack's report of one run, from its job's options and its steps' outcome."""
    opts, counts = job.opts, outcome.counts
    summary = outcome.stats.summary()
    buffer = None
    if opts.mode == "bin":
        one = bfd_rows_from_counts(outcome.placed, opts.seq_len) if outcome.placed is not None else 0
        buffer = buffer_section(opts, summary, windows=outcome.windows, bfd_rows_in_one_window=one)
    report = build_report(
        opts,
        job.setup,
        summary=summary,
        no_packing=no_packing_baseline(counts.unpacked_rows, summary["real_tokens"], opts.seq_len),
        counts=counts,
        bad=outcome.bad,
        workers=workers,
        remainder_tokens=outcome.remainder_tokens,
        buffer=buffer,
        spill={"bytes": outcome.spill_bytes, "reused": outcome.spill_reused, "tmp_dir": opts.tmp_dir},
        timings=timer.seconds,
        total_seconds=total,
    )
    _add_groups_and_cap(job, outcome, report)
    _add_pairs_and_weights(opts, counts, outcome.stats, report)
    if outcome.sources is not None:
        report["mixture"] = outcome.mixture or {}
        report["sources"] = outcome.sources
    report["engine"] = outcome.engine
    if "workers" in outcome.engine:
        report["workers"] = outcome.engine["workers"]
    return report


def _add_groups_and_cap(job: Job, outcome: Outcome, report: Report) -> None:
    """The --group-by table and what --max-sequences-per-row cost, when they were asked for."""
    if outcome.group_table is not None:
        every_token = job.opts.mode == "bin" or job.opts.remainder == "pad"
        outcome.group_entries = group_entries(
            outcome.group_table, outcome.group_counts, job.opts.seq_len, hashed=every_token
        )
        report["groups"] = outcome.group_entries
    cap = job.opts.max_sequences_per_row
    if cap is not None:
        custom = ":" in job.opts.algorithm
        report["max_sequences_per_row"] = {
            "cap": cap,
            "rows": report["rows"],
            "uncapped_rows": None if custom else outcome.uncapped_rows,
            "extra_rows": None if custom else report["rows"] - outcome.uncapped_rows,
        }


def _add_pairs_and_weights(opts: PackOptions, counts: IngestCounts, stats: RowStats, report: Report) -> None:
    """Preference pairs (kept, skipped as identical, dropped as too long), and the records
    --weight-field dropped with weight 0 and the weights in the rows, when the run has them."""
    if opts.weight_field is not None:
        report["documents"]["zero_weight"] = counts.zero_weight
        weights = stats.weights.summary()
        if weights is not None:
            report["weights"] = weights
    if opts.pairs:
        report["pairs"] = pairs_section(counts)


def pairs_section(counts: IngestCounts) -> PairsSummary:
    """The report's `pairs`: kept, and what was left out (see format.md)."""
    return {
        "pairs": counts.pairs,
        "identical_skipped": counts.pairs_identical,
        "identical_examples": list(counts.pairs_identical_examples),
        "overlong_dropped": counts.pairs_overlong_dropped,
    }


def run_manifest(job: Job, outcome: Outcome, report: Report) -> Manifest:
    """pack's manifest of one run, written last."""
    opts, setup = job.opts, job.setup
    manifest = build_manifest(
        opts,
        setup,
        labels=setup.builder.labels,
        options=resolved_options(opts, setup, job.rows_per_shard),
        npy_ids_dtype=ids_dtype(setup.vocab_size).name,
        totals={"rows": report["rows"], "sequences": report["sequences_packed"], "real_tokens": report["real_tokens"]},
        shards=[s.to_dict() for s in outcome.shards],
        groups=outcome.group_entries if opts.group_by is not None else None,
    )
    if outcome.sources is not None:
        manifest["columns"]["segment_source"] = "int32"
        manifest["sources"] = outcome.sources
    for name in value_columns(opts):
        manifest["columns"][name] = "float32" if name == WEIGHT_COLUMN else "int32"  # type: ignore[literal-required]
    if opts.pairs:
        manifest["pairs"] = report["pairs"]["pairs"]
    return manifest
