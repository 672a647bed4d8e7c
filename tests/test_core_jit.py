"""Kernels loaded from numba's disk cache without numba's full target refresh, and their
interpreted twins for small work."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from numba.core.caching import FunctionCache

from packcli.core import jit
from packcli.core.jit import njit, runtime_only_cache
from packcli.inspect.verify import verify_dir
from tests import (
    test_plan_buckets,
    test_plan_kernels_improve,
    test_plan_kernels_pack,
    test_plan_patterns,
    test_plan_rows,
    test_write_ranges,
)
from tests.naive import REFERENCES

ROOT = Path(__file__).resolve().parents[1]

# Run in a fresh process: compiled (SMALL_WORK -1), twice, so that the second loads from the
# cache, or as a small run is (the twins). The packers are checked against tests/naive.py;
# then a function compiled in the same process (numba's ordinary path, which refreshes the
# target itself) still works.
SCRIPT = """
import json, sys
from importlib.metadata import entry_points
import numpy as np
from packcli.core import jit
jit.SMALL_WORK = int(sys.argv[1])
if sys.argv[2:] == ["own"]:
    jit.own_process()
from packcli.plan.kernels.pack import pack_lengths
from packcli.plan.kernels.fit import _bfd_kernel, _ff_kernel, _nf_kernel

lengths = [5, 9, 3, 7, 7, 2, 10, 1, 4, 6]
placed = {a: pack_lengths(lengths, 12, a) for a in ("nf", "ff", "bfd")}
numba = "numba" in sys.modules
registries = "numba.misc.cffiimpl" in sys.modules  # only numba's target refresh imports it
arrays = "numba.np.arrayobj" in sys.modules  # what loading a kernel imports
hits = sum(sum(k.stats.cache_hits.values()) for k in (_bfd_kernel, _ff_kernel, _nf_kernel)) if numba else 0
# what the packcli modules' names are now: lazy until the first compiled use, numba's after
lazy = [isinstance(sys.modules["packcli.plan.kernels.fit"]._bfd_kernel, jit.LazyKernel),
        isinstance(sys.modules["packcli.plan.kernels.bitset"].trailing_zeros, jit.NumbaName)]
from numba import njit


@njit
def fresh(values):
    return np.sort(values)[::-1].sum() + np.sqrt((values * values).sum())


