"""`--algorithm module:function`: a packing strategy written by the user.

The function is called as ``fn(lengths, capacity, groups)``: the segment lengths (int64),
the row capacity (`--seq-len`) and, with `--group-by`, the group id of each segment
(int32; else None). It returns the rows, either as a list of index arrays (one per row,
sequences in the order they sit in the row) or as one row number per sequence (sequences
of a row in input order). The result is checked before anything is written: every
sequence placed exactly once, no row over capacity, no row mixing groups, and the
`--max-sequences-per-row` cap; a violation is one PackcliError naming the function and the
first bad row.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from packcli.core.errors import PackcliError
from packcli.core.options import check_spec

Strategy = Callable[[np.ndarray, int, "np.ndarray | None"], Any]


def is_custom(algorithm: str | Strategy) -> bool:
    """A user strategy: module:function, or a callable (the Python API)."""
    return not isinstance(algorithm, str) or ":" in algorithm


def load_strategy(spec: str) -> Strategy:
    """The function `spec` names, imported from the current directory or an installed package."""
    check_spec(spec)
    module_name, _, attribute = spec.partition(":")
    cwd = os.getcwd()
    added = cwd not in sys.path
    if added:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise PackcliError(
            f"--algorithm {spec}: cannot import module {module_name!r} from {cwd} or the installed packages ({exc})"
        ) from exc
    except Exception as exc:
        raise PackcliError(f"--algorithm {spec}: importing module {module_name!r} failed: {exc!r}") from exc
    finally:
        if added:
            sys.path.remove(cwd)
    target: Any = module
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise PackcliError(f"--algorithm {spec}: module {module_name!r} has no attribute {attribute!r}")
        target = getattr(target, part)
    if not callable(target):
        raise PackcliError(f"--algorithm {spec}: {attribute!r} in module {module_name!r} is not callable")
    return target


def place_custom(
    spec: str | Strategy, lengths: np.ndarray, capacity: int, groups: np.ndarray | None, cap: int | None
) -> tuple[np.ndarray, np.ndarray, int, np.ndarray | None]:
    """(row, offset, rows, group of each row or None) from the user's function, checked."""
    fn = load_strategy(spec) if isinstance(spec, str) else spec
    name = spec if isinstance(spec, str) else getattr(spec, "__qualname__", repr(spec))
    lengths = np.ascontiguousarray(lengths, dtype=np.int64)
    group_arg = None if groups is None else np.asarray(groups, dtype=np.int32).copy()
    try:
        result = fn(lengths.copy(), int(capacity), group_arg)
    except PackcliError:
        raise
    except Exception as exc:
        raise PackcliError(f"packing strategy {name} raised {exc!r}") from exc
    order, row_of_order, n_rows = _as_rows(result, len(lengths), name)
    row = np.empty(len(lengths), dtype=np.int64)
    offset = np.empty(len(lengths), dtype=np.int64)
    row[order] = row_of_order
    _check_rows(name, lengths, row, n_rows, capacity, groups, cap)
    sorted_lengths = lengths[order]
    ends = np.cumsum(sorted_lengths)
    row_starts = np.searchsorted(row_of_order, np.arange(n_rows))  # order is sorted by row
    first_end = np.concatenate([[0], ends])[row_starts]
    offset[order] = ends - sorted_lengths - first_end[row_of_order]
    row_group = None
    if groups is not None:
        row_group = np.empty(n_rows, dtype=np.int32)
        row_group[row] = groups
    return row, offset, n_rows, row_group


