"""Kernels loaded from numba's disk cache without numba's full target refresh."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from numba.core.caching import FunctionCache

from packcli.jit import _RuntimeOnlyCache, njit
from tests.naive import REFERENCES

ROOT = Path(__file__).resolve().parents[1]

# Run in a fresh process twice: the first may compile, the second loads from the cache.
# The packers are checked against tests/naive.py; then a function compiled in the same
# process (numba's ordinary path, which refreshes the target itself) still works.
SCRIPT = """
import json, sys
import numpy as np
from numba import njit
from packcli.kernels import pack_lengths
from packcli.kernels_fit import _bfd_kernel, _ff_kernel, _nf_kernel

lengths = [5, 9, 3, 7, 7, 2, 10, 1, 4, 6]
placed = {a: pack_lengths(lengths, 12, a) for a in ("nf", "ff", "bfd")}
registries = "numba.misc.cffiimpl" in sys.modules  # only numba's target refresh imports it
hits = sum(sum(k.stats.cache_hits.values()) for k in (_bfd_kernel, _ff_kernel, _nf_kernel))


@njit
def fresh(values):
    return np.sort(values)[::-1].sum() + np.sqrt((values * values).sum())


print(json.dumps({
    "placed": {a: [p.row.tolist(), p.offset.tolist(), p.n_rows] for a, p in placed.items()},
    "registries": registries, "hits": hits, "fresh": float(fresh(np.array([3, 4])))
}))
"""


def _run() -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("NUMBA_DISABLE_JIT", None)
    result = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, check=True)
    return json.loads(result.stdout.splitlines()[-1])


def test_njit_with_cache_loads_through_the_runtime_only_cache():
    def double(x):
        return 2 * x

    cached, uncached = njit(cache=True)(double), njit()(double)
    assert type(cached._cache) is _RuntimeOnlyCache
    assert type(uncached._cache) is not _RuntimeOnlyCache
    assert not isinstance(uncached._cache, FunctionCache)
    assert cached(21) == uncached(21) == 42


def test_kernels_loaded_from_the_cache_skip_the_refresh_and_agree_with_the_references():
    _run()
    loaded = _run()
    assert loaded["hits"] == 3
    assert loaded["registries"] is False
    lengths = [5, 9, 3, 7, 7, 2, 10, 1, 4, 6]
    for algorithm, (row, offset, n_rows) in loaded["placed"].items():
        expected_row, expected_offset, expected_rows = REFERENCES[algorithm](lengths, 12)
        assert (row, offset, n_rows) == (list(expected_row), list(expected_offset), expected_rows)
    assert loaded["fresh"] == 12.0
