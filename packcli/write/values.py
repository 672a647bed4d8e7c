"""Values a spill's segments carry besides their tokens: a preference pair's chosen length
(the spill holds a pair as one segment, chosen then rejected) and a loss weight per
segment (--weight-field); and the per-segment columns the rows get from them.

They are held in memory while the spill is written (a few bytes per segment), saved
beside it before it is marked complete (so --resume finds them), and read back for the
plan and the gather. A piece of a plan is known by where it starts in a spill in input
order: the segment it falls in is found by searching the segments' starts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from packcli.core.errors import PackcliError
from packcli.core.storage import load_per_segment
from packcli.plan.contract import Pieces, Plan
from packcli.write.gather import PieceTags

FIRST_FILE = "pair_first.npy"  # int64 per segment: a pair's chosen length
WEIGHTS_FILE = "weights.npy"  # float32 per segment: its record's --weight-field
PAIR_COLUMN = "segment_pair"  # int32: the pair's index in the output (its place in spill order)
CHOSEN_COLUMN = "segment_chosen"  # int32: 1 for the chosen side, 0 for the rejected one
WEIGHT_COLUMN = "segment_weight"  # float32: the record's weight


@dataclass
class SegmentValues:
    """Per spilled segment, in input order as they are made: each pair's chosen length
    (`pairs`) and each segment's weight (`weighted`)."""

    pairs: bool
    weighted: bool
    first: list[np.ndarray] = field(default_factory=list)
    weight: list[np.ndarray] = field(default_factory=list)

    def append(self, first: np.ndarray | None, weight: np.ndarray | None) -> None:
        """One batch's segments: their chosen lengths (pairs) and weights (weighted)."""
        if self.pairs:
            assert first is not None
            self.first.append(np.asarray(first, dtype=np.int64))
        if self.weighted:
            assert weight is not None
            self.weight.append(np.asarray(weight, dtype=np.float32))

    def save(self, directory: Path) -> None:
        """Beside the spill, before it is marked complete."""
        if self.pairs:
            np.save(Path(directory) / FIRST_FILE, _joined(self.first, np.int64))
        if self.weighted:
            np.save(Path(directory) / WEIGHTS_FILE, _joined(self.weight, np.float32))


def _joined(parts: list[np.ndarray], dtype: type) -> np.ndarray:
    return np.concatenate(parts).astype(dtype) if parts else np.zeros(0, dtype=dtype)


@dataclass
class SpillValues:
    """A complete spill's values, read back: `first` (pairs) and `weight` (weighted), one
    per segment, or None."""

    first: np.ndarray | None
    weight: np.ndarray | None

    @staticmethod
    def load(directories: list[Path], counts: list[int], pairs: bool, weighted: bool) -> SpillValues:
        """The values of a spill (or of its parts, in order: the Ray engine's), each
        checked to have one entry per segment."""
        return SpillValues(
            _load(directories, counts, FIRST_FILE) if pairs else None,
            _load(directories, counts, WEIGHTS_FILE) if weighted else None,
        )

    def tags(self, lengths: np.ndarray) -> PieceTags | None:
        """The per-segment columns of the rows: a pair's index and side, the weight (None:
        none); `lengths`: the spill's segments (pairs whole)."""
        starts = np.cumsum(lengths) - lengths
        taggers: list[PieceTags] = []
        if self.first is not None:
            taggers.append(PairSides(starts))
        if self.weight is not None:
            taggers.append(SegmentWeights(starts, self.weight))
        if not taggers:
            return None
        return taggers[0] if len(taggers) == 1 else ComposedTags(tuple(taggers))


def _load(directories: list[Path], counts: list[int], name: str) -> np.ndarray:
    parts = [load_per_segment(Path(d) / name, count, "values") for d, count in zip(directories, counts)]
    return np.concatenate(parts) if len(parts) != 1 else parts[0]


def segment_of(starts: np.ndarray, at: np.ndarray) -> np.ndarray:
    """The segment (index in spill order) each position of a spill in input order falls in."""
    found: np.ndarray = np.searchsorted(starts, np.asarray(at, dtype=np.int64), side="right") - 1
    return found


@dataclass(frozen=True)
class PairSides:
    """PieceTags of pairs planned whole (plan/pairs.py): a piece starting where its spill
    segment starts is the chosen side, any other the rejected one; the pair is that
    segment's index."""

    starts: np.ndarray  # int64: each pair's first token in the spill

    def __call__(self, plan: Plan, first_row: int, last_row: int, pieces: Pieces) -> dict[str, np.ndarray]:
        at = np.asarray(pieces.start, dtype=np.int64)
        pair = segment_of(self.starts, at)
        return {
            PAIR_COLUMN: pair.astype(np.int32),
            CHOSEN_COLUMN: (self.starts[pair] == at).astype(np.int32),
        }


@dataclass(frozen=True)
class SegmentWeights:
    """PieceTags of a spill in input order: each piece takes the weight of the segment it
    starts in (a piece of a concat row is part of one document)."""

    starts: np.ndarray  # int64: each segment's first token in the spill
    weight: np.ndarray  # float32 per segment

    def __call__(self, plan: Plan, first_row: int, last_row: int, pieces: Pieces) -> dict[str, np.ndarray]:
        found: np.ndarray = self.weight[segment_of(self.starts, pieces.start)]
        return {WEIGHT_COLUMN: found}


@dataclass(frozen=True)
class ComposedTags:
    """Several PieceTags at once: every column of each (names must not repeat)."""

    parts: tuple[PieceTags, ...]

    def __call__(self, plan: Plan, first_row: int, last_row: int, pieces: Pieces) -> dict[str, np.ndarray]:
        columns: dict[str, np.ndarray] = {}
        for tags in self.parts:
            for name, values in tags(plan, first_row, last_row, pieces).items():
                if name in columns:
                    raise PackcliError(f"internal: two taggers give {name}")
                columns[name] = values
        return columns
