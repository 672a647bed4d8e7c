"""Preference pairs planned whole: each pair is one placed unit, split into its two
segments only when its row is gathered.

The spill holds a pair's two segments back to back (chosen, then rejected) as one spill
segment of length Lc + Lr, and `first` keeps Lc beside it. The planner places units: a
unit takes Lc + Lr in its row, or with --pad-to-multiple-of each side rounded up on its
own. Bin mode places them with the packers that decide per sequence (`plan_lengths`
through planner.place: nf, ff, ffd, bfd, the histogram packers on the units' lengths, or
a user strategy, which is given the units' lengths); concat mode is next fit over the
units in stream order: a row that cannot take the next pair is padded, and no pair is
ever cut. `--max-sequences-per-row N` lets a row take N // 2 pairs. Where the packer
decides from the counts of each length (bfd, spfhp, lpfhp), the plan of row patterns is
made of the units' room and laid out per unit.

`PairPlan.pieces` hands out two pieces per unit, (start, Lc) at the unit's offset and
(start + Lc, Lr) right after it, so the row kernel makes them two segments of one row,
next to each other, each with its positions restarting and its first label masked.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace

import numpy as np

from packcli.core.errors import PackcliError
from packcli.plan.contract import Pieces, RowOrder
from packcli.plan.patterns import pattern_plan
from packcli.plan.permute import RowPermutation
from packcli.plan.planner import from_counts, place
from packcli.plan.rows import padded_lengths
from packcli.plan.settings import PlanSettings


@dataclass
class PairPlan:
    """Where each pair goes, one entry per pair (unit); see the module docstring."""

    unit_start: np.ndarray  # int64: the pair's first token in the spill
    first: np.ndarray  # int64: tokens of its chosen segment (Lc)
    length: np.ndarray  # int64: tokens of both segments (Lc + Lr)
    row: np.ndarray  # int64: its output row (after shuffling)
    offset: np.ndarray  # int64: where its chosen segment starts in the row
    n_rows: int
    seq_len: int
    multiple: int = 1  # --pad-to-multiple-of: each segment padded to a multiple of it
    row_group: np.ndarray | None = None  # int32 per output row: its --group-by group id
    remainder_tokens: int = 0  # never a partial row to drop: pairs are whole in every mode

    def row_order(self) -> tuple[np.ndarray, np.ndarray]:
        """(pairs sorted by row, stable; their rows): what `pieces` searches."""
        order = np.argsort(self.row, kind="stable")
        return order, self.row[order]

    def placed(self) -> np.ndarray:
        """Each pair's room in its row: its two segments, each padded to the multiple."""
        return placed_lengths(self.first, self.length, self.multiple)

    def placed_histogram(self) -> np.ndarray:
        """Pairs per placed length 0..seq_len (the report's window cost counts units)."""
        return np.bincount(self.placed(), minlength=self.seq_len + 1)[: self.seq_len + 1]

    def pieces(self, first: int, last: int, order: RowOrder = None) -> Pieces:
        """The two segments of every pair of output rows [first, last): all chosen ones,
        then all rejected ones, each rejected one right after its chosen one in the row."""
        units, sorted_rows = order if order is not None else self.row_order()
        lo, hi = np.searchsorted(sorted_rows, [first, last])
        pick = units[lo:hi]
        start, chosen, row, offset = self.unit_start[pick], self.first[pick], self.row[pick] - first, self.offset[pick]
        rejected = self.length[pick] - chosen
        return Pieces(
            np.concatenate([start, start + chosen]),
            np.concatenate([chosen, rejected]),
            np.concatenate([row, row]),
            np.concatenate([offset, offset + padded_lengths(chosen, self.multiple)]),
        )

    def pairs(self, first: int, last: int, order: RowOrder = None) -> np.ndarray:
        """The pairs (indices in spill order) of output rows [first, last), as `pieces` lists them."""
        units, sorted_rows = order if order is not None else self.row_order()
        lo, hi = np.searchsorted(sorted_rows, [first, last])
        found: np.ndarray = units[lo:hi]
        return found


def placed_lengths(first: np.ndarray, length: np.ndarray, multiple: int) -> np.ndarray:
    """A pair's room in a row: its two segments, each padded to `multiple` on its own."""
    first = np.asarray(first, dtype=np.int64)
    rest = np.asarray(length, dtype=np.int64) - first
    room: np.ndarray = padded_lengths(first, multiple) + padded_lengths(rest, multiple)
    return room


def unit_settings(settings: PlanSettings) -> PlanSettings:
    """The settings units are placed with: bin mode on the units' placed lengths (concat:
    next fit, which keeps stream order), --max-sequences-per-row counted in pairs."""
    cap = settings.max_per_row
    algorithm = "nf" if settings.mode == "concat" else settings.algorithm
    return replace(
        settings,
        mode="bin",
        algorithm=algorithm,
        buffer_size=None,
        multiple=1,
        max_per_row=None if cap is None else cap // 2,
    )


