"""Typer commands only: options in, one call into the core, report out.

Heavy libraries are imported inside the commands so `packcli --help` stays instant.
Core code raises PackcliError; here it becomes one line on stderr and exit 1 (2 for
usage errors), with the traceback only under --debug.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from contextlib import contextmanager
from typing import Annotated, Any

import typer

from packcli.cli.options import (
    INPUT_OPTIONS,
    OUTPUT,
    PACKING,
    RUN,
    Bos,
    BufferSize,
    ChatTemplate,
    ChosenField,
    CompletionField,
    Debug,
    DefaultWeight,
    Eos,
    EosToken,
    Epochs,
    GroupBy,
    Holdout,
    HoldoutKey,
    IdsField,
    Json,
    KeepUnlearned,
    LabelsField,
    MaskReasoning,
    MaxSequencesPerRow,
    MessagesField,
    Mix,
    NoCache,
    OnBadRecord,
    Overlong,
    PadId,
    ParseSpecialTokens,
    PlainCommand,
    PlainGroup,
    PromptField,
    ReasoningClose,
    ReasoningOpen,
    RejectedField,
    Source,
    TextField,
    Tokenizer,
    TokenizerBackend,
    TrainOn,
    TruncationSide,
    Weight,
    WeightField,
    Workers,
    fraction,
    mixture,
    one_of,
    option,
    pack_options,
)
from packcli.core.choices import (
    ALGORITHMS,
    COLOR_CHOICES,
    DEFAULT_BATCH_SIZE,
    ENGINES,
    FORMATS,
    MODES,
    REMAINDER_POLICIES,
)
from packcli.core.errors import Interrupted, PackcliError
from packcli.core.version import __version__

app = typer.Typer(
    name="packcli",
    help="Pack raw text corpora into training-ready token shards for causal language models.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    cls=PlainGroup,
)


def _version(value: bool) -> None:
    if value:
        print(f"packcli {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Show the version and exit.")
    ] = False,
) -> None:
    """packcli: read -> tokenize -> pack -> write shards + report."""


@contextmanager
def _errors(debug: bool, output: str | None = None):
    """Errors as one line. `output`: pack's output directory, which a signal reports as
    complete once its manifest.json is written (the SPEC's definition of complete)."""
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
            exc = stop.completed() if not stop.complete and _has_manifest(output) else stop
        sys.stderr.write(f"error: {exc}\n")
        raise typer.Exit(exc.exit_code) from None


def _has_manifest(output: str | None) -> bool:
    from packcli.core.storage import is_complete, is_remote

    return output is not None and not is_remote(output) and is_complete(output)


def _stdout():
    from rich.console import Console

    return Console(soft_wrap=False)


@app.command(cls=PlainCommand)
def pack(
    inputs: Annotated[
        list[str],
        typer.Argument(
            help="Files (.jsonl, .jsonl.gz, .jsonl.zst, .json, .parquet, .arrow), directories of them, "
            "datasets save_to_disk directories, globs, - for JSONL on stdin, or any of these as URLs "
            "(s3://, gs://, az://, hf://). Not with a mixture (--mix, --source).",
            metavar="INPUT",
            show_default=False,
        ),
    ] = [],  # noqa: B006 (typer reads the default; a mixture names its paths instead)
    *,  # keyword-only, so the required options can stand in their panels, which --help shows in order
    text_field: TextField = None,
    prompt_field: PromptField = None,
    completion_field: CompletionField = None,
    messages_field: MessagesField = None,
    chat_template: ChatTemplate = None,
    train_on: TrainOn = "assistant",
    mask_reasoning: MaskReasoning = False,
    reasoning_open: ReasoningOpen = "<think>",
    reasoning_close: ReasoningClose = "</think>",
    chosen_field: ChosenField = None,
    rejected_field: RejectedField = None,
    weight_field: WeightField = None,
    default_weight: DefaultWeight = None,
    ids_field: IdsField = None,
    labels_field: LabelsField = None,
    on_bad_record: OnBadRecord = "fail",
    tokenizer: Tokenizer = None,
    tokenizer_backend: TokenizerBackend = "auto",
    parse_special_tokens: ParseSpecialTokens = False,
    bos: Bos = None,
    eos: Eos = True,
    eos_token: EosToken = None,
    pad_id: PadId = None,
    seq_len: Annotated[int, option("--seq-len", panel=PACKING, help="Tokens per row.")],
    mode: Annotated[
        str,
        option(
            panel=PACKING,
            show_default=True,
            metavar=one_of(MODES),
            help="bin: whole sequences per row; concat: EOS-joined stream cut into rows.",
        ),
    ] = "bin",
    algorithm: Annotated[
        str,
        option(
            panel=PACKING,
            show_default=True,
            metavar=one_of(ALGORITHMS),
            help="Bin packer, or module:function, a user strategy fn(lengths, capacity, groups) (docs/commands.md).",
        ),
    ] = "bfd",
    buffer_size: BufferSize = None,
    group_by: GroupBy = None,
    max_sequences_per_row: MaxSequencesPerRow = None,
    overlong: Overlong = None,
    truncation_side: TruncationSide = None,
    keep_unlearned: KeepUnlearned = False,
    remainder: Annotated[
        str,
        option(
            panel=PACKING,
            show_default=True,
            metavar=one_of(REMAINDER_POLICIES),
            help="concat mode: pad or drop the last partial row.",
        ),
    ] = "pad",
    shuffle: Annotated[
        bool,
        option(
            "--shuffle/--no-shuffle", panel=PACKING, show_default=True, help="Shuffle rows (deterministic, by --seed)."
        ),
    ] = True,
    seed: Annotated[int, option(panel=PACKING, show_default=True, help="Seed of the row shuffle.")] = 0,
    pad_to_multiple_of: Annotated[
        int | None,
        option(
            panel=PACKING,
            help="Bin mode: pad each segment to a multiple of N (context parallel, FP8).",
        ),
    ] = None,
    output: Annotated[str, option("--output", "-o", panel=OUTPUT, metavar="DIR", help="Output directory.")],
    format: Annotated[
        str, option("--format", panel=OUTPUT, show_default=True, metavar=one_of(FORMATS), help="Shard format.")
    ] = "parquet",
    rows_per_shard: Annotated[
        int | None, option(panel=OUTPUT, help="Rows per shard. (default: about 32M tokens per shard)")
    ] = None,
    overwrite: Annotated[bool, option(panel=OUTPUT, help="Replace an existing packcli output in --output.")] = False,
    json_output: Json = False,
    workers: Workers = None,
    no_cache: NoCache = False,
    resume: Annotated[
        bool, option(panel=RUN, help="Continue an interrupted run in --output (same inputs and options).")
    ] = False,
    tmp_dir: Annotated[
        str | None,
        option(
            panel=RUN,
            metavar="DIR",
            help="Where the token spill goes; it needs about the output's size on disk. (default: inside --output)",
        ),
    ] = None,
    engine: Annotated[
        str,
        option(
            panel=RUN,
            show_default=True,
            metavar=one_of(ENGINES),
            help="Where the work runs: this process, or Ray tasks (pip install 'packcli[ray]'). Same bytes either way.",
        ),
    ] = "local",
    ray_address: Annotated[
        str | None,
        option(
            panel=RUN,
            metavar="ADDR",
            help="With --engine ray: a running cluster (auto, ray://HOST:10001). (default: start one on this machine)",
        ),
    ] = None,
    mix: Mix = None,
    source: Source = [],  # noqa: B006
    weight: Weight = [],  # noqa: B006
    epochs: Epochs = [],  # noqa: B006
    holdout: Holdout = None,
    holdout_key: HoldoutKey = None,
    debug: Debug = False,
) -> None:
    """Tokenize INPUT... (or a mixture's sources) and pack it into shards of rows of exactly --seq-len tokens."""
    with _errors(debug, output):
        from packcli.core.flow import arrow_from_system, signals_raise

        arrow_from_system()
        from packcli.core.pause import pause
        from packcli.engine.pack import run_pack

        options = pack_options(
            inputs,
            locals(),
            output=output,
            seq_len=seq_len,
            mode=mode,
            algorithm=algorithm,
            remainder=remainder,
            format=format,
            rows_per_shard=rows_per_shard,
            shuffle=shuffle,
            seed=seed,
            pad_to_multiple_of=pad_to_multiple_of,
            overwrite=overwrite,
            resume=resume,
            tmp_dir=tmp_dir,
            engine=engine,
            ray_address=ray_address,
            mix=mixture(mix, source, weight, epochs),
            holdout=fraction("--holdout", holdout),
            holdout_key=holdout_key,
        )
        with signals_raise():  # SIGTERM after the run too: told as SIGINT is
            with _progress() as progress:
                report = run_pack(options, progress=progress)
            pause("done")
            splits = report.get("splits")
            if splits is not None and not json_output:  # --holdout: train, then validation
                for side, part in splits.items():
                    _show_report(part, f"packed into {output.rstrip('/')}/{side}", False)
            else:
                _show_report(report, f"packed into {output}", json_output)


@contextmanager
def _progress(unit: str = "docs"):
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


def _show_report(report: Mapping[str, Any], title: str, json_output: bool) -> None:
    from packcli.cli import render

    for line in render.warnings(report):
        sys.stderr.write(line + "\n")
    if json_output:
        sys.stdout.write(render.to_json(report))
    else:
        _stdout().print(render.render_table(report, title))


@app.command(cls=PlainCommand)
def stats(
    ctx: typer.Context,
    paths: Annotated[
        list[str],
        typer.Argument(
            help="Packed output directories (compared side by side when several), or raw input as for pack, with --seq-len and pack's input options.",
            metavar="PATH",
            show_default=False,
        ),
    ],
    text_field: TextField = None,
    prompt_field: PromptField = None,
    completion_field: CompletionField = None,
    messages_field: MessagesField = None,
    chat_template: ChatTemplate = None,
    train_on: TrainOn = "assistant",
    mask_reasoning: MaskReasoning = False,
    reasoning_open: ReasoningOpen = "<think>",
    reasoning_close: ReasoningClose = "</think>",
    chosen_field: ChosenField = None,
    rejected_field: RejectedField = None,
    weight_field: WeightField = None,
    default_weight: DefaultWeight = None,
    ids_field: IdsField = None,
    labels_field: LabelsField = None,
    on_bad_record: OnBadRecord = "fail",
    tokenizer: Tokenizer = None,
    tokenizer_backend: TokenizerBackend = "auto",
    parse_special_tokens: ParseSpecialTokens = False,
    bos: Bos = None,
    eos: Eos = True,
    eos_token: EosToken = None,
    pad_id: PadId = None,
    seq_len: Annotated[
        list[int] | None,
        option("--seq-len", panel=PACKING, help="Raw input: tokens per row; repeat to compare several."),
    ] = None,
    buffer_size: BufferSize = None,
    group_by: GroupBy = None,
    max_sequences_per_row: MaxSequencesPerRow = None,
    overlong: Overlong = None,
    truncation_side: TruncationSide = None,
    keep_unlearned: KeepUnlearned = False,
    pad_to_multiple_of: Annotated[
        int | None,
        option(panel=PACKING, help="Raw input: each segment padded to a multiple of N, as pack would."),
    ] = None,
    batch_size: Annotated[
        int, option(panel=PACKING, show_default=True, help="Raw input: batch size of the pad-to-longest baseline.")
    ] = DEFAULT_BATCH_SIZE,
    plot: Annotated[
        str | None,
        option(
            "--plot",
            panel=OUTPUT,
            metavar="FILE",
            help="Also draw the distributions to this image file (.png, .svg, .pdf); needs matplotlib.",
        ),
    ] = None,
    html: Annotated[
        str | None,
        option(
            "--html",
            panel=OUTPUT,
            metavar="FILE",
            help="Packed outputs: also write the figures and charts as one HTML page.",
        ),
    ] = None,
    json_output: Json = False,
    workers: Workers = None,
    no_cache: NoCache = False,
    debug: Debug = False,
) -> None:
    """Efficiency of packed output, recomputed from its shards; or, on raw input, what every packer would give.

    On raw input, the input options read and tokenize exactly as for pack."""
    with _errors(debug):
        arguments = locals()
        paths = _with_splits(paths)
        given = [name for name in ("seq_len", "pad_to_multiple_of", *INPUT_OPTIONS) if _on_command_line(ctx, name)]
        if not _is_raw_input(paths, given):
            _stats_dirs(paths, plot, json_output, html)
            return
        if html:
            raise PackcliError("--html: for packed outputs (raw input has --plot)", usage=True)
        from packcli.inspect.what_if import WhatIfOptions

        seq_lens = list(seq_len or [])
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
        _stats_raw(options, plot, json_output)


def _with_splits(paths: list[str]) -> list[str]:
    """The paths, a --holdout's DIR standing for its outputs (train, validation) side by side."""
    from pathlib import Path

    from packcli.core.storage import is_complete

    out: list[str] = []
    for path in paths:
        local = Path(path)
        if local.is_dir() and not is_complete(local):
            splits = [local / name for name in ("train", "validation") if is_complete(local / name)]
            if splits:
                out.extend(str(split) for split in splits)
                continue
        out.append(path)
    return out


def _on_command_line(ctx: typer.Context, name: str) -> bool:
    source = ctx.get_parameter_source(name)
    return source is not None and source.name == "COMMANDLINE"


def _is_raw_input(paths: list[str], given: list[str], command: str = "stats") -> bool:
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
    """A packed output: a directory with a manifest (stats.is_packed_output, without
    loading stats and its kernels), or a URL that holds one."""
    from packcli.core.storage import is_complete

    return is_complete(path)


def _stats_dirs(paths: list[str], plot: str | None, json_output: bool, html: str | None = None) -> None:
    from packcli.cli import render
    from packcli.core.storage import fetched_output
    from packcli.inspect.stats import dir_stats, is_packed_output

    reports, histograms = [], []
    for path in paths:
        try:
            with fetched_output(path) as local:
                report, hists = dir_stats(local)
        except PackcliError as exc:
            from pathlib import Path

            if Path(path).exists() and not is_packed_output(path):
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
    console = _stdout()
    if len(reports) == 1:
        render.render_stats(console, paths[0], reports[0])
    else:
        render.render_compare(console, paths, reports)
    if plot:
        console.print(f"[dim]plot written to {plot}[/dim]")
    if html:
        console.print(f"[dim]page written to {html}[/dim]")


def _stats_raw(options, plot: str | None, json_output: bool) -> None:
    from packcli.cli import render
    from packcli.inspect.what_if import stats_raw

    if plot:  # fail before the work, not after it
        render.matplotlib_figure()
    with _progress() as progress:
        report = stats_raw(options, progress=progress)
    if plot:
        render.plot_what_if(plot, report)
    report.pop("_lengths")
    if json_output:
        sys.stdout.write(render.to_json(report))
        return
    console = _stdout()
    render.render_what_if(console, report)
    if plot:
        console.print(f"[dim]plot written to {plot}[/dim]")


SHOW = "Show"  # the panel of show's own options


@app.command(cls=PlainCommand)
def show(
    ctx: typer.Context,
    paths: Annotated[
        list[str],
        typer.Argument(
            help="A packed output directory (local or a URL), or raw input as for pack, with pack's input options.",
            show_default=False,
        ),
    ],
    row: Annotated[
        int | None, option(panel=SHOW, help="The row to show (raw input: the record). (default: the first)")
    ] = None,
    rows: Annotated[
        str | None, option(panel=SHOW, metavar="A:B", help="Rows A to B-1 (raw input: records; default: 0:5).")
    ] = None,
    random: Annotated[int | None, option(panel=SHOW, metavar="K", help="K rows picked at random (by --seed).")] = None,
    seed: Annotated[int, option(panel=SHOW, show_default=True, help="Seed of --random.")] = 0,
    tokens: Annotated[
        bool, option("--tokens", panel=SHOW, help="One token per line: position, id, text, label.")
    ] = False,
    learned_only: Annotated[
        bool,
        option(
            "--learned-only",
            panel=SHOW,
            help="Only the learned tokens' text (each run of other tokens shown as one ellipsis).",
        ),
    ] = False,
    color: Annotated[
        str,
        option(
            panel=SHOW,
            show_default=True,
            metavar=one_of(COLOR_CHOICES),
            help="Colour: on a terminal only (auto), always (for less -R), or never.",
        ),
    ] = "auto",
    no_color: Annotated[bool, option("--no-color", panel=SHOW, help="Plain text: the same as --color never.")] = False,
    html: Annotated[
        str | None,
        option(panel=SHOW, metavar="FILE", help="Also write one self-contained HTML page of the rows (and the stats)."),
    ] = None,
    json_output: Annotated[
        bool,
        option(
            "--json", panel=SHOW, help="Print the rows as JSON (ids, pieces, labels, positions, segments) on stdout."
        ),
    ] = False,
    text_field: TextField = None,
    prompt_field: PromptField = None,
    completion_field: CompletionField = None,
    messages_field: MessagesField = None,
    chat_template: ChatTemplate = None,
    train_on: TrainOn = "assistant",
    mask_reasoning: MaskReasoning = False,
    reasoning_open: ReasoningOpen = "<think>",
    reasoning_close: ReasoningClose = "</think>",
    chosen_field: ChosenField = None,
    rejected_field: RejectedField = None,
    weight_field: WeightField = None,
    default_weight: DefaultWeight = None,
    ids_field: IdsField = None,
    labels_field: LabelsField = None,
    on_bad_record: OnBadRecord = "fail",
    tokenizer: Tokenizer = None,
    tokenizer_backend: TokenizerBackend = "auto",
    parse_special_tokens: ParseSpecialTokens = False,
    bos: Bos = None,
    eos: Eos = True,
    eos_token: EosToken = None,
    pad_id: PadId = None,
    seq_len: Annotated[
        int | None,
        option("--seq-len", panel=PACKING, help="Raw input: the row length pack would use (--overlong applies)."),
    ] = None,
    buffer_size: BufferSize = None,
    group_by: GroupBy = None,
    max_sequences_per_row: MaxSequencesPerRow = None,
    overlong: Overlong = None,
    truncation_side: TruncationSide = None,
    keep_unlearned: KeepUnlearned = False,
    workers: Workers = None,
    no_cache: NoCache = False,
    debug: Debug = False,
) -> None:
    """Show rows as the model will see them: segments, learned tokens, positions, padding.

    On raw input (pack's input options, --tokenizer), the segments pack would make of the
    first records, with the reason for any record skipped, dropped or cut."""
    with _errors(debug):
        from packcli.core.options import check_choice

        check_choice("--color", color, COLOR_CHOICES)
        if no_color:
            if _on_command_line(ctx, "color") and color != "never":
                raise PackcliError(f"--no-color and --color {color}: give one", usage=True)
            color = "never"
        arguments = locals()
        given = [name for name in ("seq_len", *INPUT_OPTIONS) if name != "tokenizer" and _on_command_line(ctx, name)]
        _is_raw_input(paths, given, command="show")  # a mix, or raw-input options with a packed output: usage errors
        if all(_is_packed(path) for path in paths):
            if len(paths) > 1:
                raise PackcliError("show takes one packed output at a time", usage=True)
            _show_output(paths[0], row, rows, random, seed, tokenizer, (tokens, learned_only), color, html, json_output)
            return
        if random is not None:
            raise PackcliError(
                "--random: for packed outputs; on raw input pick records with --row or --rows", usage=True
            )
        _refuse_unfinished_output(paths, tokenizer, ids_field)
        options = pack_options(paths, arguments, output="", seq_len=seq_len or 0)
        _show_raw(options, row, rows, (tokens, learned_only), color, html, json_output)


def _refuse_unfinished_output(paths: list[str], tokenizer: str | None, ids_field: str | None) -> None:
    """A directory without a manifest and no tokenizer: an unfinished output, not raw input."""
    from pathlib import Path

    if tokenizer is None and ids_field is None and len(paths) == 1 and Path(paths[0]).is_dir():
        from packcli.write.manifest import split_outputs

        splits = split_outputs(paths[0])
        if splits:
            names = " or ".join(str(split) for split in splits)
            raise PackcliError(f"{paths[0]} holds the outputs of --holdout: show one of them, {names}", usage=True)
        raise PackcliError(
            f"{paths[0]}: no manifest.json, so this is not a complete packcli output "
            "(for raw input, give --tokenizer and the input options of pack)"
        )


def _show_output(
    path: str,
    row: int | None,
    rows: str | None,
    random: int | None,
    seed: int,
    tokenizer: str | None,
    modes: tuple[bool, bool],
    color: str,
    html: str | None,
    json_output: bool,
) -> None:
    """`modes`: --tokens, --learned-only."""
    from packcli.cli import show_render
    from packcli.inspect import show

    source = show.OutputSource(path)
    indices = show.parse_selection(row, rows, random, source.total_rows, seed)
    decoder = show.output_decoder(source.manifest, tokenizer, lambda line: sys.stderr.write(f"note: {line}\n"))
    views = list(show.read_views(source, indices))
    if html:
        from packcli.cli import show_html

        report = None
        if not storage_is_remote(path):
            from packcli.inspect.stats import dir_stats

            report = dir_stats(path)[0]
        show_html.write_page(html, f"packcli show {path}", views, decoder, report)
        sys.stderr.write(f"note: page written to {html}\n")
    if json_output:
        from packcli.cli import render

        sys.stdout.write(render.to_json([show.view_to_json(view, decoder) for view in views]))
        return
    show_render.print_views(show_render.console_for(color), views, decoder, modes[0], learned_only=modes[1])


def storage_is_remote(path: str) -> bool:
    from packcli.core.storage import is_remote

    return is_remote(path)


def _show_raw(
    options,
    row: int | None,
    rows: str | None,
    modes: tuple[bool, bool],
    color: str,
    html: str | None,
    json_output: bool,
) -> None:
    from packcli.cli import show_render
    from packcli.inspect import show
    from packcli.inspect.show_raw import raw_views

    if row is not None and rows is not None:
        raise PackcliError("--row and --rows: give one way to pick records", usage=True)
    if row is not None:
        start, stop = row, row + 1
    else:
        start, end = show.parse_range(rows or f"0:{show.DEFAULT_RECORDS}")
        stop = end if end is not None else 1 << 62
    shown = raw_views(options, start, stop)
    if not shown.views and not shown.bad:
        raise PackcliError(f"no records there: the input has none from record {start}")
    if html:
        from packcli.cli import show_html

        show_html.write_page(
            html, "packcli show " + " ".join(options.inputs), shown.views, shown.decoder, None, shown.bad
        )
        sys.stderr.write(f"note: page written to {html}\n")
    if json_output:
        from packcli.cli import render

        records = [show.view_to_json(view, shown.decoder) for view in shown.views]
        bad = [{"kind": "bad_record", **entry} for entry in shown.bad]
        sys.stdout.write(render.to_json(records + bad))
        return
    extra = [f"{entry['location']}: {entry['problem']} ({entry['pack']})" for entry in shown.bad]
    console = show_render.console_for(color)
    show_render.print_views(console, shown.views, shown.decoder, modes[0], extra, learned_only=modes[1])


@app.command(cls=PlainCommand)
def verify(
    path: Annotated[str, typer.Argument(help="A packed output directory.", metavar="DIR", show_default=False)],
    json_output: Json = False,
    debug: Debug = False,
) -> None:
    """Check every shard against the manifest and every row invariant; exit 1 on the first violation."""
    with _errors(debug):
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


export_app = typer.Typer(
    help="Write packed output in other training frameworks' formats.", no_args_is_help=True, cls=PlainGroup
)
app.add_typer(export_app, name="export")


@export_app.command("megatron", cls=PlainCommand)
def export_megatron_command(
    path: Annotated[str, typer.Argument(help="A packed output directory.", show_default=False)],
    prefix: Annotated[str, typer.Argument(help="Output prefix: writes PREFIX.bin and PREFIX.idx.", show_default=False)],
    dtype: Annotated[
        str | None,
        typer.Option(
            help="Token dtype in .bin: uint16 or int32. (default: uint16 if the vocabulary has under 65,500 tokens, as Megatron chooses)",
            show_default=False,
            rich_help_panel=OUTPUT,
        ),
    ] = None,
    json_output: Json = False,
    debug: Debug = False,
) -> None:
    """Write the Megatron-LM PREFIX.bin/PREFIX.idx pair (IndexedDataset), one document per sequence."""
    _export("megatron", debug, json_output, source=path, out=prefix, dtype=dtype)


Overwrite = Annotated[
    bool, typer.Option("--overwrite", help="Replace OUT if it exists and is not empty.", rich_help_panel=OUTPUT)
]
ExportSource = Annotated[str, typer.Argument(help="A packed output directory.", show_default=False)]
ExportOut = Annotated[
    str, typer.Argument(help="The directory to write (created; written whole or not at all).", show_default=False)
]


def _export(kind: str, debug: bool, json_output: bool, **options: Any) -> None:
    """Run one directory export with a progress bar on a terminal, then report it."""
    with _errors(debug):
        import importlib

        from packcli.cli import render
        from packcli.export.base import summary_line

        run = getattr(importlib.import_module(f"packcli.export.{kind}"), f"export_{kind}")
        with _progress("rows") as progress:
            summary = run(**options, progress=progress)
        for note in summary["notes"]:
            sys.stderr.write(f"note: {note}\n")
        if json_output:
            sys.stdout.write(render.to_json(summary))
            return
        print(summary_line(summary))


@export_app.command("mds", cls=PlainCommand)
def export_mds_command(
    path: ExportSource,
    out: ExportOut,
    compression: Annotated[
        str | None,
        typer.Option(
            help="Compress the shards (streaming decompresses them when read). (default: none)",
            metavar=one_of(("zstd", "br", "gz", "snappy", "bz2")),
            show_default=False,
            rich_help_panel=OUTPUT,
        ),
    ] = None,
    overwrite: Overwrite = False,
    json_output: Json = False,
    debug: Debug = False,
) -> None:
    """Write MosaicML Streaming (MDS) shards, one sample per row, for StreamingDataset (LLM Foundry, Composer)."""
    _export("mds", debug, json_output, source=path, out=out, compression=compression, overwrite=overwrite)


@export_app.command("energon", cls=PlainCommand)
def export_energon_command(
    path: ExportSource, out: ExportOut, overwrite: Overwrite = False, json_output: Json = False, debug: Debug = False
) -> None:
    """Write WebDataset tar shards with energon's .nv-meta index (CrudeWebdataset), one sample per row, for Megatron-Energon."""
    _export("energon", debug, json_output, source=path, out=out, overwrite=overwrite)


@export_app.command("nanotron", cls=PlainCommand)
def export_nanotron_command(
    path: ExportSource, out: ExportOut, overwrite: Overwrite = False, json_output: Json = False, debug: Debug = False
) -> None:
    """Write datatrove .ds token files (with .ds.index, and .ds.loss for masked labels), for nanotron and datatrove."""
    _export("nanotron", debug, json_output, source=path, out=out, overwrite=overwrite)


def main() -> None:
    from packcli.core.flow import exit_now, return_freed_memory
    from packcli.core.jit import own_process

    return_freed_memory()
    own_process()
    try:
        app()
    except SystemExit as stop:
        if not stop.code:  # a failed or stopped run ends as Python ends it: nothing to save there
            exit_now(0)
        raise
