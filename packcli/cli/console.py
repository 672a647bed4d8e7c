"""Where commands write what is not an error: the Rich console on stdout, notes on
stderr, and the live progress bar on stderr when it is a terminal.

Rich is imported when a console or a bar is made, so `packcli --help` never loads it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console

Advance = Callable[..., None]  # (docs, tokens, done_bytes=0, total_bytes=None): the bar moved on


def stdout() -> Console:
    """The console reports are printed to: stdout, lines never wrapped."""
    from rich.console import Console

    return Console(soft_wrap=False)


def note(text: str) -> None:
    """Writes `note: text` on stderr: something to know that is not the command's output."""
    sys.stderr.write(f"note: {text}\n")


@contextmanager
def progress(unit: str = "docs") -> Iterator[Advance | None]:
    """A live bar on stderr when it is a terminal (ETA when the input size is known); nothing otherwise."""
    if not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    columns = (
        BarColumn(bar_width=20),
        TextColumn(
            "{task.fields[docs]:,} " + unit + "  {task.fields[tokens]:,} tokens  {task.fields[rate]:,.0f} tok/s"
        ),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("pack", total=None, docs=0, tokens=0, rate=0.0)
        totals = {"docs": 0, "tokens": 0}

        def advance(docs: int, tokens: int, done_bytes: int = 0, total_bytes: int | None = None) -> None:
            totals["docs"] += docs
            totals["tokens"] += tokens
            elapsed = bar.tasks[0].elapsed or 0.0
            rate = totals["tokens"] / elapsed if elapsed > 0 else 0.0
            bar.update(
                task, completed=done_bytes, total=total_bytes, rate=rate, docs=totals["docs"], tokens=totals["tokens"]
            )

        yield advance