def plan_pairs(
    first: np.ndarray, lengths: np.ndarray, settings: PlanSettings, groups: np.ndarray | None = None, window: int = 0
) -> PairPlan:
    """The plan of pairs: `first` (Lc) and `lengths` (Lc + Lr) per pair in spill order;
    `groups`: each pair's --group-by id. Rows are shuffled as every plan's are (by seed
    and window)."""
    for thread in _warming:
        thread.join()
    return _plan(first, lengths, settings, groups, window)


def _plan(
    first: np.ndarray, lengths: np.ndarray, settings: PlanSettings, groups: np.ndarray | None, window: int
) -> PairPlan:
    first = np.asarray(first, dtype=np.int64)
    lengths = np.asarray(lengths, dtype=np.int64)
    if len(first) != len(lengths) or (len(first) and ((first < 1).any() or (lengths - first < 1).any())):
        raise PackcliError("internal: a pair needs two segments of at least one token each")
    room = placed_lengths(first, lengths, settings.multiple)
    row, offset, n_rows, row_group = _placed_units(room, unit_settings(settings), groups, window)
    starts = np.cumsum(lengths) - lengths
    return PairPlan(starts, first, lengths, row, offset, n_rows, settings.seq_len, settings.multiple, row_group)


def _placed_units(
    room: np.ndarray, s: PlanSettings, groups: np.ndarray | None, window: int
) -> tuple[np.ndarray, np.ndarray, int, np.ndarray | None]:
    """(row, offset, rows, group of each row) of every unit, rows shuffled as every plan's
    are. Where the packer decides from the counts of each length alone (bfd, spfhp, lpfhp;
    planner.from_counts), the plan of row patterns is laid out per unit (its placement):
    the rows that plan makes of segments of these lengths, repaired on patterns, where
    repairing a per-unit placement took 0.6 s on GSM8K's 7,473 pairs. The other packers
    place per unit (planner.place)."""
    if from_counts(s.algorithm, s.max_per_row):
        plan = pattern_plan(
            room,
            s.seq_len,
            str(s.algorithm),
            cap=s.max_per_row,
            groups=groups,
            shuffle=s.shuffle,
            seed=s.seed,
            window=window,
        )
        placed = plan.placement(np.cumsum(room) - room)  # in unit order, output rows
        return placed["row"], placed["offset"], plan.n_rows, plan.row_group
    row, offset, n_rows, row_group = place(room, s, groups)
    if s.shuffle:
        permutation = RowPermutation(n_rows, s.seed, window).table()
        row = permutation[row]
        if row_group is not None:
            moved = np.empty_like(row_group)
            moved[permutation] = row_group
            row_group = moved
    return row, offset, n_rows, row_group


_warming: list[threading.Thread] = []  # the one warm-up of this process, once started


def start_warming(settings: PlanSettings, token_dtype: np.dtype) -> None:
    """Load the compiled kernels a plan of pairs and its rows need (numba imported, each
    kernel read from its disk cache) on a thread, once per process: a run of pairs calls
    no kernel before it plans, and GSM8K's 7,473 pairs lost 0.8 s to loading them then,
    where plain SFT loads its kernels while it spills. Start it once the input is being
    read (after the tokenizer's worker processes are forked); `plan_pairs` waits for it."""
    if _warming:
        return
    thread = threading.Thread(target=_warm, args=(settings, token_dtype), name="packcli-warm-pairs", daemon=True)
    _warming.append(thread)
    thread.start()


def _warm(settings: PlanSettings, token_dtype: np.dtype) -> None:
    from packcli.core import jit
    from packcli.plan.rows import fill_rows

    jit.use_compiled()
    try:
        first, lengths = np.array([1, 2, 1, 3], dtype=np.int64), np.array([3, 4, 2, 5], dtype=np.int64)
        plan = _plan(first, lengths, replace(settings, seq_len=max(16, settings.seq_len)), None, 0)
        pieces = plan.pieces(0, plan.n_rows)
        tokens = np.zeros(int(lengths.sum()), dtype=token_dtype)
        bits = np.zeros(len(tokens) // 8 + 1, dtype=np.uint8)
        fill_rows(
            tokens,
            pieces.start,
            bits,
            pieces.start,
            pieces.length,
            pieces.row,
            pieces.offset,
            plan.n_rows,
            plan.seq_len,
            0,
        )
    except Exception:
        pass  # only a head start: the plan itself reports what is wrong


def uncapped_pair_rows(
    first: np.ndarray, lengths: np.ndarray, settings: PlanSettings, groups: np.ndarray | None
) -> int:
    """Rows the plan of these pairs needs without --max-sequences-per-row (0 for a user strategy)."""
    from packcli.plan.strategy import is_custom

    if is_custom(settings.algorithm):
        return 0
    room = placed_lengths(first, lengths, settings.multiple)
    return _placed_units(room, replace(unit_settings(settings), max_per_row=None, shuffle=False), groups, 0)[2]
