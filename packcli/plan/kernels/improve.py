"""Row repair after a packer: refill the rows with room, each one exactly where it can.

``_improve_kernel(lengths, capacity, row, offset, n_rows, budget) -> n_rows`` rewrites
``row`` and ``offset`` in place and trusts its input (``packcli.plan.kernels.pack.improve_rows``
validates). The rules below are the specification; ``tests/naive_improve.py`` follows
them with Python lists and sets and the tests require identical output (with no budget
limit).

A packer such as bfd leaves a few tokens of room in many rows; together they can hold
whole rows. The pass takes the sequences of a *pool* of rows out and packs them again,
one row at a time, each row filled exactly when a subset of the pool allows it, so that
the room gathers in the last rows built. Rounds, while there are more rows than the
bound: ceil(tokens / capacity) or the number of sequences longer than half a row (no
two of those share a row), whichever is more:

1. The pool: every row with room, plus the ``extra`` full rows with the most sequences
   (ties: the lowest row); ``extra`` is 0 in the first round and ``2 * extra + 16`` in
   each next one. Full rows of short sequences give the refill lengths to combine.
2. Refill: while the pool holds sequences, a row is built from its longest sequence
   (ties: the lowest index) and the subset of the others found by a subset-sum over
   the room left, R: lengths longest first, the c sequences of a length in chunks of 1,
   2, 4, ... copies (the last chunk what is left), each chunk of k copies of L adding
   k * L to every sum reached before it; a sum's first chunk is kept. It stops as soon
   as R is reached; otherwise the highest sum reached is taken. The row gets its chunks
   by walking back from that sum, each chunk the lowest-indexed sequences of its length
   left in the pool.
3. If the pool was rebuilt in fewer rows than it had, the rows built take the pool's
   rows in order (the lowest first) and the pool rows left over are removed; otherwise
   nothing changes. A pool whose own bound (as above) is not below its row count is not
   refilled. A round whose pool held every row is the last.

If no row was removed, the packer's rows are returned unchanged. Otherwise the rows left
are renumbered in order (no gaps); a row whose sequences did not change keeps its
layout, a changed row is laid out in input order from offset 0.

``budget`` bounds the work (sequences and rows scanned per round, bitset words shifted,
lengths looked at, sequences taken): when it runs
out the round under way is dropped and the pass stops, so the result depends on the
budget but is always valid and deterministic.
"""

from __future__ import annotations

import numpy as np

from packcli.core.jit import njit
from packcli.plan.kernels.bitset import _highest_bit, _lowest_bit

_WORD = 32  # bits per bitset word, held in int64 so that NUMBA_DISABLE_JIT runs the same code
_MASK = 0xFFFFFFFF


@njit(cache=True)
def _pool_rows(fill, count, gone, capacity, extra):
    """Step 1: every live row with room, then the `extra` full rows with the most
    sequences (found by counting, not sorting); returned in row order."""
    n_rows = fill.shape[0]
    chosen = np.zeros(n_rows, dtype=np.bool_)
    rows_with = np.zeros(count.max() + 2, dtype=np.int64)  # full rows with each count
    for r in range(n_rows):
        if gone[r]:
            continue
        if fill[r] < capacity:
            chosen[r] = True
        else:
            rows_with[count[r]] += 1
    # every full row with `least` sequences or more, and the lowest `wanted` with least - 1
    least, wanted = rows_with.shape[0] - 1, extra
    while least > 0 and wanted > rows_with[least - 1]:
        wanted -= rows_with[least - 1]
        least -= 1
    for r in range(n_rows):
        if not gone[r] and fill[r] == capacity:
            if count[r] >= least:
                chosen[r] = True
            elif count[r] == least - 1 and wanted > 0:
                chosen[r] = True
                wanted -= 1
    return np.flatnonzero(chosen)


