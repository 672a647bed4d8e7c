"""Arrow arrays over NumPy memory, without `pyarrow.array`: its first call imports pandas
when pandas is installed (tens of MB and tenths of a CPU second for a run that never uses
it). The readers, the shard writer and the datasets loader build their arrays here."""

from __future__ import annotations

from typing import Any

import numpy as np


def arrow_array(values: np.ndarray, dtype: Any = None) -> Any:
    """A flat Arrow array over the same memory as `values` (converted to `dtype` first
    when given and different: int32 offsets and columns, float32 weights)."""
    import pyarrow as pa

    values = np.ascontiguousarray(values, dtype=dtype)
    return pa.Array.from_buffers(pa.from_numpy_dtype(values.dtype), len(values), [None, pa.py_buffer(values)])


def int32_array(values: np.ndarray) -> Any:
    """An Arrow int32 array over `values` (as arrow_array): offsets, ids, counts."""
    return arrow_array(values, np.int32)
