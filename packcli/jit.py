"""numba's `njit` for packcli's kernels, with a cheaper first load from numba's disk cache.

Before loading any cached kernel numba refreshes its CPU target: it imports every typing
and lowering module it has (numba.cpython, numba.np, cffi, ...) and rebuilds its
registries, 0.3-0.5 s of CPU once per process, and a five-document `pack` pays it in
full. Loading compiled code needs none of that, only numba's runtime (NRT), whose
symbols the compiled code calls. Compiling (a cache miss, a new signature) refreshes the
target itself, so kernels that are compiled rather than loaded get everything as before.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from numba import njit as _numba_njit
from numba.core.caching import FunctionCache
from numba.core.runtime import rtsys


class _RuntimeOnlyCache(FunctionCache):
    """numba's per-function disk cache, loading with the runtime initialised instead of a full refresh."""

    def load_overload(self, sig: Any, target_context: Any) -> Any:
        rtsys.initialize(target_context)
        with self._guard_against_spurious_io_errors():
            return self._load_overload(sig, target_context)


def njit(**options: Any) -> Callable[[Callable[..., Any]], Any]:
    """`numba.njit(**options)`; with cache=True the dispatcher loads through _RuntimeOnlyCache."""

    def decorate(function: Callable[..., Any]) -> Any:
        dispatcher = _numba_njit(**options)(function)
        cache = getattr(dispatcher, "_cache", None)
        if type(cache) is FunctionCache and hasattr(cache, "_load_overload"):
            cache.__class__ = _RuntimeOnlyCache
        return dispatcher

    return decorate
