"""The shuffled row order: a seeded bijection on [0, rows), evaluated per row.

Plan row r of a window goes to output row `forward(r)`; output row j comes from plan row
`inverse(j)`. Nothing is stored per row: both are pure integer functions of (row, rows,
seed, window), so every engine, worker count and `--resume` computes the same order, and
whoever writes rows [a, b) needs only those.

The bijection is a balanced Feistel network on 2b bits (4^b >= rows, b >= 1) with ROUNDS
rounds, `(L, R) -> (R, L xor F_i(R))`, where F_i is splitmix64's finaliser applied to R
xor the i-th round key, cut to b bits; the round keys come from (seed, window) by the same
mix. Values the network sends to [rows, 4^b) are sent through it again (cycle walking),
which restricts a permutation of [0, 4^b) to one of [0, rows); since 4^b < 4 * rows
(for rows >= 2), fewer than 4 passes are needed on average. The inverse runs the rounds
backwards, with the same walk. `tests/naive_permute.py` evaluates it one row at a time with
Python integers.
"""

from __future__ import annotations

import numpy as np

from packcli.core.errors import PackcliError

ROUNDS = 6
MASK64 = (1 << 64) - 1
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_GOLDEN = 0x9E3779B97F4A7C15  # splitmix64's increment: round i's key mixes seed + (i+1) * it


def _mix(z: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser on uint64 arrays (wrapping multiplication)."""
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    mixed: np.ndarray = z ^ (z >> np.uint64(31))
    return mixed


def _mix_int(value: int) -> int:
    """_mix of one Python integer (for the keys)."""
    return int(_mix(np.array([value & MASK64], dtype=np.uint64))[0])


def half_bits(rows: int) -> int:
    """b: the network works on 2b bits, the fewest with 4^b >= rows (at least 1)."""
    return max(1, ((max(rows, 2) - 1).bit_length() + 1) // 2)


def round_keys(seed: int, window: int) -> list[int]:
    """The ROUNDS keys of a window's network: any integer seed and window."""
    base = _mix_int(_mix_int(seed & MASK64) ^ (window & MASK64))
    return [_mix_int(base + (i + 1) * _GOLDEN) for i in range(ROUNDS)]


class RowPermutation:
    """The bijection of one window's `rows` rows (see the module docstring)."""

    def __init__(self, rows: int, seed: int, window: int = 0):
        if rows < 0:
            raise PackcliError(f"rows must be >= 0, got {rows}")
        self.rows = rows
        self.bits = half_bits(rows)
        self._keys = [np.uint64(k) for k in round_keys(seed, window)]

    def _f(self, half: np.ndarray, i: int) -> np.ndarray:
        return _mix(half ^ self._keys[i]) & np.uint64((1 << self.bits) - 1)

    def _encrypt(self, x: np.ndarray) -> np.ndarray:
        b, mask = np.uint64(self.bits), np.uint64((1 << self.bits) - 1)
        left, right = x >> b, x & mask
        for i in range(ROUNDS):
            left, right = right, left ^ self._f(right, i)
        out: np.ndarray = (left << b) | right
        return out

    def _decrypt(self, y: np.ndarray) -> np.ndarray:
        b, mask = np.uint64(self.bits), np.uint64((1 << self.bits) - 1)
        left, right = y >> b, y & mask
        for i in reversed(range(ROUNDS)):
            left, right = right ^ self._f(left, i), left
        out: np.ndarray = (left << b) | right
        return out

    def _walk(self, values, step) -> np.ndarray:
        x = np.asarray(values, dtype=np.int64)
        if x.size and (x.min() < 0 or x.max() >= self.rows):
            raise PackcliError(f"rows must be in [0, {self.rows})")
        if self.rows <= 1:
            return x.copy()
        y = step(x.astype(np.uint64))
        outside = np.flatnonzero(y >= np.uint64(self.rows))
        while outside.size:
            y[outside] = step(y[outside])
            outside = outside[y[outside] >= np.uint64(self.rows)]
        return y.astype(np.int64)

    def forward(self, plan_rows) -> np.ndarray:
        """The output row of each plan row (int64)."""
        return self._walk(plan_rows, self._encrypt)

    def inverse(self, output_rows) -> np.ndarray:
        """The plan row each output row comes from (int64)."""
        return self._walk(output_rows, self._decrypt)

    def table(self) -> np.ndarray:
        """forward() of every row: for a caller that permutes arrays with one row per entry."""
        return self.forward(np.arange(self.rows, dtype=np.int64))
