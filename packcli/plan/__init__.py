"""Where every segment goes: lengths in, rows out. The planner, its settings, the Numba
packers (kernels/), --group-by ids, user strategies, and the row layout kernel.

May import: core.
"""
