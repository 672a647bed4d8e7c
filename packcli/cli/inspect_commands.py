"""What `stats`, `show` and `verify` do behind their Typer commands: which paths are
packed outputs and which are raw input (a --holdout's DIR standing for its two outputs),
the inspect package's reports on them, and how those are printed or written (a table,
--json, --plot, --html).

Raw input is read and tokenized exactly as pack would, through the same input options
(cli.options.pack_options); given with packed outputs, those options are usage errors.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from packcli.cli.console import note, progress, stdout
from packcli.cli.options import pack_options
from packcli.core.choices import COLOR_CHOICES
from packcli.core.errors import PackcliError

if TYPE_CHECKING:
    from packcli.core.options import PackOptions
    from packcli.inspect.what_if import WhatIfOptions


class Selection(NamedTuple):
    """The rows `show` picks (raw input: the records): --row, --rows A:B, or --random K by --seed."""

    row: int | None
    rows: str | None
    random: int | None
    seed: int


class Display(NamedTuple):
    """How `show` draws what it picked (--tokens, --learned-only, --color), and the files
    or JSON it writes besides (--html, --json)."""

    tokens: bool
    learned_only: bool
    color: str
    html: str | None
    json_output: bool


def stats(
    paths: list[str],
    arguments: dict[str, Any],
    *,
    given: list[str],
    seq_lens: list[int],
    pad_to_multiple_of: int | None,
    batch_size: int,
    plot: str | None,
    html: str | None,
    json_output: bool,
) -> None:
    """Prints the efficiency of packed outputs (side by side when several), or, on raw
    input, what every packer would give it.

    `arguments`: the command's arguments by name, its input options among them; `given`:
    the options only raw input takes that the command line gave."""
    paths = with_splits(paths)
    if not is_raw_input(paths, given):
        _stats_dirs(paths, plot=plot, json_output=json_output, html=html)
        return
    if html:
        raise PackcliError("--html: for packed outputs (raw input has --plot)", usage=True)
    from packcli.inspect.what_if import WhatIfOptions

    options = WhatIfOptions(
        pack_options(
            paths,
            arguments,
            output="",
            seq_len=seq_lens[0] if seq_lens else 0,
            pad_to_multiple_of=pad_to_multiple_of,
        ),
        seq_lens,
        batch_size,
    )
    _stats_raw(options, plot=plot, json_output=json_output)


def with_splits(paths: list[str]) -> list[str]:
    """The paths, a --holdout's DIR standing for its outputs (train, validation) side by side."""
    from packcli.core.storage import is_complete
    from packcli.write.manifest import SPLITS

    out: list[str] = []
    for path in paths:
        local = Path(path)
        if local.is_dir() and not is_complete(local):
            splits = [local / name for name in SPLITS if is_complete(local / name)]
            if splits:
                out.extend(str(split) for split in splits)
                continue
        out.append(path)
    return out


def is_raw_input(paths: list[str], given: list[str], command: str = "stats") -> bool:
    """Raw input when no path is a packed output; usage errors for a mix, or for options
    that only raw input takes given with packed outputs."""
    packed = [_is_packed(path) for path in paths]
    if any(packed) and not all(packed):
        raise PackcliError(
            f"{paths[packed.index(False)]} is not a packed output but {paths[packed.index(True)]} is: {command} takes packed "
            "output directories, or raw input with --tokenizer and --seq-len, not both",
            usage=True,
        )
    if all(packed) and given:
        flags = ", ".join("--" + name.replace("_", "-") for name in given)
        raise PackcliError(
            f"{flags}: for raw input only; to see what packing {paths[0]} again would give, run {command} on the raw input",
            usage=True,
        )
    return not all(packed) and bool(given)  # raw input with no option: fails on the first path, with a hint


def _is_packed(path: str) -> bool:
    """A packed output: a directory with a manifest, or a URL that holds one."""
    from packcli.core.storage import is_complete

    return is_complete(path)


