"""Stop a packcli process at a named point of its run, deterministically (packcli/pause.py).

The run, on reaching the point, opens a FIFO for reading and reads until the test closes
its end. `stop_at` opens the FIFO for writing: that open returns only once the run stands
at the point, and the signal is sent then. Should the run end without reaching it, a
watcher opens the FIFO itself (after the process has exited), so the test fails at once
and never waits on a point that will not come. No sleep, no polling, no timing."""

from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path

import pytest

from packcli.core.pause import FIFO_VARIABLE, POINT_VARIABLE

SAFETY_TIMEOUT = 300  # seconds: only a hung process reaches it


def stop_at(
    command: list[str],
    point: str,
    sig: int,
    fifo_dir: Path,
    env: dict | None = None,
    cwd: Path | None = None,
    group: bool = False,
):
    """Run `command` until a packcli it runs reaches `point` (`POINT` or `POINT:N`), send it
    `sig`, and return the CompletedProcess (text stdout and stderr). `group`: the command runs
    in a process group of its own and the whole group gets the signal, as a terminal's Ctrl-C
    reaches make and the packcli it runs."""
    fifo = fifo_dir / f"pause-{point.replace(':', '-')}-{sig}.fifo"
    os.mkfifo(fifo)
    environment = {**os.environ, **(env or {}), POINT_VARIABLE: point, FIFO_VARIABLE: str(fifo)}
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environment,
        cwd=cwd,
        start_new_session=group,
    )
    outputs: dict[str, str] = {}

    def watch() -> None:
        outputs["stdout"], outputs["stderr"] = process.communicate(timeout=SAFETY_TIMEOUT)
        os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))  # frees the writer's open below, if still waiting

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    writer = os.open(fifo, os.O_WRONLY)  # returns when the run reaches the point, or the watcher above opens it
    try:
        if process.poll() is not None and "stderr" in outputs:
            pytest.fail(f"the run ended before reaching {point!r}: {outputs}")
        if group:
            os.killpg(process.pid, sig)
        else:
            process.send_signal(sig)
        watcher.join(SAFETY_TIMEOUT)
    finally:
        os.close(writer)
    return subprocess.CompletedProcess(command, process.returncode, outputs.get("stdout"), outputs.get("stderr"))
