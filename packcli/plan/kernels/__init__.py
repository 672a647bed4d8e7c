"""The Numba bin packers: private kernels over plain arrays, and `pack.py`, the public
wrapper that validates and dispatches to them.

May import: core, and each other (`pack` over the rest).
"""
