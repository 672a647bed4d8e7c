"""What a plan depends on, and nothing else: the options that change where segments go.

Kept apart from the planner so that options are turned into settings without loading
numpy or numba (a pack refused for bad usage stops before either loads)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from packcli.core.options import PackOptions
    from packcli.plan.strategy import Strategy


@dataclass(frozen=True)
class PlanSettings:
    seq_len: int
    mode: str = "bin"
    algorithm: str | Strategy = "bfd"  # a built-in name, module:function, or a callable (the Python API)
    remainder: str = "pad"
    buffer_size: int | None = None  # --buffer-size: segments per window; None plans them all at once
    shuffle: bool = False
    seed: int = 0
    max_per_row: int | None = None  # --max-sequences-per-row (bin mode)
    multiple: int = 1  # --pad-to-multiple-of (bin mode): each length takes its rounded-up room


def plan_settings(opts: PackOptions) -> PlanSettings:
    """The settings of `pack`'s options."""
    return PlanSettings(
        seq_len=opts.seq_len,
        mode=opts.mode,
        algorithm=opts.algorithm,
        remainder=opts.remainder,
        buffer_size=opts.buffer_size,
        shuffle=opts.shuffle,
        seed=opts.seed,
        max_per_row=opts.max_sequences_per_row,
        multiple=opts.pad_multiple,
    )
