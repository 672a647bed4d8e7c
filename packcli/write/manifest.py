"""The two files that describe an output: manifest.json and report.json (docs/format.md).

Their schema is written down here once, as TypedDicts, with the one reader every
consumer of an output goes through (`load_manifest`: verify, stats, the loaders, the
exports), so a manifest from another packcli version gets the same answer everywhere.
`pack` fills them in engine/summary.py. Key order is the order of the files' bytes: a
manifest is byte-identical for the same input and options.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NotRequired, Required, TypedDict, cast

from packcli.core.choices import FORMATS
from packcli.core.errors import PackcliError
from packcli.core.storage import MANIFEST_FILE, incomplete_output, is_complete
from packcli.plan.grouping import GroupEntry

# 2 added the manifest's `plan`; the files and columns are those of 1, so 1 reads as it is.
# 3 added the column max_seqlen, cu_seqlens_unpadded with --pad-to-multiple-of, and
# `group_by`, the `groups` table and the `group` column of --group-by outputs; readers
# compute max_seqlen for older outputs.
# 4 changed the shuffled row order (a seeded Feistel bijection, permute.py); the files,
# columns and keys are those of 3.
# 5 added per-segment columns (`segment_source` of --mix outputs: Parquet list columns, npy
# files with one shared segment_offsets.npy) and the manifest's `sources`; an output
# without them has the files and columns of 4.
# 6 added preference pairs (per-segment columns `segment_pair` and `segment_chosen`, the
# manifest's `pairs`) and loss weights (`segment_weight`, float32); an output without
# them has the files, columns and keys of 5.
FORMAT_VERSION = 6
OLDEST_READABLE_VERSION = 1
REQUIRED_KEYS = ("seq_len", "format", "shards", "tokenizer")


# ----------------------------------------------------------------------------- manifest.json


class TokenizerInfo(TypedDict):
    name_or_path: str | None
    vocab_size: int | None
    eos_id: int | None
    bos_id: int | None
    pad_id: int
    fingerprint: str | None
    backend: str


class Columns(TypedDict, total=False):
    input_ids: Required[str]
    labels: Required[str]
    position_ids: Required[str]
    cu_seqlens: Required[str]
    num_segments: Required[str]
    max_seqlen: str  # format 3
    cu_seqlens_unpadded: str  # with --pad-to-multiple-of
    group: str  # with --group-by
    segment_source: str  # format 5, with --mix: one entry per real segment
    segment_pair: str  # format 6, preference pairs: the pair's index in the output
    segment_chosen: str  # format 6, preference pairs: 1 chosen, 0 rejected
    segment_weight: str  # format 6, --weight-field: float32


class Totals(TypedDict):
    rows: int
    sequences: int
    real_tokens: int


class ShardEntry(TypedDict):
    path: str
    rows: int
    sequences: int
    real_tokens: int
    checksum: str


class SourceDocuments(TypedDict):
    """A source's documents: read, skipped (bad records) and dropped (by pack's rules), by
    reason; held out (--holdout), available to the training output, taken into it, and
    how many of those taken were repeats (epochs above 1)."""

    read: int
    skipped: int
    skipped_by_reason: dict[str, int]
    dropped: int
    dropped_by_reason: dict[str, int]
    held_out: int
    available: int
    taken: int
    repeated: int


# A source's tokens: tokenized from the documents it took (`in`), real tokens in the rows
# (`out`, padding excluded) and of those the learned ones (label not -100). The functional
# form, since `in` is a keyword.
SourceTokens = TypedDict("SourceTokens", {"in": int, "out": int, "learned": int})


class SourceEntry(TypedDict):
    """One source of a mixture (--mix), in the manifest's and the report's `sources`, at
    its index (the value of `segment_source` for its segments)."""

    name: str
    index: int
    paths: list[str]
    input: str  # text, prompt, chat or ids
    weight: float | None
    epochs: float
    target_share: float | None
    achieved_share: float
    documents: SourceDocuments
    tokens: SourceTokens


class Manifest(TypedDict):
    format_version: int
    packcli_version: str
    mode: str
    algorithm: str | None
    plan: str  # absent in format 1
    seq_len: int
    format: str
    labels: str
    options: dict[str, Any]
    tokenizer: TokenizerInfo
    columns: Columns
    totals: Totals
    shards: list[ShardEntry]
    group_by: NotRequired[str | None]  # format 3
    groups: NotRequired[list[GroupEntry]]  # format 3, with --group-by
    sources: NotRequired[list[SourceEntry]]  # format 5, with --mix: one entry per source, in index order
    pairs: NotRequired[int]  # format 6, preference pairs: how many (segment_pair runs 0 to pairs - 1)


SPLITS = ("train", "validation")  # the outputs `pack --holdout` writes inside DIR


def split_outputs(out_dir: Path | str) -> list[Path]:
    """The outputs of `pack --holdout` in `out_dir` (DIR/train, DIR/validation, those that
    exist), or [] for a directory that is not a --holdout's."""
    out_dir = Path(out_dir)
    if is_complete(out_dir):
        return []
    return [out_dir / name for name in SPLITS if (out_dir / name).is_dir()]


