"""A test hook that holds a run at a named point, so a test can signal it there and nowhere else.

With PACKCLI_PAUSE_AT=POINT and PACKCLI_PAUSE_FIFO=PATH (a FIFO the test made), the run
opens the FIFO for reading when it reaches POINT (the first time only) and reads until the
test closes its end: the test, once its own open for writing has returned, knows the run
stands at POINT, sends its signal, which the run's main thread receives while it waits.
No timing is involved. Unset (always, outside the tests), `pause` is one dictionary lookup.

Points of `pack`, in order: claimed (the output directory is the run's), spilled (every
segment on disk), shard-done (a shard finished), mid-shard (rows written into a shard
not yet finished, after at least one finished one), written (every shard closed), report.json-tmp and report.json (report written to its temporary name, then
in place), manifest.json-tmp and manifest.json (the same for the manifest: from here the
output is complete), done (the command, before it prints the summary).

A point on a shard thread holds only that thread, and a signal other than SIGKILL goes to
the main thread, which then waits for the held one: tests stop the run there with SIGKILL
only. It is kept out of POINTS: last-rows-read (the one-plan path: the rows of the last
shard are read from the spill, which is complete and still there, removed next).
"""

from __future__ import annotations

import os
import select
import signal
import threading

POINT_VARIABLE = "PACKCLI_PAUSE_AT"
FIFO_VARIABLE = "PACKCLI_PAUSE_FIFO"
POINTS = (
    "claimed",
    "spilled",
    "shard-done",
    "mid-shard",
    "written",
    "report.json-tmp",
    "report.json",
    "manifest.json-tmp",
    "manifest.json",
    "done",
)


_reached: dict[str, int] = {}


def pause(point: str) -> None:
    """Hold here if the environment names this point (`POINT`, or `POINT:N` for its N-th time)."""
    wanted = os.environ.get(POINT_VARIABLE)
    if wanted is None or wanted.partition(":")[0] != point:
        return
    _reached[point] = _reached.get(point, 0) + 1
    if _reached[point] != int(wanted.partition(":")[2] or 1):
        return
    del os.environ[POINT_VARIABLE]  # once: the run goes on after the test lets it
    if threading.current_thread() is not threading.main_thread():
        _hold(os.environ[FIFO_VARIABLE])  # signals go to the main thread; tests send SIGKILL here
        return
    # A signal that lands after Python last looked for one and before the read starts would
    # not interrupt the read: the run would sit at the point until the test gave up. So the
    # signal also writes to a pipe the wait watches (set before the FIFO is opened, so no
    # signal the test sends can miss it), and its handler runs as the wait returns.
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    previous = signal.set_wakeup_fd(wake_write)
    try:
        _hold(os.environ[FIFO_VARIABLE], wake_read)
    finally:
        signal.set_wakeup_fd(previous)
        os.close(wake_read)
        os.close(wake_write)


def _hold(fifo: str, wake: int | None = None) -> None:
    """Open `fifo` for reading (returns once the test opens it for writing) and wait until
    the test closes its end, or, with `wake`, until a signal's handler raises."""
    fd = os.open(fifo, os.O_RDONLY)
    try:
        watched = [fd] if wake is None else [fd, wake]
        while True:
            ready, _, _ = select.select(watched, [], [])
            if wake in ready:
                os.read(wake, 64)  # a signal arrived: its handler runs before the next wait
            if fd in ready and not os.read(fd, 4096):
                return
    finally:
        os.close(fd)
