"""Arrow arrays over NumPy memory (core/arrow.py)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from packcli.core.arrow import arrow_array, int32_array


def test_an_array_of_its_own_dtype_shares_its_memory():
    values = np.arange(5, dtype=np.int64)
    array = arrow_array(values)
    assert array.type == pa.int64() and array.to_pylist() == [0, 1, 2, 3, 4]
    assert array.buffers()[1].address == values.ctypes.data  # no copy


def test_a_dtype_given_converts_first():
    assert int32_array(np.array([1, 2, 3], dtype=np.int64)).type == pa.int32()
    weights = arrow_array(np.array([0.5, 2.0]), np.float32)
    assert weights.type == pa.float32() and weights.to_pylist() == [0.5, 2.0]


def test_a_strided_view_is_laid_out_contiguously():
    values = np.arange(10, dtype=np.int32)[::2]
    assert int32_array(values).to_pylist() == [0, 2, 4, 6, 8]