def load_manifest(out_dir: Path | str) -> Manifest:
    """The manifest of a finished output, refused with what to do when this packcli cannot read it.

    Its absence means the run did not finish. Every format up to FORMAT_VERSION reads:
    the columns of format 1 are all still there (later formats only added keys and optional
    columns), and readers compute max_seqlen where it is missing."""
    out_dir = Path(out_dir)
    path = out_dir / MANIFEST_FILE
    if not out_dir.is_dir():
        raise PackcliError(f"{out_dir}: no such directory")
    if not path.is_file():
        splits = split_outputs(out_dir)
        if splits:
            names = " and ".join(f"{p}" for p in splits)
            raise PackcliError(f"{out_dir} holds the outputs of --holdout, not one output: name {names}")
        raise incomplete_output(out_dir)
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise PackcliError(f"{path}: not valid JSON ({exc})") from exc
    return checked_manifest(manifest, str(path), str(out_dir))


def checked_manifest(manifest: object, path: str, output: str) -> Manifest:
    """A parsed manifest (`path`: where it was read, `output`: its output, a directory or
    URL) checked as every reader needs it: an object, a format_version this packcli reads
    (a newer one may change what the files mean, so it is refused, not guessed at), the
    required keys and a known format."""
    if not isinstance(manifest, dict):
        raise PackcliError(f"{path}: not a packcli manifest (a JSON object is expected)")
    version = manifest.get("format_version")
    if version is None:
        raise PackcliError(f"{path}: missing format_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < OLDEST_READABLE_VERSION:
        raise PackcliError(f"{path}: unknown format_version {version!r}")
    if version > FORMAT_VERSION:
        raise PackcliError(f"{output}: written by a newer packcli (format {version}); upgrade packcli")
    missing = [key for key in REQUIRED_KEYS if key not in manifest]
    if missing:
        raise PackcliError(f"{path}: missing {', '.join(missing)}")
    if manifest["format"] not in FORMATS:
        raise PackcliError(f"{path}: unknown format {manifest['format']!r}")
    return cast("Manifest", manifest)  # the keys every reader needs are checked above


# ----------------------------------------------------------------------------- report.json


class SequencesPerRow(TypedDict):
    mean: float
    max: int


class FillPerRow(TypedDict):
    min: int
    median: float
    mean: float


class SequenceLengths(TypedDict):
    min: int
    median: float
    max: int


class RowSummary(TypedDict):
    """The figures measured from rows (`RowStats.summary`), in pack's report and in stats."""

    seq_len: int
    rows: int
    sequences_packed: int
    real_tokens: int
    padding_tokens: int
    label_tokens: int
    efficiency: float
    lower_bound_rows: int
    sequences_per_row: SequencesPerRow
    fill_per_row: FillPerRow
    sequence_length: SequenceLengths


class NoPacking(TypedDict):
    rows: int
    efficiency: float


class Documents(TypedDict):
    read: int
    skipped: int
    skipped_by_reason: dict[str, int]
    skipped_examples: list[str]
    special_token_records: int
    zero_weight: NotRequired[int]  # --weight-field: records of weight 0, dropped


class WeightSummary(TypedDict):
    """segment_weight over the segments of the rows (--weight-field)."""

    segments: int
    min: float
    mean: float
    max: float


class PairsSummary(TypedDict):
    """Preference pairs: kept, skipped for equal sides, dropped for not fitting a row."""

    pairs: int
    identical_skipped: int
    identical_examples: list[str]  # where the first few pairs with equal sides came from
    overlong_dropped: int  # longer than a row with their prompts cut to one token (--overlong truncate)


class Overlong(TypedDict):
    policy: str
    count: int
    tokens_lost: int
    dropped_without_labels: int


class UnlearnedCause(TypedDict):
    sequences: int
    tokens: int


class Unlearned(TypedDict):
    """Segments with no learned token: dropped (policy "drop") or kept (--keep-unlearned)."""

    policy: str
    sequences: int
    tokens: int
    by_cause: dict[str, UnlearnedCause]
    examples: list[str]  # where the first few sequences with nothing to learn at all came from


class Remainder(TypedDict):
    policy: str
    tokens: int


class Buffer(TypedDict):
    plan: str
    size: int | None
    windows: int
    bfd_rows_in_one_window: int
    extra_rows: int
    efficiency_in_one_window: float


class SpillSummary(TypedDict):
    bytes: int
    reused: bool
    tmp_dir: str | None


class BadRecordCounts(TypedDict):
    """The reader's bad-record tally, as the spill keeps it for --resume."""

    read: int
    skipped: int
    by_reason: dict[str, int]
    examples: list[str]


class Report(RowSummary, total=False):
    """report.json: the row figures and these. `remainder` (concat mode) or `buffer` (bin
    mode); every other key always."""

    documents: Documents
    input: str
    mode: str
    algorithm: str | None
    tokenizer_backend: str
    tokenizer_backend_reason: str | None
    workers: dict[str, Any]
    tokens_read: int
    overlong: Overlong
    unlearned: Unlearned
    no_packing: NoPacking
    remainder: Remainder
    buffer: Buffer
    spill: SpillSummary
    timings: dict[str, float]
    tokens_per_second: float
    groups: list[GroupEntry]
    max_sequences_per_row: SequenceCap
    engine: dict[str, Any]  # local or ray; for ray: tasks, retries, workers, seconds per stage
    mixture: dict[str, Any]  # --mix or --holdout: the seed, target_tokens, max_epochs, holdout and split
    sources: list[SourceEntry]  # --mix or --holdout: as the manifest's
    splits: dict[str, Any]  # --holdout: what `pack` returns, the report of each output by its split
    pairs: PairsSummary  # preference pairs
    weights: WeightSummary  # --weight-field: the segments' weights in the rows


class SequenceCap(TypedDict):
    """What --max-sequences-per-row cost: rows against the uncapped plan of the same lengths."""

    cap: int
    rows: int
    uncapped_rows: int | None  # None for a user strategy, which has no uncapped twin
    extra_rows: int | None
