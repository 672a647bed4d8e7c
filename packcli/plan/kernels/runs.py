"""The length histogram and the runs built from it: how bfd and the histogram packers hand
out positions to sequences in one sequential pass."""

from __future__ import annotations

import numpy as np

from packcli.core.jit import njit

# --------------------------------------------------------------------------------------
# The length histogram
# --------------------------------------------------------------------------------------


@njit(cache=True)
def _length_counts(lengths, capacity):
    counts = np.zeros(capacity + 1, dtype=np.int64)
    for i in range(lengths.shape[0]):
        counts[lengths[i]] += 1
    return counts


@njit(cache=True)
def _shortest_length(counts):
    shortest = 1
    while counts[shortest] == 0:
        shortest += 1
    return shortest


@njit(cache=True)
def _first_table_size(counts, capacity):
    """First size of a table that grows with the distinct lengths (bfd's runs, the
    histogram packers' groups): measured 3 to 9 entries per distinct length on lognormal
    lengths. Rows of an np.empty table that are never written cost nothing, so the guess
    is generous; a caller whose table fills retries with one 4x bigger (growing a table
    inside the loop makes numba take ~20 s to compile the function)."""
    n_lengths = 0
    for length in range(1, capacity + 1):
        n_lengths += counts[length] > 0
    return 16 * n_lengths + 1024


# --------------------------------------------------------------------------------------
# Runs: how bfd and the histogram packers hand out positions
#
# A run is `rows` rows, first_row, first_row + step, ..., each taking `copies` sequences of
# one length side by side from `offset`: a grid of rows x copies slots. The runs of a
# length, in order, list its slots, and the j-th sequence of length L in input order takes
# the j-th slot of L, so one sequential pass places every sequence. Inside a run, bfd's
# order is row by row (it fills a row before it moves on); the histogram packers are free
# to choose, and walk the longer side of the grid first, which changes runs least often.
# --------------------------------------------------------------------------------------

_R_FIRST_ROW = 0
_R_STEP = 1
_R_ROWS = 2
_R_OFFSET = 3
_R_COPIES = 4
_R_COLUMNS = 5

# The placement pass keeps one 64-byte line of state per length. A position is one int64,
# row << 32 | offset, so that stepping along a row (offset + length) or down the rows
# (row + step) is the same addition of a delta.
_P_POSITION = 0
_P_DELTA = 1  # added after each sequence
_P_LEFT = 2  # sequences left before the walk turns to the next row or copy
_P_LINE = 3  # position where the current line of the grid started
_P_LINE_DELTA = 4  # from one line of the grid to the next
_P_LINE_LENGTH = 5
_P_LINES_LEFT = 6
_P_RUN = 7
_P_COLUMNS = 8


@njit(cache=True, inline="always")
def _start_run(state, length, runs, r, rows_first):
    rows = np.int64(runs[r, _R_ROWS])
    copies = np.int64(runs[r, _R_COPIES])
    row_delta = np.int64(runs[r, _R_STEP]) << 32
    position = (np.int64(runs[r, _R_FIRST_ROW]) << 32) | runs[r, _R_OFFSET]
    state[length, _P_POSITION] = position
    state[length, _P_LINE] = position
    if copies == 1 or (rows_first and rows >= copies):  # down the rows, then the next copy
        state[length, _P_DELTA] = row_delta
        state[length, _P_LINE_DELTA] = length
        state[length, _P_LINE_LENGTH] = rows
        state[length, _P_LINES_LEFT] = copies
    else:  # along a row, then the next row
        state[length, _P_DELTA] = length
        state[length, _P_LINE_DELTA] = row_delta
        state[length, _P_LINE_LENGTH] = copies
        state[length, _P_LINES_LEFT] = rows
    state[length, _P_LEFT] = state[length, _P_LINE_LENGTH]
    state[length, _P_RUN] = r


@njit(cache=True)
def _runs_to_placement(lengths, capacity, run_begin, run_end, runs, rows_first, row, offset):
    """One sequential pass. Moving to the next line of a run reads only the length's own
    state line; only a new run reads the runs table (once per run, not per sequence).
    rows_first: walk each run down its rows first when that side is the longer one."""
    # Only the lines of lengths that occur are written (and read): zeroing all of them
    # would touch 64 bytes per possible length, 512 KB at 8192, on every call.
    state = np.empty((capacity + 1, _P_COLUMNS), dtype=np.int64)
    for length in range(1, capacity + 1):
        if run_begin[length] < run_end[length]:
            _start_run(state, length, runs, run_begin[length], rows_first)
    for i in range(lengths.shape[0]):
        length = lengths[i]
        position = state[length, _P_POSITION]
        row[i] = position >> 32
        offset[i] = position & 0xFFFFFFFF
        state[length, _P_POSITION] = position + state[length, _P_DELTA]
        state[length, _P_LEFT] -= 1
        if state[length, _P_LEFT] == 0:
            state[length, _P_LINES_LEFT] -= 1
            if state[length, _P_LINES_LEFT] > 0:
                line = state[length, _P_LINE] + state[length, _P_LINE_DELTA]
                state[length, _P_LINE] = line
                state[length, _P_POSITION] = line
                state[length, _P_LEFT] = state[length, _P_LINE_LENGTH]
            elif state[length, _P_RUN] + 1 < run_end[length]:
                _start_run(state, length, runs, state[length, _P_RUN] + 1, rows_first)
