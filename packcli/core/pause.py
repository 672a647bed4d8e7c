"""A test hook that holds a run at a named point, so a test can signal it there and nowhere else.

With PACKCLI_PAUSE_AT=POINT and PACKCLI_PAUSE_FIFO=PATH (a FIFO the test made), the run
opens the FIFO for reading when it reaches POINT (the first time only) and reads until the
test closes its end: the test, once its own open for writing has returned, knows the run
stands at POINT, sends its signal, which the run's main thread receives inside the read.
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
    fd = os.open(os.environ[FIFO_VARIABLE], os.O_RDONLY)  # returns once the test opens it for writing
    try:
        while os.read(fd, 4096):  # until the test closes its end; a signal is raised from here
            pass
    finally:
        os.close(fd)
