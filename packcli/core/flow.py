"""Plumbing shared by the stages: per-stage timers, a prefetching thread, signals."""

from __future__ import annotations

import atexit
import ctypes
import functools
import os
import queue
import signal
import sys
import threading
import time
from collections.abc import Generator, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, NoReturn, TypeVar

from packcli.core.errors import Interrupted

T = TypeVar("T")


class Timer:
    """Busy time per stage, so the report shows where a run spends it. Reading, tokenizing
    and spilling run at the same time, so those stages add up to more than their span."""

    STAGES = ("read", "tokenize", "spill", "plan", "write")

    def __init__(self) -> None:
        self.seconds = dict.fromkeys(self.STAGES, 0.0)

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] += time.perf_counter() - start

    def timed_iter(self, name: str, items: Iterable[T]) -> Iterator[T]:
        iterator = iter(items)
        while True:
            with self.stage(name):
                item = next(iterator, None)
            if item is None:
                return
            yield item


def prefetch(iterator: Iterable[T], depth: int = 2) -> Generator[T, None, None]:
    """Run an iterator in a thread, so reading the next batch overlaps tokenizing this one
    (the tokenizers release the GIL); items and the first error arrive in order.

    Closing the returned generator stops the thread and waits for it; the iterator is
    closed by the thread that runs it, never while another thread is inside it."""
    items: queue.Queue[tuple[Any, BaseException | None]] = queue.Queue(maxsize=depth)
    stop = threading.Event()
    end = object()

    def put(item: tuple[Any, BaseException | None]) -> bool:
        while not stop.is_set():
            try:
                items.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            try:
                for item in iterator:
                    if not put((item, None)):
                        return
                put((end, None))
            except BaseException as exc:  # handed to the consumer, raised there
                put((end, exc))
        finally:
            getattr(iterator, "close", lambda: None)()

    thread = threading.Thread(target=produce, name="packcli-prefetch", daemon=True)
    thread.start()
    try:
        while True:
            item, error = items.get()
            if item is end:
                if error is not None:
                    raise error
                return
            yield item
    finally:
        stop.set()
        thread.join()


@contextmanager
def signals_raise() -> Iterator[None]:
    """SIGTERM stops a run like Ctrl-C does: temporary files removed, no manifest."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: object) -> None:
        raise Interrupted(signal.Signals(signum).name, signum)

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def return_freed_memory() -> None:
    """Large blocks (token batches, row blocks) come from mmap and go back to the system
    when freed. glibc raises its mmap threshold as such blocks are freed, after which they
    come from heaps that keep the memory: resident memory would then grow with the number
    of batches in flight over the run, not with one batch."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 1 << 20)  # M_MMAP_THRESHOLD: fixed at 1 MiB
    except (OSError, AttributeError):  # not glibc (musl, ...): nothing to tune
        pass


def arrow_from_system() -> None:
    """For `pack`, before pyarrow first allocates: Arrow's default pool is the system's
    (unless ARROW_DEFAULT_MEMORY_POOL says otherwise). mimalloc, its own default, keeps
    what each thread freed in that thread's heap, so two shards written at once held two
    blocks' worth of Parquet encoding for good, 60 MB more than one shard. Where reuse
    pays, a pool is named (`arrow_pool`): `pooled_empty`'s mimalloc and Parquet
    encoding's jemalloc (shards.py).
    Other commands keep mimalloc (`verify` of 154 MB of Parquet: 1.37-1.39 s with it,
    1.54-1.66 s on the system's)."""
    os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")


def pooled_empty(count: int, dtype: Any) -> Any:
    """An uninitialised numpy array in memory from Arrow's pool (mimalloc), which keeps freed
    blocks for the next allocation. A large array from numpy is a fresh mapping (glibc's mmap
    threshold is fixed at 1 MiB, see return_freed_memory) whose every page the kernel faults
    in and zeroes again: 12% of the CPU of an `--ids-field` pack went to that zeroing
    (docs/benchmarks/spill-2026-11-24.md). For arrays a stage makes and drops per block."""
    import numpy as np
    import pyarrow as pa

    dtype = np.dtype(dtype)
    return np.frombuffer(
        pa.allocate_buffer(count * dtype.itemsize, memory_pool=arrow_pool("mimalloc")), dtype=dtype, count=count
    )


@functools.cache
def arrow_pool(name: str) -> Any:
    """Arrow's `name` pool ("mimalloc", "jemalloc") where this pyarrow has it, else its default one."""
    import pyarrow as pa

    try:
        return getattr(pa, f"{name}_memory_pool")()
    except NotImplementedError:
        return pa.default_memory_pool()


def exit_now(code: int) -> NoReturn:
    """End the process as Python's own exit does, without the interpreter's teardown:
    threads that are not daemons are joined as at exit and atexit handlers run (coverage,
    Ray), stdout and stderr are flushed, then `os._exit`. Tearing down numba's, Arrow's and the
    tokenizers' modules and freeing every object costs about 0.4 s after a large pack
    (docs/benchmarks/spill-2026-11-24.md): time in which no work is done."""
    shutdown = getattr(threading, "_shutdown", None)  # what the interpreter's exit runs first
    if shutdown is None:
        sys.exit(code)
    shutdown()  # threading's exit hooks (executors told to stop), then threads not daemons joined
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing more can be said on it
            pass
    os._exit(code)