@njit(cache=True)
def _shift_or(reach, n_words, top_mask, shift, chunk_length, chunk_copies, first_length, first_copies):
    """reach |= reach << shift over the words [0, n_words); each sum reached for the first
    time records the chunk. Returns the words looked at."""
    word_shift, bit_shift = shift // _WORD, shift % _WORD
    for w in range(n_words - 1, word_shift - 1, -1):  # high words first: sources are still old
        source = w - word_shift
        moved = (reach[source] << bit_shift) & _MASK
        if bit_shift > 0 and source > 0:
            moved |= reach[source - 1] >> (_WORD - bit_shift)
        if w == n_words - 1:
            moved &= top_mask
        fresh = moved & ~reach[w]
        reach[w] |= fresh
        while fresh != 0:
            bit = _lowest_bit(fresh)
            fresh &= fresh - 1
            total = w * _WORD + bit
            first_length[total] = chunk_length
            first_copies[total] = chunk_copies
    return n_words - word_shift


@njit(cache=True)
def _subset_sum(room, lengths_down, taken, end, reach, first_length, first_copies):
    """Step 2's subset-sum over the pool's lengths (longest first, binary chunks) up to
    `room`. Returns (the sum chosen, the words looked at)."""
    n_words = room // _WORD + 1
    top_mask = (2 << (room % _WORD)) - 1
    reach[:n_words] = 0
    reach[0] = 1
    target_word, target_bit = room // _WORD, room % _WORD
    low, high = 0, lengths_down.shape[0]  # the first length <= room (they go down)
    while low < high:
        middle = (low + high) // 2
        if lengths_down[middle] > room:
            low = middle + 1
        else:
            high = middle
    work = 0
    for k in range(low, lengths_down.shape[0]):
        if (reach[target_word] >> target_bit) & 1:
            return room, work
        length = lengths_down[k]
        left = end[length] - taken[length]
        work += 1
        if left == 0:
            continue
        copies = 1
        while left > 0 and length * min(copies, left) <= room:
            step = min(copies, left)
            work += _shift_or(reach, n_words, top_mask, length * step, length, step, first_length, first_copies)
            left -= step
            copies *= 2
            if (reach[target_word] >> target_bit) & 1:
                return room, work
    for w in range(n_words - 1, -1, -1):
        if reach[w] != 0:
            return w * _WORD + _highest_bit(reach[w]), work
    return 0, work


@njit(cache=True)
def _pool_by_length(lengths, row, in_pool, capacity):
    """The pool's sequences longest first (ties: lowest index; a counting sort), where
    each length starts and ends in that order, and the pool's lengths longest first."""
    end = np.zeros(capacity + 1, dtype=np.int32)  # int32 throughout: capacity-sized arrays
    for i in range(lengths.shape[0]):
        if in_pool[row[i]]:
            end[lengths[i]] += 1
    start = np.zeros(capacity + 1, dtype=np.int32)
    lengths_down = np.empty(capacity, dtype=np.int64)
    size, n_lengths = 0, 0
    for length in range(capacity, 0, -1):
        start[length] = size
        if end[length] > 0:
            lengths_down[n_lengths] = length
            n_lengths += 1
        size += end[length]
        end[length] = start[length]
    order = np.empty(size, dtype=np.int64)
    for i in range(lengths.shape[0]):
        if in_pool[row[i]]:
            order[end[lengths[i]]] = i
            end[lengths[i]] += 1
    return order, start, end, lengths_down[:n_lengths]


