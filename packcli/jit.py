"""numba's `njit` for packcli's kernels, with a cheaper first load from numba's disk cache.

Before loading any cached kernel numba refreshes its CPU target: it imports every typing
and lowering module it has (numba.cpython, numba.np, cffi, ...) and rebuilds its
registries, 0.25-0.5 s of CPU once per process, and a five-document `pack` pays it in
full. Loading compiled code needs none of that, only numba's runtime (NRT), whose
symbols the compiled code calls. Compiling (a cache miss, a new signature) refreshes the
target itself, so kernels that are compiled rather than loaded get everything as before.

For small work even the load costs more than the work: `kernel(dispatcher, work)` hands a
wrapper the kernel's interpreted twin (its Python function, with the kernels it calls
swapped for their twins, as under NUMBA_DISABLE_JIT) while no kernel has run compiled in
the process and the work is at most SMALL_WORK; the compiled kernel otherwise. Both give
the same results (the suite also runs with NUMBA_DISABLE_JIT=1).
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

from numba import njit as _numba_njit
from numba.core.caching import FunctionCache
from numba.core.runtime import rtsys

# Loop iterations (about) up to which a kernel runs interpreted in a process that has run
# none compiled: loading the kernels of a run costs about 0.2 CPU s, an interpreted
# iteration 2-8 us (planning 1,000 lengths into rows of 4,096, work 5,096: 0.03 s; rows of
# 5,120 tokens: 0.02 s).
SMALL_WORK = 10_000

_stand_ins: dict[int, Callable[..., Any]] = {}  # id(dispatcher) -> the Python function its twin is
_kernels: dict[int, Any] = {}  # id(dispatcher) -> dispatcher, for every njit here
_twins: dict[int, Callable[..., Any]] = {}
_compiled = False  # a kernel has been handed out compiled in this process


class _RuntimeOnlyCache(FunctionCache):
    """numba's per-function disk cache, loading with the runtime initialised instead of a full refresh."""

    def load_overload(self, sig: Any, target_context: Any) -> Any:
        rtsys.initialize(target_context)
        with self._guard_against_spurious_io_errors():
            return self._load_overload(sig, target_context)


def njit(interpreted: Callable[..., Any] | None = None, **options: Any) -> Callable[[Callable[..., Any]], Any]:
    """`numba.njit(**options)`; with cache=True the dispatcher loads through _RuntimeOnlyCache.
    `interpreted`: what the kernel's twin is, for a body only numba can run (an intrinsic)."""

    def decorate(function: Callable[..., Any]) -> Any:
        dispatcher = _numba_njit(**options)(function)
        cache = getattr(dispatcher, "_cache", None)
        if type(cache) is FunctionCache and hasattr(cache, "_load_overload"):
            cache.__class__ = _RuntimeOnlyCache
        _kernels[id(dispatcher)] = dispatcher
        if interpreted is not None:
            _stand_ins[id(dispatcher)] = interpreted
        return dispatcher

    return decorate


def kernel(dispatcher: Any, work: int) -> Callable[..., Any]:
    """The callable a wrapper runs for `work` loop iterations: the interpreted twin while
    that is cheaper than loading compiled code, else the compiled kernel."""
    global _compiled
    if not _compiled and work <= SMALL_WORK and id(dispatcher) in _kernels:
        return twin(dispatcher)
    _compiled = True
    return dispatcher


def twin(dispatcher: Any) -> Callable[..., Any]:
    """The kernel's Python function, calling the twins of the kernels it calls."""
    key = id(dispatcher)
    if key in _twins:
        return _twins[key]
    function = _stand_ins.get(key) or getattr(dispatcher, "py_func", dispatcher)
    if key in _stand_ins or not isinstance(function, types.FunctionType):
        _twins[key] = function
        return function
    namespace = dict(function.__globals__)
    _twins[key] = types.FunctionType(
        function.__code__, namespace, function.__name__, function.__defaults__, function.__closure__
    )
    for name, value in function.__globals__.items():
        if id(value) in _kernels and _kernels[id(value)] is value:
            namespace[name] = twin(value)
    return _twins[key]
