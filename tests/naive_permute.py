"""The shuffled row order, one row at a time with Python integers: the reference
packcli/plan/permute.py's vectorised bijection must match exactly.

A balanced Feistel network on 2b bits (the fewest with 4^b >= rows, b >= 1), six rounds
(L, R) -> (R, L xor F_i(R)), F_i(R) = splitmix64's finaliser of R xor key_i, cut to b bits;
values outside [0, rows) go through the network again (cycle walking).
"""

from __future__ import annotations

MASK = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15


def mix(z: int) -> int:
    z &= MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def keys(seed: int, window: int) -> list[int]:
    base = mix(mix(seed & MASK) ^ (window & MASK))
    return [mix(base + (i + 1) * GOLDEN) for i in range(6)]


def half_bits(rows: int) -> int:
    b = 1
    while 4**b < rows:
        b += 1
    return b


def network(x: int, b: int, round_keys: list[int]) -> int:
    left, right = x >> b, x & ((1 << b) - 1)
    for key in round_keys:
        left, right = right, left ^ (mix(right ^ key) & ((1 << b) - 1))
    return (left << b) | right


def output_row(plan_row: int, rows: int, seed: int, window: int = 0) -> int:
    """Where plan row `plan_row` of `rows` goes."""
    assert 0 <= plan_row < rows
    if rows == 1:
        return 0
    b, round_keys = half_bits(rows), keys(seed, window)
    y = network(plan_row, b, round_keys)
    while y >= rows:
        y = network(y, b, round_keys)
    return y
