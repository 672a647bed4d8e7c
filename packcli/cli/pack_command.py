"""What `packcli pack` does behind its Typer command: its options assembled into one
PackOptions (the input options by name, a mixture from --mix or --source/--weight/--epochs,
the --holdout fraction), the run under signal handling and a progress bar, and its report
printed (a table, or JSON with --json; with --holdout, one table per output).

Arrow's allocator is chosen before the engine, and with it pyarrow, is imported.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from packcli.cli.console import progress, stdout
from packcli.cli.options import fraction, mixture, pack_options


def run(
    inputs: list[str],
    arguments: dict[str, Any],
    *,
    output: str,
    mix: str | None,
    source: list[str],
    weight: list[str],
    epochs: list[str],
    holdout: str | None,
    json_output: bool,
    **own: Any,
) -> None:
    """Packs `inputs` (or the mixture's sources) into `output` and prints the report.

    `arguments`: the command's arguments by name, its input options among them; `own`:
    pack's other options, as PackOptions names them."""
    from packcli.core.flow import arrow_from_system, signals_raise

    arrow_from_system()
    from packcli.core.pause import pause
    from packcli.engine.pack import run_pack

    options = pack_options(
        inputs,
        arguments,
        output=output,
        **own,
        mix=mixture(mix, source, weight, epochs),
        holdout=fraction("--holdout", holdout),
    )
    with signals_raise():  # SIGTERM after the run too: told as SIGINT is
        with progress() as advance:
            report = run_pack(options, progress=advance)
        pause("done")
        splits = report.get("splits")
        if splits is not None and not json_output:  # --holdout: train, then validation
            for side, part in splits.items():
                show_report(part, f"packed into {output.rstrip('/')}/{side}", json_output=False)
        else:
            show_report(report, f"packed into {output}", json_output=json_output)


def show_report(report: Mapping[str, Any], title: str, *, json_output: bool) -> None:
    """Prints a run's report: its warnings on stderr, then a table titled `title` (or JSON) on stdout."""
    from packcli.cli import render

    for line in render.warnings(report):
        sys.stderr.write(line + "\n")
    if json_output:
        sys.stdout.write(render.to_json(report))
    else:
        stdout().print(render.render_table(report, title))
