"""How a command ends on an error: one line on stderr and the error's exit code.

Core code raises PackcliError (exit 1, 2 for usage errors); a signal stops a run with
Interrupted, Ctrl-C with KeyboardInterrupt (told as SIGINT). Each becomes `error: ...` on
stderr, with the traceback only under --debug.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

import typer

from packcli.core.errors import Interrupted, PackcliError


@contextmanager
def one_line_errors(debug: bool, output: str | None = None) -> Iterator[None]:
    """Turns a PackcliError, a signal or Ctrl-C into one line on stderr and typer.Exit
    with its code; under --debug lets it through, traceback and all.

    `output`: pack's output directory, which a signal reports as complete once its
    manifest is written (the SPEC's definition of complete)."""
    try:
        yield
    except (PackcliError, Interrupted, KeyboardInterrupt) as exc:
        if debug:
            raise
        if not isinstance(exc, PackcliError):
            stop = (
                exc
                if isinstance(exc, Interrupted)
                else Interrupted("SIGINT", 2, getattr(exc, "output_complete", False))
            )
            exc = stop.completed() if not stop.complete and _complete_here(output) else stop
        sys.stderr.write(f"error: {exc}\n")
        raise typer.Exit(exc.exit_code) from None


def _complete_here(output: str | None) -> bool:
    """Whether `output` is a complete output on this machine's disk (a URL is not looked at)."""
    from packcli.core.storage import is_complete, is_remote

    return output is not None and not is_remote(output) and is_complete(output)