def _stats_dirs(paths: list[str], *, plot: str | None, json_output: bool, html: str | None) -> None:
    """Measures each packed output from its shards and prints the report, or the reports side by side."""
    from packcli.cli import render
    from packcli.core.storage import fetched_output
    from packcli.inspect.stats import dir_stats

    reports, histograms = [], []
    for path in paths:
        try:
            with fetched_output(path) as local:
                report, hists = dir_stats(local)
        except PackcliError as exc:
            if Path(path).exists() and not _is_packed(path):
                raise PackcliError(f"{exc}; for raw input, pass --tokenizer and --seq-len") from exc
            raise
        reports.append(report)
        histograms.append(hists)
    if plot:
        render.plot_dirs(plot, paths, histograms, reports)
    if html:
        from packcli.cli.show_html import write_stats_page

        write_stats_page(html, paths, reports)
    if json_output:
        sys.stdout.write(render.to_json(reports[0] if len(reports) == 1 else dict(zip(paths, reports))))
        return
    console = stdout()
    if len(reports) == 1:
        render.render_stats(console, paths[0], reports[0])
    else:
        render.render_compare(console, paths, reports)
    if plot:
        console.print(f"[dim]plot written to {plot}[/dim]")
    if html:
        console.print(f"[dim]page written to {html}[/dim]")


def _stats_raw(options: WhatIfOptions, *, plot: str | None, json_output: bool) -> None:
    """Reads and tokenizes raw input as pack would and prints what each packer would make of it."""
    from packcli.cli import render
    from packcli.inspect.what_if import stats_raw

    if plot:  # fail before the work, not after it
        render.matplotlib_figure()
    with progress() as advance:
        report = stats_raw(options, progress=advance)
    if plot:
        render.plot_what_if(plot, report)
    report.pop("_lengths")
    if json_output:
        sys.stdout.write(render.to_json(report))
        return
    console = stdout()
    render.render_what_if(console, report)
    if plot:
        console.print(f"[dim]plot written to {plot}[/dim]")


def show(
    paths: list[str],
    arguments: dict[str, Any],
    *,
    given: list[str],
    seq_len: int | None,
    selection: Selection,
    display: Display,
    no_color: bool,
    color_given: bool,
) -> None:
    """Shows the picked rows of a packed output, or the segments pack would make of the
    picked records of raw input.

    `arguments`: the command's arguments by name, its input options among them; `given`:
    the options only raw input takes that the command line gave; `color_given`: whether it
    gave --color, which --no-color must not contradict."""
    from packcli.core.options import check_choice

    check_choice("--color", display.color, COLOR_CHOICES)
    if no_color:
        if color_given and display.color != "never":
            raise PackcliError(f"--no-color and --color {display.color}: give one", usage=True)
        display = display._replace(color="never")
    is_raw_input(paths, given, command="show")  # a mix, or raw-input options with a packed output: usage errors
    tokenizer = arguments["tokenizer"]
    if all(_is_packed(path) for path in paths):
        if len(paths) > 1:
            raise PackcliError("show takes one packed output at a time", usage=True)
        _show_output(paths[0], selection, tokenizer, display)
        return
    if selection.random is not None:
        raise PackcliError("--random: for packed outputs; on raw input pick records with --row or --rows", usage=True)
    _refuse_unfinished_output(paths, tokenizer, arguments["ids_field"])
    options = pack_options(paths, arguments, output="", seq_len=seq_len or 0)
    _show_raw(options, selection, display)


def _refuse_unfinished_output(paths: list[str], tokenizer: str | None, ids_field: str | None) -> None:
    """A directory without a manifest and no tokenizer: an unfinished output, not raw input."""
    if tokenizer is None and ids_field is None and len(paths) == 1 and Path(paths[0]).is_dir():
        from packcli.core.storage import incomplete_output
        from packcli.write.manifest import split_outputs

        splits = split_outputs(paths[0])
        if splits:
            names = " or ".join(str(split) for split in splits)
            raise PackcliError(f"{paths[0]} holds the outputs of --holdout: show one of them, {names}", usage=True)
        raise incomplete_output(paths[0], " (for raw input, give --tokenizer and the input options of pack)")


