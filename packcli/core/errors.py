"""The one exception type core code raises; the CLI turns it into one line and exit 1."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


class PackcliError(Exception):
    """A problem with the user's data, settings or environment, stated in one line.

    `usage=True` marks a bad command line (exit code 2 rather than 1).
    """

    def __init__(self, message: str, *, usage: bool = False):
        super().__init__(message)
        self.usage = usage

    @property
    def exit_code(self) -> int:
        return 2 if self.usage else 1


class Interrupted(BaseException):
    """A run stopped by a signal; exit code 128 + the signal's number, as shells expect.

    A BaseException, as KeyboardInterrupt is, so that no `except Exception` on its way takes
    it for an error of its own: `threading.Thread.start` has one around starting the thread,
    and a signal landing there undid a start the new thread then finished (a KeyError
    traceback on stderr from the new thread)."""

    def __init__(self, signal_name: str, signal_number: int, complete: bool = False):
        if complete:
            message = (
                f"interrupted by {signal_name} after the output was complete: its manifest.json is written "
                "and nothing is lost (packcli verify checks it)"
            )
        else:
            message = (
                f"interrupted by {signal_name}: no manifest was written, the output is incomplete; "
                "run the same command with --resume to continue"
            )
        super().__init__(message)
        self.signal_name, self.signal_number, self.complete = signal_name, signal_number, complete

    def completed(self) -> Interrupted:
        """The same interruption, of a run whose output was complete when it came."""
        return Interrupted(self.signal_name, self.signal_number, complete=True)

    @property
    def exit_code(self) -> int:
        return 128 + self.signal_number


@contextmanager
def needs_extra(extra: str, what: str) -> Iterator[None]:
    """Turn a missing optional library into one line naming the extra that installs it.

    `what` says who needs which library ("packcli.load.torch needs PyTorch"). The imports
    stay inside the `with` as plain statements, so a scan of the source sees them
    (tests/test_packaging.py checks each against the extra named here).
    """
    try:
        yield
    except ImportError as exc:
        raise PackcliError(f"{what}: pip install 'packcli[{extra}]'") from exc
