"""A mixture packed in memory: `pack_sequences` given sources by name, with weights or
epochs, takes their sequences as `packcli pack --mix` does (the same rule, the same
tags) and says where each segment came from.

    packed = pack_sequences({"web": web, "code": code}, seq_len=2048, weights={"web": 0.7, "code": 0.3})
    packed.segment_source  # per real segment, rows in order (CSR by rows.num_segments)
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from packcli.core.errors import PackcliError
from packcli.core.mixture import MixSpec, SourceSpec
from packcli.engine.ingest import IngestCounts
from packcli.engine.mixture import layout, source_tags
from packcli.plan.contract import Plan
from packcli.plan.mixture import SegmentStream, SourceTotals, Take, resolve
from packcli.plan.planner import plan_rows
from packcli.plan.rows import Rows
from packcli.plan.settings import PlanSettings
from packcli.write.gather import gather_rows
from packcli.write.report import RowStats
from packcli.write.spill import Spill


@dataclass
class SourceSegments:
    """One source's segments in memory, with each one's sequence (its document)."""

    name: str
    tokens: np.ndarray
    lengths: np.ndarray
    learned: np.ndarray | None
    owners: np.ndarray
    documents: int
    counts: IngestCounts

    def stream(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        yield self.owners, self.lengths

    def taken(self, take: Take) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray]]:
        """(tokens, lengths, learned, owners) of each round of the take."""
        for epoch in range(take.rounds):
            keep = take.taken(self.owners, epoch)
            tokens = np.repeat(keep, self.lengths)
            yield (
                self.tokens[tokens],
                self.lengths[keep],
                None if self.learned is None else self.learned[tokens],
                self.owners[keep],
            )


def mixture_spec(
    names: list[str],
    weights: Mapping[str, float] | None,
    epochs: Mapping[str, float] | None,
    target_tokens: int | None,
    max_epochs: float | None,
    seed: int,
) -> MixSpec:
    """The MixSpec of pack_sequences' arguments, checked as a mixture file is."""
    weights, epochs = dict(weights or {}), dict(epochs or {})
    unknown = sorted((set(weights) | set(epochs)) - set(names))
    if unknown:
        raise PackcliError(f"weights or epochs name {unknown[0]!r}, which is not a source", usage=True)
    sources = []
    for name in names:
        if name in weights and name in epochs:
            raise PackcliError(f"source {name!r}: a weight and epochs exclude each other", usage=True)
        for what, value in (("weight", weights.get(name)), ("epochs", epochs.get(name))):
            if value is not None and (not isinstance(value, (int, float)) or not value >= 0 or value == float("inf")):
                raise PackcliError(f"source {name!r}: {what} must be a number at least 0, not {value!r}", usage=True)
        sources.append(SourceSpec(name, (name,), {}, weights.get(name), epochs.get(name)))
    return MixSpec(
        tuple(sources), seed=seed, target_tokens=target_tokens, max_epochs=max_epochs, origin="pack_sequences"
    )


@dataclass
class PackedMixture:
    """A mixture's rows, with what the library's report and placement need."""

    rows: Rows
    stats: RowStats
    plan: Plan
    lengths: np.ndarray  # the mixed segments' (copies included)
    source: np.ndarray  # each mixed segment's source
    sequence: np.ndarray  # each mixed segment's sequence in its source
    table: list[dict[str, Any]]


def pack_mixture(sources: list[SourceSegments], spec: MixSpec, settings: PlanSettings, pad_id: int) -> PackedMixture:
    """The rows of a mixture of segmented sources, each segment tagged with its source."""
    if settings.buffer_size is not None:
        raise PackcliError("buffer_size does not apply to a mixture (it is planned over its whole output)", usage=True)
    totals = [SourceTotals(s.documents, int(s.lengths.sum())) for s in sources]
    streams: list[SegmentStream] = [functools.partial(SourceSegments.stream, s) for s in sources]
    takes = resolve(spec, totals, streams, spec.seed or 0)
    placed = layout(streams, takes, settings.seq_len, settings.multiple, settings.mode == "concat")
    masked = any(s.learned is not None for s in sources)
    parts = [part for source, take in zip(sources, takes) for part in source.taken(take)]
    tokens = np.concatenate([p[0] for p in parts]) if parts else np.zeros(0, dtype=np.int32)
    lengths = np.concatenate([p[1] for p in parts]) if parts else np.zeros(0, dtype=np.int64)
    owners = np.concatenate([p[3] for p in parts]) if parts else np.zeros(0, dtype=np.int64)
    learned = None
    if masked:
        learned = np.concatenate([p[2] if p[2] is not None else np.ones(len(p[0]), dtype=bool) for p in parts])
    spill = Spill.in_memory(tokens, lengths, learned)
    plan = plan_rows(lengths, settings)
    tags = source_tags(placed, plan, spill, None, seq_len=settings.seq_len, multiple=settings.multiple)
    blocks = list(gather_rows(spill, plan, settings.seq_len, pad_id, multiple=settings.multiple, tags=tags))
    stats = RowStats(settings.seq_len)
    for block in blocks:
        stats.add(block)
    if not blocks:
        raise PackcliError("a mixture with nothing to pack")
    source_of = np.repeat(np.arange(len(sources)), np.diff(placed.segment_bounds))
    table = _table(sources, takes, spec, placed.taken, placed.unique, stats.per_source(len(sources)))
    return PackedMixture(Rows.concat(blocks), stats, plan, lengths, source_of, owners, table)


def _table(
    sources: list[SourceSegments],
    takes: list[Take],
    spec: MixSpec,
    taken: np.ndarray,
    unique: np.ndarray,
    measured: np.ndarray,
) -> list[dict[str, Any]]:
    """The row per source of the report, as `packcli pack --mix` writes it (less what only
    reading records can say)."""
    out_total = int(measured[:, 1].sum())
    planned = sum(t.target_tokens if t.target_tokens is not None else t.tokens for t in takes)
    rows = []
    for i, (source, take) in enumerate(zip(sources, takes)):
        rows.append(
            {
                "name": source.name,
                "index": i,
                "weight": spec.sources[i].weight,
                "epochs": take.epochs,
                "target_share": take.target_tokens / planned if take.target_tokens is not None and planned else None,
                "achieved_share": int(measured[i, 1]) / out_total if out_total else 0.0,
                "documents": {
                    "available": source.documents,
                    "taken": int(taken[i]),
                    "repeated": int(taken[i] - unique[i]),
                },
                "tokens": {"in": source.counts.tokens_in, "out": int(measured[i, 1]), "learned": int(measured[i, 2])},
            }
        )
    return rows