@njit(cache=True)
def _refill(lengths, capacity, order, start, end, lengths_down, built, budget):
    """Step 2: `built[k]` = the row (0, 1, ...) the k-th pooled sequence goes to.
    Returns (rows built, work); work > budget means the refill was cut short."""
    taken = start.copy()  # the next sequence of each length still in the pool
    reach = np.zeros(capacity // _WORD + 1, dtype=np.int64)
    first_length = np.zeros(capacity + 1, dtype=np.int32)
    first_copies = np.zeros(capacity + 1, dtype=np.int32)
    n_built, work, longest = 0, 0, 0
    while True:
        while longest < lengths_down.shape[0] and taken[lengths_down[longest]] == end[lengths_down[longest]]:
            longest += 1
        if longest == lengths_down.shape[0] or work > budget:
            return n_built, work
        seed = lengths_down[longest]
        built[taken[seed]] = n_built
        taken[seed] += 1
        total, seen = _subset_sum(
            capacity - seed, lengths_down[longest:], taken, end, reach, first_length, first_copies
        )
        work += seen + 1
        while total > 0:
            length, copies = int(first_length[total]), int(first_copies[total])
            for _ in range(copies):
                built[taken[length]] = n_built
                taken[length] += 1
            work += copies
            total -= length * copies
        n_built += 1


@njit(cache=True)
def _fewest_rows(lengths, chosen, capacity):
    """A lower bound on the rows the sequences `chosen` need: ceil(tokens / capacity), or
    the number longer than half a row (no two of those share one), whichever is more."""
    total, long = 0, 0
    for k in range(chosen.shape[0]):
        total += lengths[chosen[k]]
        long += 2 * lengths[chosen[k]] > capacity
    return max((total + capacity - 1) // capacity, long)


@njit(cache=True)
def _round(lengths, capacity, row, gone, extra, work, budget):
    """Steps 1-3 once. Returns (rows removed, pool rows, work)."""
    n_rows = gone.shape[0]
    fill = np.zeros(n_rows, dtype=np.int64)
    count = np.zeros(n_rows, dtype=np.int64)
    for i in range(lengths.shape[0]):
        fill[row[i]] += lengths[i]
        count[row[i]] += 1
    pool = _pool_rows(fill, count, gone, capacity, extra)
    in_pool = np.zeros(n_rows, dtype=np.bool_)
    in_pool[pool] = True
    work += lengths.shape[0] + n_rows + capacity
    order, start, end, lengths_down = _pool_by_length(lengths, row, in_pool, capacity)
    if _fewest_rows(lengths, order, capacity) >= pool.shape[0]:
        return 0, pool.shape[0], work
    built = np.empty(order.shape[0], dtype=np.int64)
    n_built, seen = _refill(lengths, capacity, order, start, end, lengths_down, built, budget - work)
    work += seen
    if work > budget or n_built >= pool.shape[0]:
        return 0, pool.shape[0], work
    for k in range(order.shape[0]):
        row[order[k]] = pool[built[k]]
    for k in range(n_built, pool.shape[0]):
        gone[pool[k]] = True
    return pool.shape[0] - n_built, pool.shape[0], work


@njit(cache=True)
def _relayout(lengths, row, offset, before, gone, n_rows):
    """Rows renumbered without the removed ones; changed rows laid out in input order."""
    changed = np.zeros(n_rows, dtype=np.bool_)
    for i in range(lengths.shape[0]):
        if row[i] != before[i]:
            changed[row[i]] = True
            changed[before[i]] = True
    new_id = np.empty(n_rows, dtype=np.int64)
    removed = 0
    for r in range(n_rows):
        new_id[r] = r - removed
        if gone[r]:
            removed += 1
    cursor = np.zeros(n_rows, dtype=np.int64)
    for i in range(lengths.shape[0]):
        r = row[i]
        if changed[r]:
            offset[i] = cursor[r]
            cursor[r] += lengths[i]
        row[i] = new_id[r]
    return n_rows - removed


@njit(cache=True)
def _improve_kernel(lengths, capacity, row, offset, n_rows, budget):
    bound = _fewest_rows(lengths, np.arange(lengths.shape[0]), capacity)
    if n_rows <= bound:
        return n_rows
    before = row.copy()
    gone = np.zeros(n_rows, dtype=np.bool_)
    rows_left, extra, work = n_rows, 0, 0
    while rows_left > bound and work <= budget:
        removed, pool_size, work = _round(lengths, capacity, row, gone, extra, work, budget)
        rows_left -= removed
        if pool_size >= rows_left + removed:  # the pool held every row
            break
        extra = 2 * extra + 16
    if rows_left == n_rows:
        return n_rows
    return _relayout(lengths, row, offset, before, gone, n_rows)