def _as_rows(result: Any, n: int, name: str) -> tuple[np.ndarray, np.ndarray, int]:
    """(sequences in row order, their row, rows): rows numbered densely in their order."""
    if isinstance(result, np.ndarray) and result.ndim == 1 and (result.dtype.kind in "iu" or len(result) == 0):
        return _from_row_numbers(result, n, name)
    if not isinstance(result, (list, tuple)):
        raise PackcliError(
            f"packing strategy {name} returned {type(result).__name__}: expected a list of index arrays "
            "or an array of one row number per sequence"
        )
    if result and all(isinstance(r, (int, np.integer)) and not isinstance(r, bool) for r in result):
        return _from_row_numbers(np.asarray(result, dtype=np.int64), n, name)
    try:
        rows = [np.asarray(r, dtype=np.int64).reshape(-1) for r in result]
    except (TypeError, ValueError) as exc:
        raise PackcliError(f"packing strategy {name}: a row is not an array of sequence indices ({exc})") from exc
    rows = [r for r in rows if len(r)]
    sizes = np.array([len(r) for r in rows], dtype=np.int64)
    flat = np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64)
    row_of = np.repeat(np.arange(len(rows), dtype=np.int64), sizes)
    _check_each_once(name, flat, row_of, n)
    return flat, row_of, len(rows)


def _from_row_numbers(numbers: np.ndarray, n: int, name: str) -> tuple[np.ndarray, np.ndarray, int]:
    numbers = np.asarray(numbers, dtype=np.int64)
    if len(numbers) != n:
        raise PackcliError(f"packing strategy {name} returned {len(numbers):,} row numbers for {n:,} sequences")
    if n and numbers.min() < 0:
        i = int(np.argmax(numbers < 0))
        raise PackcliError(f"packing strategy {name}: sequence {i} has row number {int(numbers[i])}")
    used, dense = np.unique(numbers, return_inverse=True)
    order = np.argsort(dense, kind="stable")
    return order, dense[order], len(used)


def _check_each_once(name: str, flat: np.ndarray, row_of: np.ndarray, n: int) -> None:
    """Every index in range and placed exactly once; else the first row at fault."""
    outside = (flat < 0) | (flat >= n)
    if outside.any():
        k = int(np.argmax(outside))
        raise PackcliError(
            f"packing strategy {name}: row {int(row_of[k])} holds sequence index {int(flat[k])}, not in 0..{n - 1}"
        )
    seen = np.bincount(flat, minlength=n)
    if (seen > 1).any():
        twice = np.flatnonzero(seen > 1)
        k = int(np.flatnonzero(np.isin(flat, twice))[1])  # the second placement of a repeated sequence
        raise PackcliError(f"packing strategy {name}: row {int(row_of[k])} holds sequence {int(flat[k])} again")
    if (seen == 0).any():
        missing = int(np.argmax(seen == 0))
        raise PackcliError(
            f"packing strategy {name}: sequence {missing} is in no row ({int((seen == 0).sum()):,} missing)"
        )


def _check_rows(
    name: str,
    lengths: np.ndarray,
    row: np.ndarray,
    n_rows: int,
    capacity: int,
    groups: np.ndarray | None,
    cap: int | None,
) -> None:
    """Capacity, groups and the cap, each reported at the first bad row."""
    tokens = np.bincount(row, weights=lengths, minlength=n_rows)
    if n_rows and tokens.max() > capacity:
        r = int(np.argmax(tokens > capacity))
        raise PackcliError(
            f"packing strategy {name}: row {r} holds {int(tokens[r]):,} tokens, more than the capacity {capacity:,}"
        )
    if cap is not None:
        count = np.bincount(row, minlength=n_rows)
        if n_rows and count.max() > cap:
            r = int(np.argmax(count > cap))
            raise PackcliError(
                f"packing strategy {name}: row {r} holds {int(count[r])} sequences, more than --max-sequences-per-row {cap}"
            )
    if groups is not None and n_rows:
        low = np.full(n_rows, np.iinfo(np.int64).max)
        high = np.full(n_rows, -1)
        np.minimum.at(low, row, groups)
        np.maximum.at(high, row, groups)
        if (low != high).any():
            r = int(np.argmax(low != high))
            raise PackcliError(
                f"packing strategy {name}: row {r} mixes groups {int(low[r])} and {int(high[r])} (--group-by)"
            )
