"""A small mixed output (the shards and manifest of a --mix run) built through the write
layer: sources spilled one after another, a real plan, rows gathered with a SpillRanges
tagger, shards written by ShardWriter, per-source figures counted by RowStats."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from packcli.plan.planner import plan_rows
from packcli.plan.settings import PlanSettings
from packcli.write.columns import SOURCE_COLUMN
from packcli.write.gather import SpillRanges, gather_rows
from packcli.write.manifest import FORMAT_VERSION
from packcli.write.report import RowStats
from packcli.write.shards import ShardWriter
from packcli.write.spill import Spill

EOS = PAD = 1  # the word tokenizer's </s>; it has no pad token
VOCAB = 300
SOURCES = (("web", "text", 0.5), ("code", "text", 0.3), ("chat", "chat", 0.2))  # name, input, weight


@dataclass
class Mixed:
    """A mixed output and what went into it: each source's sequences (token lists) and
    which tokens of them are learned."""

    out: Path
    sequences: list[list[list[int]]]  # per source
    learned: list[list[list[bool]]]  # per source, per sequence, per token
    seq_len: int


def source_sequences(rng: np.random.Generator, index: int, count: int, seq_len: int):
    """`count` sequences of a source, each ending in EOS; a chat source learns only the second half of each."""
    sequences, learned = [], []
    for _ in range(count):
        n = int(rng.integers(2, seq_len + 1))
        tokens = [*(int(t) for t in rng.integers(4, VOCAB, size=n - 1)), EOS]
        flags = [True] * n if SOURCES[index][1] == "text" else [j >= n // 2 for j in range(n)]
        sequences.append(tokens)
        learned.append(flags)
    return sequences, learned


@dataclass
class Mixture:
    """The rows of a mixture, gathered block by block, and what went into them."""

    blocks: list  # Rows, each with segment_source
    sequences: list[list[list[int]]]  # per source
    learned: list[list[list[bool]]]  # per source, per sequence, per token
    tokens_in: list[int]  # per source


def gather_mixture(
    seq_len: int = 24,
    counts: tuple[int, ...] = (30, 20, 12),
    mode: str = "bin",
    algorithm: str = "bfd",
    multiple: int = 1,
    seed: int = 0,
) -> Mixture:
    """SOURCES' sequences (`counts` of each) spilled one source after another, planned
    (shuffled) and gathered with a SpillRanges tagger: rows as pack builds them."""
    rng = np.random.default_rng(seed)
    per_source = [source_sequences(rng, i, n, seq_len) for i, n in enumerate(counts)]
    sequences = [s for s, _ in per_source]
    learned = [flags for _, flags in per_source]
    flat = [t for source in sequences for seq in source for t in seq]
    flags = [f for source in learned for seq in source for f in seq]
    lengths = np.array([len(seq) for source in sequences for seq in source], dtype=np.int64)
    tokens_in = [sum(len(seq) for seq in source) for source in sequences]
    bounds = np.concatenate([[0], np.cumsum(tokens_in)[:-1]])
    spill = Spill.in_memory(np.array(flat, dtype=np.uint16), lengths, np.array(flags, dtype=bool))
    settings = PlanSettings(seq_len, mode, algorithm, shuffle=True, seed=seed, multiple=multiple)
    plan = plan_rows(lengths, settings)
    tags = SpillRanges(SOURCE_COLUMN, bounds)
    blocks = list(gather_rows(spill, plan, seq_len, PAD, multiple=multiple, tags=tags))
    return Mixture(blocks, sequences, learned, tokens_in)


def mixed_output(
    out: Path,
    fmt: str = "parquet",
    *,
    seq_len: int = 24,
    counts: tuple[int, ...] = (30, 20, 12),
    mode: str = "bin",
    algorithm: str = "bfd",
    multiple: int = 1,
    rows_per_shard: int = 7,
    seed: int = 0,
    tokenizer: Path | None = None,
) -> Mixed:
    """The output of a mixture of SOURCES (`counts` sequences each) in `out`, as pack
    writes it: shuffled rows, several shards, `segment_source` on every segment and the
    manifest's `sources` with the rows' tokens out and learned."""
    mixture = gather_mixture(seq_len, counts, mode, algorithm, multiple, seed)
    tokens_in = mixture.tokens_in
    out.mkdir(parents=True, exist_ok=True)
    writer = ShardWriter(out, fmt, seq_len, rows_per_shard, VOCAB)
    stats = RowStats(seq_len)
    for rows in mixture.blocks:
        stats.add(rows)
        writer.add(rows)
    shards = [shard.to_dict() for shard in writer.close()]
    figures = stats.per_source(len(SOURCES))
    total_out = int(figures[:, 1].sum())
    columns = {
        "input_ids": "list<int32>" if fmt == "parquet" else "uint16",
        "labels": "int32",
        "position_ids": "int32",
        "cu_seqlens": "int32",
        "num_segments": "int32",
        "max_seqlen": "int32",
        **({"cu_seqlens_unpadded": "int32"} if multiple > 1 else {}),
        SOURCE_COLUMN: "int32",
    }
    manifest = {
        "format_version": FORMAT_VERSION,
        "packcli_version": "test",
        "mode": mode,
        "algorithm": algorithm if mode == "bin" else None,
        "plan": "global",
        "seq_len": seq_len,
        "format": fmt,
        "labels": "masked",
        "options": {"pad_to_multiple_of": multiple if multiple > 1 else None, "seed": seed},
        "tokenizer": {
            "name_or_path": None if tokenizer is None else str(tokenizer),
            "vocab_size": VOCAB,
            "eos_id": EOS,
            "bos_id": None,
            "pad_id": PAD,
            "fingerprint": None,
            "backend": "hf",
        },
        "columns": columns,
        "totals": {
            "rows": sum(s["rows"] for s in shards),
            "sequences": sum(s["sequences"] for s in shards),
            "real_tokens": sum(s["real_tokens"] for s in shards),
        },
        "shards": shards,
        "group_by": None,
        "sources": [
            {
                "name": name,
                "index": i,
                "paths": [f"{name}.jsonl"],
                "input": kind,
                "weight": weight,
                "epochs": 1.0,
                "target_share": weight,
                "achieved_share": int(figures[i, 1]) / total_out,
                "documents": {
                    "read": counts[i] + 1,
                    "skipped": 1,
                    "skipped_by_reason": {"expected a string": 1},
                    "dropped": 0,
                    "dropped_by_reason": {},
                    "held_out": 0,
                    "available": counts[i],
                    "taken": counts[i],
                    "repeated": 0,
                },
                "tokens": {"in": tokens_in[i], "out": int(figures[i, 1]), "learned": int(figures[i, 2])},
            }
            for i, (name, kind, weight) in enumerate(SOURCES)
        ],
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return Mixed(out, mixture.sequences, mixture.learned, seq_len)


def real_segments_by_source(rows) -> list[tuple[int, list[int]]]:
    """(segment_source, real tokens) of every real segment of rows read back, in row order."""
    unpadded = rows.cu_seqlens if rows.cu_seqlens_unpadded is None else rows.cu_seqlens_unpadded
    sources = rows.segment_columns[SOURCE_COLUMN].tolist()
    seg_offsets = rows.seg_offsets
    out = []
    for r in range(len(rows)):
        span = slice(rows.cu_offsets[r], rows.cu_offsets[r + 1])
        cu, real = rows.cu_seqlens[span], np.diff(unpadded[span])
        first = int(seg_offsets[r])
        for k in range(int(rows.num_segments[r])):
            out.append((sources[first + k], rows.input_ids[r, cu[k] : cu[k] + real[k]].tolist()))
    return out
