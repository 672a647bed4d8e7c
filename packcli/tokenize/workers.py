"""Tokenizing on forked worker processes, with results taken back in input order.

Why processes: tiktoken holds the GIL for part of every call (the text going in, the ids
coming out), so on this project's 2-core machine two threads of it encoded 1.50x faster
than one while two processes ran 1.97x (docs/benchmarks.md); chat templates are Python.
Why fork: the workers inherit the loaded tokenizer, the tiktoken conversion and the
sequence builder, so they start in milliseconds and only record batches and token arrays
cross the pipes.

The output cannot depend on the number of workers: the reader cuts the batches, every batch
is built by the same deterministic function, and results are consumed in submission order.
"""

from __future__ import annotations

import ctypes
import gc
import multiprocessing
import os
import signal
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from typing import TYPE_CHECKING

from packcli.core.errors import PackcliError

if TYPE_CHECKING:
    from concurrent.futures import Future

    from packcli.read.records import RecordBatch
    from packcli.tokenize.sequences import SequenceBatch

Build = Callable[["RecordBatch"], "SequenceBatch"]
_build: Build | None = None  # what a worker runs on a batch; set in the parent just before the fork


def available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def can_fork() -> bool:
    return "fork" in multiprocessing.get_all_start_methods()


def _init_worker() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole process group; the parent decides
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:  # Linux: die with the parent, even when it is killed with SIGKILL
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _run(batch: RecordBatch) -> tuple[SequenceBatch, float]:
    assert _build is not None, "the pool sets _build before forking"
    start = time.perf_counter()
    result = _build(batch)
    return result, time.perf_counter() - start


@contextmanager
def _environment(**values: str) -> Iterator[None]:
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


class WorkerPool:
    """`workers` forked processes that each run `build` on whole batches.

    Create it before starting any thread of your own: a fork copies only the calling thread,
    so a lock another thread held would stay locked in the children forever."""

    def __init__(self, build: Build, workers: int):
        global _build
        _build = build
        self.workers = workers
        # Each worker encodes on its own single thread: the HF tokenizer's Rust thread pool
        # does not survive a fork, and the workers are the parallelism.
        # gc.freeze: the workers' garbage collector leaves the objects inherited from here
        # alone, so their pages stay shared with this process instead of being copied.
        gc.freeze()
        try:
            with _environment(TOKENIZERS_PARALLELISM="false", RAYON_NUM_THREADS="1", RAYON_RS_NUM_CPUS="1"):
                self._pool = ProcessPoolExecutor(
                    workers, mp_context=multiprocessing.get_context("fork"), initializer=_init_worker
                )
                try:
                    self._pool.submit(os.getpid).result()  # forks every worker now
                except BaseException:
                    self.close()
                    raise
        finally:
            gc.unfreeze()

    def map(self, batches: Iterable[RecordBatch], ahead: int) -> Iterator[tuple[RecordBatch, SequenceBatch, float]]:
        """(batch, build(batch), seconds the worker spent) in the order of `batches`, with at
        most `ahead` batches handed out and not yet taken back."""
        pending: deque[tuple[RecordBatch, Future[tuple[SequenceBatch, float]]]] = deque()
        try:
            for batch in batches:
                pending.append((batch, self._pool.submit(_run, batch)))
                if len(pending) >= ahead:
                    yield self._take(*pending.popleft())
            while pending:
                yield self._take(*pending.popleft())
        finally:
            for _, future in pending:
                future.cancel()

    def _take(
        self, batch: RecordBatch, future: Future[tuple[SequenceBatch, float]]
    ) -> tuple[RecordBatch, SequenceBatch, float]:
        try:
            result, seconds = future.result()
        except BrokenProcessPool as exc:
            raise PackcliError(
                f"a tokenizer worker process died while tokenizing {batch.location(0)} and the records "
                "after it (out of memory?); try fewer --workers"
            ) from exc
        return batch, result, seconds

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
