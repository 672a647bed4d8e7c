"""numba's `njit` for packcli's kernels, made when first needed, with a cheaper first load
from numba's disk cache.

Importing numba costs 0.33-0.36 s after numpy and pyarrow (measured on 2 cores), and a run over a few documents runs no compiled
kernel (see `kernel`), so `njit` does not import it: it returns a `LazyKernel`, which
makes numba's dispatcher on first compiled use. Then every lazy kernel gets its
dispatcher at once and every packcli module's names for them (and for the numba objects
kernels use, `numba_name`) are rebound to the real ones, since numba compiles a kernel's
calls to other kernels from its module's globals.

Before loading any cached kernel numba refreshes its CPU target: it imports every typing
and lowering module it has (numba.cpython, numba.np, cffi, ...) and rebuilds its
registries, 0.25-0.5 s of CPU once per process, and a five-document `pack` would pay it
in full. Loading compiled code needs none of that, only numba's runtime (NRT), whose
symbols the compiled code calls. Compiling (a cache miss, a new signature) refreshes the
target itself, so kernels that are compiled rather than loaded get everything as before.

For small work even the load costs more than the work: `kernel(dispatcher, work)` hands a
wrapper the kernel's interpreted twin (its Python function, with the kernels it calls
swapped for their twins, as under NUMBA_DISABLE_JIT) while no kernel has run compiled in
the process and the work is at most SMALL_WORK; the compiled kernel otherwise. Both give
the same results (the suite also runs with NUMBA_DISABLE_JIT=1).
"""

from __future__ import annotations

import functools
import importlib
import os
import sys
import threading
import types
from collections.abc import Callable
from typing import Any

# Loop iterations (about) up to which a kernel runs interpreted in a process that has run
# none compiled: loading the kernels of a run costs about 0.2 CPU s, an interpreted
# iteration 2-8 us (planning 1,000 lengths into rows of 4,096, work 5,096: 0.03 s; rows of
# 5,120 tokens: 0.02 s).
SMALL_WORK = 10_000

# numba reads NUMBA_DISABLE_JIT from the environment when imported; read here without it
DISABLE_JIT = bool(int(os.environ.get("NUMBA_DISABLE_JIT", "0") or "0"))

_stand_ins: dict[int, Callable[..., Any]] = {}  # id(kernel) -> the Python function its twin is
_kernels: dict[int, Any] = {}  # id(kernel) -> kernel, lazy kernels and dispatchers both
_twins: dict[int, Callable[..., Any]] = {}
_lazy: list[LazyKernel] = []
_compiled = False  # a kernel has been handed out compiled in this process
_made = False  # every lazy kernel has its dispatcher
_making = threading.RLock()
_load_extensions = True  # numba's `numba_extensions` entry points, before the first kernel


def own_process() -> None:
    """The CLI owns its process: numba loads no other package's extensions into it.

    Before its first compile or cache load numba imports every package that registers a
    `numba_extensions` entry point; gigatoken's dependency awkward registers one, 0.25-0.33 s
    of every run that reaches a compiled kernel (measured on 2 cores). packcli's kernels
    take plain NumPy arrays and need no extension. A library caller's process keeps them."""
    global _load_extensions
    _load_extensions = False