def _show_output(path: str, selection: Selection, tokenizer: str | None, display: Display) -> None:
    """Reads the picked rows from their shards and draws them (and writes the page or the JSON)."""
    from packcli.cli import show_render
    from packcli.core.storage import is_remote
    from packcli.inspect import show as shown_rows

    source = shown_rows.OutputSource(path)
    row, rows, random, seed = selection
    indices = shown_rows.parse_selection(row, rows, random, source.total_rows, seed)
    decoder = shown_rows.output_decoder(source.manifest, tokenizer, note)
    views = list(shown_rows.read_views(source, indices))
    if display.html:
        from packcli.cli import show_html

        report = None
        if not is_remote(path):
            from packcli.inspect.stats import dir_stats

            report = dir_stats(path)[0]
        show_html.write_page(display.html, f"packcli show {path}", views, decoder, report)
        note(f"page written to {display.html}")
    if display.json_output:
        from packcli.cli import render

        sys.stdout.write(render.to_json([shown_rows.view_to_json(view, decoder) for view in views]))
        return
    console = show_render.console_for(display.color)
    show_render.print_views(console, views, decoder, tokens=display.tokens, learned_only=display.learned_only)


def _show_raw(options: PackOptions, selection: Selection, display: Display) -> None:
    """Cuts the picked records of raw input as pack would and draws the segments, with the
    reason for any record skipped, dropped or cut."""
    from packcli.cli import show_render
    from packcli.inspect import show as shown_rows
    from packcli.inspect.show_raw import raw_views

    row, rows = selection.row, selection.rows
    if row is not None and rows is not None:
        raise PackcliError("--row and --rows: give one way to pick records", usage=True)
    if row is not None:
        start, stop = row, row + 1
    else:
        start, end = shown_rows.parse_range(rows or f"0:{shown_rows.DEFAULT_RECORDS}")
        stop = end if end is not None else 1 << 62
    shown = raw_views(options, start, stop)
    if not shown.views and not shown.bad:
        raise PackcliError(f"no records there: the input has none from record {start}")
    if display.html:
        from packcli.cli import show_html

        title = "packcli show " + " ".join(options.inputs)
        show_html.write_page(display.html, title, shown.views, shown.decoder, None, shown.bad)
        note(f"page written to {display.html}")
    if display.json_output:
        from packcli.cli import render

        records = [shown_rows.view_to_json(view, shown.decoder) for view in shown.views]
        bad = [{"kind": "bad_record", **entry} for entry in shown.bad]
        sys.stdout.write(render.to_json(records + bad))
        return
    extra = [f"{entry['location']}: {entry['problem']} ({entry['pack']})" for entry in shown.bad]
    console = show_render.console_for(display.color)
    show_render.print_views(
        console, shown.views, shown.decoder, tokens=display.tokens, extra=extra, learned_only=display.learned_only
    )


def verify(path: str, *, json_output: bool) -> None:
    """Checks a packed output (each of a --holdout's outputs, train first) and prints one
    line per output, or JSON; a violation raises, naming it."""
    from packcli.cli import render
    from packcli.core.storage import fetched_output
    from packcli.inspect.verify import verify_dir
    from packcli.write.manifest import split_outputs

    with fetched_output(path) as local:
        splits = split_outputs(local)
        if not splits:
            summary = verify_dir(local)
        else:  # --holdout's DIR: each of its outputs, train first
            summaries = {split.name: verify_dir(split) for split in splits}
    if not splits:
        if json_output:
            sys.stdout.write(render.to_json(summary))
            return
        print(render.verify_line(path, summary))
        return
    if json_output:
        sys.stdout.write(render.to_json({"splits": summaries}))
        return
    for name, summary in summaries.items():
        print(render.verify_line(f"{path.rstrip('/')}/{name}", summary))