extensions = {ep.module.split(".")[0] for ep in entry_points(group="numba_extensions")}
print(json.dumps({
    "placed": {a: [p.row.tolist(), p.offset.tolist(), p.n_rows] for a, p in placed.items()},
    "registries": registries, "hits": hits, "fresh": float(fresh(np.array([3, 4]))),
    "arrays": arrays, "numba": numba, "lazy": lazy,
    "extensions": sorted(extensions), "imported": sorted(extensions & set(sys.modules)),
}))
"""


def _run(small_work: int, *extra: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("NUMBA_DISABLE_JIT", None)
    command = [sys.executable, "-c", SCRIPT, str(small_work), *extra]
    result = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    return json.loads(result.stdout.splitlines()[-1])


@pytest.mark.compiled  # numba's dispatchers exist only with the JIT on
def test_njit_with_cache_loads_through_the_runtime_only_cache():
    def double(x):
        return 2 * x

    cached, uncached = njit(cache=True)(double), njit()(double)
    assert type(cached._cache) is runtime_only_cache()
    assert type(uncached._cache) is not runtime_only_cache()
    assert not isinstance(uncached._cache, FunctionCache)
    assert cached(21) == uncached(21) == 42


def _assert_references(placed: dict) -> None:
    lengths = [5, 9, 3, 7, 7, 2, 10, 1, 4, 6]
    for algorithm, (row, offset, n_rows) in placed.items():
        expected_row, expected_offset, expected_rows = REFERENCES[algorithm](lengths, 12)
        assert (row, offset, n_rows) == (list(expected_row), list(expected_offset), expected_rows)


def test_kernels_loaded_from_the_cache_skip_the_refresh_and_agree_with_the_references():
    _run(-1)
    loaded = _run(-1)
    assert loaded["hits"] == 3
    assert loaded["lazy"] == [False, False]  # every module's names rebound to numba's objects
    assert loaded["registries"] is False
    _assert_references(loaded["placed"])
    assert loaded["fresh"] == 12.0


def test_the_cli_process_loads_no_numba_extension_and_a_library_caller_keeps_them():
    library = _run(-1)
    assert library["extensions"]  # installed here (awkward's, through gigatoken): what is skipped
    assert library["imported"] == library["extensions"]  # numba loaded them before the first kernel
    own = _run(-1, "own")
    assert own["hits"] == 3 and own["imported"] == []
    _assert_references(own["placed"])
    assert own["fresh"] == 12.0  # a function numba compiles in the same process still works


def test_the_cli_main_runs_compiled_kernels_without_numba_extensions(tmp_path):
    corpus = tmp_path / "ids.jsonl"
    corpus.write_text("".join(json.dumps({"ids": [5 + i % 7] * (3 + i % 5)}) + "\n" for i in range(20_000)))
    script = (
        "import atexit, json, sys\n"
        "from importlib.metadata import entry_points\n"
        "from packcli.core import jit\n"
        "names = {ep.module.split('.')[0] for ep in entry_points(group='numba_extensions')}\n"
        "atexit.register(lambda: print(json.dumps([jit._compiled, sorted(names & set(sys.modules))])))\n"
        "sys.argv = ['packcli'] + sys.argv[1:]\n"
        "from packcli.cli.app import main\n"
        "main()\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("NUMBA_DISABLE_JIT", None)
    command = [sys.executable, "-c", script, "pack", str(corpus), "--ids-field", "ids", "--eos-token", "2"]
    command += ["--pad-id", "0", "--seq-len", "64", "-o", str(tmp_path / "out"), "--json"]
    result = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    assert json.loads(result.stdout.splitlines()[-1]) == [True, []]  # kernels ran compiled, no extension
    verify_dir(tmp_path / "out")


def test_a_small_run_loads_no_kernel_and_does_not_import_numba():
    small = _run(1 << 20)  # SMALL_WORK is -1 in this process (conftest)
    assert small["numba"] is False  # not even imported
    assert small["lazy"] == [True, True]
    assert small["hits"] == 0
    assert small["arrays"] is False
    _assert_references(small["placed"])
    assert small["fresh"] == 12.0


@pytest.fixture
def interpreted(monkeypatch):
    """Every kernel a wrapper picks runs as its twin."""
    monkeypatch.setattr(jit, "SMALL_WORK", 1 << 62)
    monkeypatch.setattr(jit, "_compiled", False)
    yield
    assert jit._compiled is False


@pytest.mark.parametrize(
    "check",
    [
        test_plan_kernels_pack.test_matches_reference_property,
        test_plan_kernels_pack.test_contract_property,
        test_plan_kernels_pack.test_no_two_rows_could_be_merged,
        test_plan_kernels_pack.test_bfd_rows_from_counts_equal_the_reference,
        test_plan_kernels_improve.test_hypothesis_matches_reference,
        test_plan_kernels_improve.test_any_budget_gives_a_valid_deterministic_placement,
        test_plan_rows.test_build_rows_matches_reference,
        test_plan_rows.test_pieces_in_any_order_give_the_same_rows,
        test_plan_rows.test_cut_pieces_matches_reference,
        test_plan_patterns.test_rows_expand_into_their_slots_as_the_naive_loop,
        test_plan_buckets.test_bucket_parts_place_every_rank_as_the_naive_walk,
        test_write_ranges.test_consecutive_pieces_are_one_read,
    ],
    ids=lambda check: f"{check.__module__.split('.')[-1]}.{check.__name__}",
)
def test_the_twins_pass_the_reference_checks(interpreted, check):
    check()


@pytest.mark.compiled  # numba's dispatchers exist only with the JIT on
def test_twins_call_the_twins_of_the_kernels_they_call():
    from packcli.plan.kernels.bitset import _lowest_bit, _lowest_bit_python
    from packcli.plan.kernels.fit import _bfd_kernel

    twin = jit.twin(_bfd_kernel)
    assert twin is not _bfd_kernel.py_func
    assert twin.__code__ is _bfd_kernel.py_func.__code__
    assert jit.twin(_lowest_bit) is _lowest_bit_python
    callees = [value for value in twin.__globals__.values() if id(value) in jit._kernels]
    assert callees == []  # no compiled kernel left in the twin's namespace


def test_use_compiled_hands_out_compiled_kernels_for_any_work(monkeypatch):
    from packcli.plan import rows

    monkeypatch.setattr(jit, "SMALL_WORK", 1 << 62)
    monkeypatch.setattr(jit, "_compiled", False)
    assert jit.kernel(rows._cut_pieces, 1) is jit.twin(rows._cut_pieces)
    jit.use_compiled()
    assert jit.kernel(rows._cut_pieces, 1) is jit.compiled(rows._cut_pieces)
