"""What the entries share: finding an API in a program's packcli, and printing figures.

An entry is a script run by a program's own interpreter (`<venv>/bin/python ENTRY ...`),
so the code is the working tree's and the packcli it imports is the program's. A name
that moved between versions is looked up in each module it has lived in; when none has
it, the entry prints `{"n/a": REASON}` and exits with status 3, which the runner reports
as "n/a" on one line. Standard library and NumPy only, besides packcli.
"""

from __future__ import annotations

import importlib
import json
import math
import sys
import time
from typing import Any

NOT_APPLICABLE = 3
KERNELS = ("packcli.plan.kernels.pack", "packcli.kernels")  # the packing kernels' modules, newest first


def not_applicable(reason: str) -> None:
    print(json.dumps({"n/a": reason}))
    sys.exit(NOT_APPLICABLE)


def find(name: str, *modules: str) -> Any:
    """`name` from the first of `modules` that has it (newest layout first)."""
    for module in modules:
        try:
            return getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError):
            continue
    not_applicable(f"no {name} in {' or '.join(modules)}")


def emit(figures: dict[str, Any]) -> None:
    print(json.dumps(figures))


def best_cpu(function, rounds: int) -> tuple[float, Any]:
    """The least CPU time of `rounds` calls (the kernels are single-threaded: CPU time is
    what another process on a shared core does not inflate), and the last result."""
    best, result = math.inf, None
    for _ in range(rounds):
        result = None  # freed before the call, as a caller's variable is reassigned
        started = time.process_time()
        result = function()
        best = min(best, time.process_time() - started)
    return max(best, 1e-9), result


def best_wall(function, rounds: int) -> tuple[float, Any]:
    best, result = math.inf, None
    for _ in range(rounds):
        result = None
        started = time.perf_counter()
        result = function()
        best = min(best, time.perf_counter() - started)
    return best, result


def length_set_options(parser) -> None:
    """The options that name a seeded set of `lengths` (--set, --n, --capacity, --seed), with
    the same defaults in every entry that draws one, so the same flags give the same set."""
    parser.add_argument("--set", default="lognormal")
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--capacity", type=int, default=2048)
    parser.add_argument("--seed", type=int, default=2024)


def lengths(kind: str, n: int, capacity: int, seed: int):
    """A seeded set of sequence lengths in [1, capacity]: `lognormal` (mean about 300,
    heavy-tailed like documents), `uniform`, or `bimodal` (40% around 0.7 capacity, most
    too long to share a row, 60% around 0.1 capacity)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    if kind == "lognormal":
        values = rng.lognormal(np.log(300) - 0.5, 1.0, n)
    elif kind == "uniform":
        values = rng.integers(1, capacity + 1, n).astype(np.float64)
    elif kind == "bimodal":
        long = rng.normal(0.7 * capacity, 0.1 * capacity, int(n * 0.4))
        short = rng.normal(0.1 * capacity, 0.05 * capacity, n - len(long))
        values = np.concatenate([long, short])
        rng.shuffle(values)
    else:
        raise SystemExit(f"unknown set {kind}")
    return np.clip(np.round(values), 1, capacity).astype(np.int64)
