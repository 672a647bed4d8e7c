"""The repair pass on a plan from counts (packcli/plan/repair.py): it saves the rows the
pass saves on the whole placement."""

from __future__ import annotations

import numpy as np

from packcli.plan.kernels.pack import pack_lengths, plan_lengths
from packcli.plan.patterns import pattern_plan


def test_the_repair_runs_on_patterns_and_saves_rows():
    """Uniform lengths at 2048: the repair pass saves rows, here from the pooled rows
    expanded out of the patterns, exactly as many as on the whole placement."""
    rng = np.random.default_rng(3)
    lengths = rng.integers(1, 2049, 5_000)
    unrepaired = pack_lengths(lengths, 2048, "spfhp").n_rows
    repaired = plan_lengths(lengths, 2048, "spfhp").n_rows
    assert repaired < unrepaired
    assert pattern_plan(lengths, 2048, "spfhp").n_rows == repaired
