"""Positioned reads of many pieces of a file at once: a block's pieces merged into few
ranges and read in one kernel call, without the GIL.

The readers of a spill (write/spill.py) and of its sorted copy or chunks
(write/by_length.py) read a block's pieces so, not through a memory map: a block's pieces
lie all over the file, and the kernel maps whole page-cache folios around every piece a
mapping touches, which made a gathered block cost a hundred times its size in resident
memory. The reads go through the C library's `pread` (write/syscalls.py) from a Numba
kernel, a block's hundreds of them in one call.
"""

from __future__ import annotations

import os
from typing import BinaryIO

import numpy as np

from packcli.core.errors import PackcliError
from packcli.core.flow import pooled_empty
from packcli.core.jit import kernel, njit, numba_name


class Ranges:
    """A block's pieces merged into few ranges of a file, so that it is read in few system
    calls: range `group[i]` holds piece i, which starts `piece_start[i]` (in the file)."""

    GAP = 4096  # tokens: sorted pieces read through a gap smaller than this rather than seek over it

    def __init__(self, start: np.ndarray, end: np.ndarray, group: np.ndarray, piece_start: np.ndarray):
        self.start, self.end, self.group, self.piece_start = start, end, group, piece_start

    @staticmethod
    def sorted(starts: np.ndarray, lengths: np.ndarray, gap: int = GAP) -> Ranges:
        """The pieces sorted by position, merged where the gap between them is small."""
        order = np.argsort(starts, kind="stable")
        s = starts[order]
        e = s + lengths[order]
        reach = np.maximum.accumulate(e) if len(e) else e
        begins = np.ones(len(s), dtype=bool)
        begins[1:] = s[1:] > reach[:-1] + gap
        firsts = np.flatnonzero(begins)
        group = np.empty(len(s), dtype=np.int64)
        group[order] = np.cumsum(begins) - 1
        return Ranges(s[firsts], np.maximum.reduceat(e, firsts) if len(firsts) else e, group, starts)

    @staticmethod
    def in_order(starts: np.ndarray, lengths: np.ndarray, gap: int) -> Ranges:
        """The pieces in the order given, merged where each starts at most `gap` after the
        one before it ends, without sorting: for pieces that mostly come in runs already
        (the slots of one length in a row take consecutive ranks)."""
        starts = np.asarray(starts, dtype=np.int64)
        lengths = np.asarray(lengths, dtype=np.int64)
        start, end, group = kernel(_runs_in_order, len(starts))(starts, lengths, gap)
        return Ranges(start, end, group, starts)

    def read(self, f: BinaryIO, dtype: np.dtype, first: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Elements [first, end) of each range from file `f`, one after another in one array;
        returns the array and where each range starts in it."""
        return self.read_fd(f.fileno(), dtype, first, end)

    def read_fd(self, fd: int, dtype: np.dtype, first: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """`read` from a file descriptor."""
        sizes = end - first
        offsets = np.cumsum(sizes) - sizes
        out = pooled_empty(int(sizes.sum()), dtype)
        read_ranges(fd, out, offsets, first, sizes)
        return out, offsets

    def per_piece(self, range_base: np.ndarray) -> np.ndarray:
        """For each piece: range_base[its range] + its position."""
        at: np.ndarray = range_base[self.group] + self.piece_start
        return at


@njit(cache=True, nogil=True)
def _runs_in_order(starts: np.ndarray, lengths: np.ndarray, gap: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Ranges.in_order's (start, end, group): a piece that starts before the one before it
    ends, or more than `gap` after, begins a range."""
    n = len(starts)
    start = np.empty(n, dtype=np.int64)
    end = np.empty(n, dtype=np.int64)
    group = np.empty(n, dtype=np.int64)
    k = -1
    for i in range(n):
        s, e = starts[i], starts[i] + lengths[i]
        if k < 0 or s < end[k] or s - end[k] > gap:
            k += 1
            start[k] = s
        end[k] = e
        group[i] = k
    return start[: k + 1].copy(), end[: k + 1].copy(), group


def read_ranges(fd: int, out: np.ndarray, offsets: np.ndarray, first: np.ndarray, sizes: np.ndarray) -> None:
    """Elements [first[i], first[i] + sizes[i]) of file `fd` (of out's dtype) into
    out[offsets[i]:], every range. The reads run in a kernel without the GIL, a block's
    hundreds of them in one call: one positioned read each from Python cost the GIL's
    hand-over between the gathering threads at every read. A read the kernel cannot
    finish (a signal, an error, the end of the file) is finished here, where Python
    retries or raises."""
    view = out.view(np.uint8).data
    item = out.dtype.itemsize
    offsets, first, sizes = (np.ascontiguousarray(a, dtype=np.int64) for a in (offsets, first, sizes))
    at = 0
    while at < len(sizes):
        stopped, done = kernel(_read_ranges, int(sizes[at:].sum()))(fd, out, offsets, first, sizes, item, at)
        if stopped < 0:
            return
        begin, end = int(offsets[stopped]) * item + done, int(offsets[stopped] + sizes[stopped]) * item
        read_exactly(fd, view[begin:end], int(first[stopped]) * item + done)
        at = stopped + 1


_pread = numba_name("packcli.write.syscalls", "pread")


def _read_ranges_interpreted(
    fd: int, out: np.ndarray, offsets: np.ndarray, first: np.ndarray, sizes: np.ndarray, item: int, at: int
) -> tuple[int, int]:
    """The kernel's twin: one read each, as Python makes them."""
    view = out.view(np.uint8).data
    for i in range(at, len(first)):
        begin = int(offsets[i]) * item
        read_exactly(fd, view[begin : begin + int(sizes[i]) * item], int(first[i]) * item)
    return -1, 0


@njit(_read_ranges_interpreted, cache=True, nogil=True)
def _read_ranges(
    fd: int, out: np.ndarray, offsets: np.ndarray, first: np.ndarray, sizes: np.ndarray, item: int, at: int
) -> tuple[int, int]:
    """Ranges from `at` read into out; returns (-1, 0) when all are, else the range it
    stopped in and the bytes of it read."""
    base = out.ctypes.data
    for i in range(at, first.shape[0]):
        want = sizes[i] * item
        done = 0
        while done < want:
            n = _pread(fd, base + offsets[i] * item + done, want - done, first[i] * item + done)
            if n <= 0:
                return i, done
            done += n
    return -1, 0


def read_exactly(fd: int, buffer: memoryview, position: int) -> None:
    """`buffer` filled from file `fd` at `position`; PackcliError if the file ends first."""
    while len(buffer):
        n = os.preadv(fd, [buffer], position)
        if n <= 0:
            raise PackcliError("the token spill ended early; remove it and run again")
        buffer, position = buffer[n:], position + n
