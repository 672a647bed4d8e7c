"""Typer commands only: each takes its options (`Annotated`, the shared ones from
cli.options) and makes one call into the module that does the command's work
(cli.pack_command, cli.inspect_commands; the export group is cli.export_commands).

Those modules import heavy libraries only when a command runs, so `packcli --help` stays
instant. Core code raises PackcliError; cli.errors makes it one line on stderr and exit 1
(2 for usage errors), with the traceback only under --debug.
"""

from __future__ import annotations

from typing import Annotated

import typer

from packcli.cli import inspect_commands, pack_command
from packcli.cli.errors import one_line_errors
from packcli.cli.export_commands import export_app
from packcli.cli.inspect_commands import Display, Selection
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
    given_options,
    on_command_line,
    one_of,
    option,
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
    with one_line_errors(debug, output):
        pack_command.run(
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
            mix=mix,
            source=source,
            weight=weight,
            epochs=epochs,
            holdout=holdout,
            holdout_key=holdout_key,
            json_output=json_output,
        )


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
    with one_line_errors(debug):
        inspect_commands.stats(
            paths,
            locals(),
            given=given_options(ctx, "seq_len", "pad_to_multiple_of", *INPUT_OPTIONS),
            seq_lens=list(seq_len or []),
            pad_to_multiple_of=pad_to_multiple_of,
            batch_size=batch_size,
            plot=plot,
            html=html,
            json_output=json_output,
        )


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
    with one_line_errors(debug):
        inspect_commands.show(
            paths,
            locals(),
            given=given_options(ctx, "seq_len", *(name for name in INPUT_OPTIONS if name != "tokenizer")),
            seq_len=seq_len,
            selection=Selection(row=row, rows=rows, random=random, seed=seed),
            display=Display(tokens=tokens, learned_only=learned_only, color=color, html=html, json_output=json_output),
            no_color=no_color,
            color_given=on_command_line(ctx, "color"),
        )


@app.command(cls=PlainCommand)
def verify(
    path: Annotated[str, typer.Argument(help="A packed output directory.", metavar="DIR", show_default=False)],
    json_output: Json = False,
    debug: Debug = False,
) -> None:
    """Check every shard against the manifest and every row invariant; exit 1 on the first violation."""
    with one_line_errors(debug):
        inspect_commands.verify(path, json_output=json_output)


app.add_typer(export_app, name="export")


def main() -> None:
    """Runs the `packcli` executable: freed memory goes back to the system, numba loads no
    other package's extensions, and a command that succeeded ends without the
    interpreter's teardown (flow.exit_now)."""
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