class LazyKernel:
    """A kernel before numba is imported: its Python function (`py_func`), and on first
    compiled use (a call, or any dispatcher attribute) numba's dispatcher."""

    def __init__(self, function: Callable[..., Any], options: dict[str, Any]):
        self.py_func = function
        self.options = options
        self.dispatcher: Any = None
        functools.update_wrapper(self, function)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return compiled(self)(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:  # signatures, stats, _cache, ...: the dispatcher's
        if name.startswith("__") or name in ("py_func", "options", "dispatcher"):
            raise AttributeError(name)
        return getattr(compiled(self), name)

    def __repr__(self) -> str:
        return f"<lazy kernel {self.py_func.__qualname__}>"


class NumbaName:
    """A numba object a kernel's body names (an intrinsic), imported with numba."""

    def __init__(self, module: str, name: str):
        self.module, self.name = module, name

    def resolve(self) -> Any:
        return getattr(importlib.import_module(self.module), self.name)


def numba_name(module: str, name: str) -> Any:
    """`from module import name`, deferred until the kernels are made (a kernel's body
    only runs compiled, or as its twin, which does not name it)."""
    return NumbaName(module, name).resolve() if _made else NumbaName(module, name)


def njit(interpreted: Callable[..., Any] | None = None, **options: Any) -> Callable[[Callable[..., Any]], Any]:
    """`numba.njit(**options)`, made on first compiled use; with cache=True the dispatcher
    loads through the runtime-only cache. `interpreted`: what the kernel's twin is, for a
    body only numba can run (an intrinsic)."""

    def decorate(function: Callable[..., Any]) -> Any:
        with _making:
            made: Any = _dispatcher(function, options) if _made else LazyKernel(function, options)
            if not _made:
                _lazy.append(made)
            _kernels[id(made)] = made
            if interpreted is not None:
                _stand_ins[id(made)] = interpreted
        return made

    return decorate


def compiled(kernel: Any) -> Any:
    """The numba dispatcher of a kernel (every lazy kernel's made on the first call)."""
    if isinstance(kernel, LazyKernel):
        if kernel.dispatcher is None:
            _make_all()
        return kernel.dispatcher
    return kernel


def _make_all() -> None:
    """numba imported, every lazy kernel's dispatcher made, and every packcli module's
    names for lazy kernels and numba names rebound to the real objects."""
    global _made
    with _making:
        if _made:
            return
        if not _load_extensions:
            _skip_numba_extensions()
        for lazy in _lazy:
            lazy.dispatcher = _dispatcher(lazy.py_func, lazy.options)
            _kernels[id(lazy.dispatcher)] = lazy.dispatcher
            if id(lazy) in _stand_ins:
                _stand_ins[id(lazy.dispatcher)] = _stand_ins[id(lazy)]
        for name, module in list(sys.modules.items()):
            if name == "packcli" or name.startswith("packcli."):
                for attribute, value in list(vars(module).items()):
                    if isinstance(value, LazyKernel):
                        setattr(module, attribute, value.dispatcher)
                    elif isinstance(value, NumbaName):
                        setattr(module, attribute, value.resolve())
        _made = True


def _skip_numba_extensions() -> None:
    from numba.core import entrypoints

    if hasattr(entrypoints, "_already_initialized"):  # the flag numba's init_all checks first
        entrypoints._already_initialized = True


def _dispatcher(function: Callable[..., Any], options: dict[str, Any]) -> Any:
    from numba import njit as numba_njit
    from numba.core.caching import FunctionCache

    dispatcher = numba_njit(**options)(function)
    cache = getattr(dispatcher, "_cache", None)
    if type(cache) is FunctionCache and hasattr(cache, "_load_overload"):
        cache.__class__ = runtime_only_cache()
    return dispatcher


@functools.cache
def runtime_only_cache() -> type:
    """numba's per-function disk cache, loading with the runtime initialised instead of a full refresh."""
    from numba.core.caching import FunctionCache
    from numba.core.runtime import rtsys

    class RuntimeOnlyCache(FunctionCache):
        def load_overload(self, sig: Any, target_context: Any) -> Any:
            rtsys.initialize(target_context)
            with self._guard_against_spurious_io_errors():
                return self._load_overload(sig, target_context)

    return RuntimeOnlyCache


def use_compiled() -> None:
    """Kernels run compiled from now on, whatever their work: for a run that knows it will
    need them and loads them ahead (plan/pairs.py's `warm`, while the input is read)."""
    global _compiled
    _compiled = True


def kernel(dispatcher: Any, work: int) -> Callable[..., Any]:
    """The callable a wrapper runs for `work` loop iterations: the interpreted twin while
    that is cheaper than loading compiled code, else the compiled kernel."""
    global _compiled
    if not _compiled and work <= SMALL_WORK and id(dispatcher) in _kernels:
        return twin(dispatcher)
    if id(dispatcher) in _stand_ins and _jit_disabled():
        return twin(dispatcher)  # its body calls an intrinsic, which only compiled code can
    _compiled = True
    return compiled(dispatcher)


def _jit_disabled() -> bool:
    """NUMBA_DISABLE_JIT as numba reads it: kernels then run as Python functions."""
    return os.environ.get("NUMBA_DISABLE_JIT", "0") not in ("", "0")


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
