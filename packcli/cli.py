"""Typer commands only: options in, one call into the core, report out.

Heavy libraries are imported inside the commands so `packcli --help` stays instant.
Core code raises PackcliError; here it becomes one line on stderr and exit 1 (2 for
usage errors), with the traceback only under --debug.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Annotated, Optional

import typer

from packcli import __version__
from packcli.errors import PackcliError

app = typer.Typer(
    name="packcli",
    help="Pack raw text corpora into training-ready token shards for causal language models.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

Debug = Annotated[bool, typer.Option("--debug", help="Show the full traceback on errors.")]
Json = Annotated[bool, typer.Option("--json", help="Print the report as JSON on stdout.")]


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
def _errors(debug: bool):
    try:
        yield
    except PackcliError as exc:
        if debug:
            raise
        sys.stderr.write(f"error: {exc}\n")
        raise typer.Exit(exc.exit_code) from None
    except KeyboardInterrupt:
        if debug:
            raise
        from packcli.errors import Interrupted

        sys.stderr.write(f"error: {Interrupted('SIGINT', 2)}\n")
        raise typer.Exit(130) from None


def _stdout():
    from rich.console import Console

    return Console(soft_wrap=False)


@app.command()
def pack(
    inputs: Annotated[list[str], typer.Argument(help="Files (.jsonl, .jsonl.gz, .jsonl.zst, .parquet), directories, globs, or - for JSONL on stdin.", show_default=False)],
    output: Annotated[str, typer.Option("--output", "-o", help="Output directory.", show_default=False)],
    seq_len: Annotated[int, typer.Option("--seq-len", help="Tokens per row.", show_default=False)],
    tokenizer: Annotated[Optional[str], typer.Option(help="Tokenizer directory, tokenizer.json, Hub name, or packcli:demo (bundled). Required except with --ids-field.", show_default=False)] = None,
    text_field: Annotated[Optional[str], typer.Option(help="Field holding plain text; every token is learned. (default: text)", show_default=False)] = None,
    prompt_field: Annotated[Optional[str], typer.Option(help="SFT: field of the prompt (its tokens get label -100).", show_default=False)] = None,
    completion_field: Annotated[Optional[str], typer.Option(help="SFT: field of the completion (learned, with EOS).", show_default=False)] = None,
    messages_field: Annotated[Optional[str], typer.Option(help="Chat: field with [{role, content}, ...] (or ShareGPT from/value), rendered with the chat template.", show_default=False)] = None,
    chat_template: Annotated[Optional[str], typer.Option(help="Chat: a Jinja template file to use instead of the tokenizer's.", show_default=False)] = None,
    train_on: Annotated[str, typer.Option(help="Chat: roles whose turns are learned, comma-separated (system, user, assistant, tool).")] = "assistant",
    ids_field: Annotated[Optional[str], typer.Option(help="Already tokenized input: field with a list of token ids.", show_default=False)] = None,
    labels_field: Annotated[Optional[str], typer.Option(help="With --ids-field: field with the labels (-100 = not learned).", show_default=False)] = None,
    mode: Annotated[str, typer.Option(help="bin: whole sequences per row; concat: EOS-joined stream cut into rows.")] = "bin",
    algorithm: Annotated[str, typer.Option(help="Bin packer: nf, ff, ffd, bfd, spfhp, lpfhp.")] = "bfd",
    remainder: Annotated[str, typer.Option(help="concat mode: pad or drop the last partial row.")] = "pad",
    buffer_size: Annotated[int, typer.Option(help="Sequences packed together per window (bounds memory).")] = 100_000,
    overlong: Annotated[Optional[str], typer.Option(help="Sequences longer than --seq-len: split, truncate, drop or error. (default: split for plain text, truncate for SFT/chat)", show_default=False)] = None,
    bos: Annotated[Optional[bool], typer.Option("--bos/--no-bos", help="Put BOS first. (default: as the tokenizer does)", show_default=False)] = None,
    eos: Annotated[bool, typer.Option("--eos/--no-eos", help="Append EOS to every document.")] = True,
    eos_token: Annotated[Optional[str], typer.Option(help="Token to use as EOS instead of the tokenizer's (an id number when there is no --tokenizer).", show_default=False)] = None,
    pad_id: Annotated[Optional[int], typer.Option(help="Padding token id. (default: the tokenizer's pad, else EOS)", show_default=False)] = None,
    format: Annotated[str, typer.Option("--format", help="Shard format: parquet or npy.")] = "parquet",
    rows_per_shard: Annotated[Optional[int], typer.Option(help="Rows per shard. (default: about 32M tokens per shard)", show_default=False)] = None,
    shuffle: Annotated[bool, typer.Option("--shuffle/--no-shuffle", help="Shuffle rows (deterministic, by --seed).")] = False,
    seed: Annotated[int, typer.Option(help="Seed for --shuffle.")] = 0,
    workers: Annotated[Optional[int], typer.Option(help="Tokenizer processes (tiktoken, chat) or threads (HF backend). (default: all cores)", show_default=False)] = None,
    tokenizer_backend: Annotated[str, typer.Option(help="auto: tiktoken where provably identical to the HF tokenizer, else hf; or force hf / tiktoken.")] = "auto",
    on_bad_record: Annotated[str, typer.Option(help="fail: stop at the first bad record; skip: count it and go on.")] = "fail",
    parse_special_tokens: Annotated[bool, typer.Option("--parse-special-tokens", help="Tokenize special-token strings in record text (<|endoftext|>, chat markup) as those tokens, not as text.")] = False,
    overwrite: Annotated[bool, typer.Option(help="Replace an existing packcli output in --output.")] = False,
    resume: Annotated[bool, typer.Option(help="Continue an interrupted run in --output (same inputs and options).")] = False,
    json_output: Json = False,
    debug: Debug = False,
) -> None:
    """Tokenize INPUT... and pack it into shards of rows of exactly --seq-len tokens."""
    with _errors(debug):
        from packcli.pipeline import PackOptions, run_pack

        options = PackOptions(
            inputs=list(inputs), output=output, tokenizer=tokenizer, seq_len=seq_len, text_field=text_field,
            prompt_field=prompt_field, completion_field=completion_field, messages_field=messages_field,
            chat_template=chat_template, train_on=train_on, ids_field=ids_field, labels_field=labels_field,
            mode=mode, algorithm=algorithm, remainder=remainder, buffer_size=buffer_size, overlong=overlong,
            bos=bos, eos=eos, eos_token=eos_token, pad_id=pad_id, format=format, rows_per_shard=rows_per_shard,
            shuffle=shuffle, seed=seed, workers=workers, tokenizer_backend=tokenizer_backend, on_bad_record=on_bad_record, overwrite=overwrite,
            resume=resume, parse_special_tokens=parse_special_tokens,
        )
        with _progress() as progress:
            report = run_pack(options, progress=progress)
        _show_report(report, f"packed into {output}", json_output)


@contextmanager
def _progress():
    """A live bar on stderr when it is a terminal (ETA when the input size is known); nothing otherwise."""
    if not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    columns = (
        BarColumn(bar_width=20),
        TextColumn("{task.fields[docs]:,} docs  {task.fields[tokens]:,} tokens  {task.fields[rate]:,.0f} tok/s"),
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
            bar.update(task, completed=done_bytes, total=total_bytes, rate=rate, **totals)

        yield advance


def _show_report(report: dict, title: str, json_output: bool) -> None:
    from packcli.report import render_table, to_json

    if json_output:
        sys.stdout.write(to_json(report))
    else:
        _stdout().print(render_table(report, title))


@app.command()
def stats(
    paths: Annotated[list[str], typer.Argument(help="Packed output directories (compared side by side when several), or raw input as for pack, with --tokenizer and --seq-len.", show_default=False)],
    tokenizer: Annotated[Optional[str], typer.Option(help="Raw input: tokenizer, as for pack.", show_default=False)] = None,
    seq_len: Annotated[Optional[list[int]], typer.Option("--seq-len", help="Raw input: tokens per row; repeat to compare several.", show_default=False)] = None,
    text_field: Annotated[str, typer.Option(help="Raw input: field holding plain text.")] = "text",
    batch_size: Annotated[int, typer.Option(help="Raw input: batch size of the pad-to-longest baseline.")] = 8,
    buffer_size: Annotated[int, typer.Option(help="Raw input: sequences packed together per window, as for pack.")] = 100_000,
    overlong: Annotated[Optional[str], typer.Option(help="Raw input: sequences longer than --seq-len: split, truncate, drop or error. (default: split)", show_default=False)] = None,
    bos: Annotated[Optional[bool], typer.Option("--bos/--no-bos", help="Raw input: put BOS first. (default: as the tokenizer does)", show_default=False)] = None,
    eos: Annotated[bool, typer.Option("--eos/--no-eos", help="Raw input: append EOS to every document.")] = True,
    eos_token: Annotated[Optional[str], typer.Option(help="Raw input: token to use as EOS instead of the tokenizer's.", show_default=False)] = None,
    workers: Annotated[Optional[int], typer.Option(help="Raw input: tokenizer threads. (default: all cores)", show_default=False)] = None,
    on_bad_record: Annotated[str, typer.Option(help="Raw input: fail at the first bad record, or skip and count it.")] = "fail",
    plot: Annotated[Optional[str], typer.Option("--plot", help="Also draw the distributions to this image file (.png, .svg, .pdf); needs matplotlib.", show_default=False)] = None,
    json_output: Json = False,
    debug: Debug = False,
) -> None:
    """Efficiency of packed output, recomputed from its shards; or, on raw input, what every packer would give."""
    with _errors(debug):
        from packcli.stats import is_packed_output

        packed = [is_packed_output(path) for path in paths]
        if any(packed) and not all(packed):
            raw = paths[packed.index(False)]
            raise PackcliError(
                f"{raw} is not a packed output but {paths[packed.index(True)]} is: stats takes packed "
                "output directories, or raw input with --tokenizer and --seq-len, not both", usage=True,
            )
        if all(packed):
            if tokenizer is not None or seq_len:
                raise PackcliError("--tokenizer and --seq-len are for raw input; to see what packing "
                                   f"{paths[0]} again would give, run stats on the raw input", usage=True)
            _stats_dirs(paths, plot, json_output)
        elif tokenizer is None and not seq_len:
            _stats_dirs(paths, plot, json_output)  # fails on the first path, with a hint
        else:
            from packcli.stats import WhatIfOptions

            if tokenizer is None:
                raise PackcliError("--tokenizer is needed for raw input", usage=True)
            options = WhatIfOptions(
                inputs=list(paths), tokenizer=tokenizer, seq_lens=list(seq_len or []), text_field=text_field,
                batch_size=batch_size, buffer_size=buffer_size, overlong=overlong, bos=bos, eos=eos,
                eos_token=eos_token, workers=workers, on_bad_record=on_bad_record,
            )
            _stats_raw(options, plot, json_output)


def _stats_dirs(paths: list[str], plot: Optional[str], json_output: bool) -> None:
    from packcli.report import to_json
    from packcli.stats import dir_stats, is_packed_output, plot_dirs, render_compare, render_stats

    reports, histograms = [], []
    for path in paths:
        try:
            report, hists = dir_stats(path)
        except PackcliError as exc:
            from pathlib import Path

            if Path(path).exists() and not is_packed_output(path):
                raise PackcliError(f"{exc}; for raw input, pass --tokenizer and --seq-len") from exc
            raise
        reports.append(report)
        histograms.append(hists)
    if plot:
        plot_dirs(plot, paths, histograms, reports)
    if json_output:
        sys.stdout.write(to_json(reports[0] if len(reports) == 1 else dict(zip(paths, reports))))
        return
    console = _stdout()
    if len(reports) == 1:
        render_stats(console, paths[0], reports[0])
    else:
        render_compare(console, paths, reports)
    if plot:
        console.print(f"[dim]plot written to {plot}[/dim]")


def _stats_raw(options, plot: Optional[str], json_output: bool) -> None:
    from packcli.report import to_json
    from packcli.stats import plot_what_if, render_what_if, stats_raw

    if plot:  # fail before the work, not after it
        from packcli.stats import matplotlib_figure

        matplotlib_figure()
    with _progress() as progress:
        report = stats_raw(options, progress=progress)
    if plot:
        plot_what_if(plot, report)
    report.pop("_lengths")
    if json_output:
        sys.stdout.write(to_json(report))
        return
    console = _stdout()
    render_what_if(console, report)
    if plot:
        console.print(f"[dim]plot written to {plot}[/dim]")


@app.command()
def verify(
    path: Annotated[str, typer.Argument(help="A packed output directory.", show_default=False)],
    json_output: Json = False,
    debug: Debug = False,
) -> None:
    """Check every shard against the manifest and every row invariant; exit 1 on the first violation."""
    with _errors(debug):
        from packcli.verify import verify_dir

        summary = verify_dir(path)
        if json_output:
            from packcli.report import to_json

            sys.stdout.write(to_json(summary))
            return
        rate = summary["bytes"] / summary["seconds"] if summary["seconds"] else 0.0
        speed = f"{rate / 1e9:.2f} GB/s" if rate >= 1e8 else f"{rate / 1e6:.1f} MB/s"
        print(
            f"ok: {path}: {summary['shards']} shard(s), {summary['rows']:,} rows, "
            f"{summary['sequences']:,} sequences, {summary['real_tokens']:,} real tokens "
            f"({summary['bytes'] / 1e6:.1f} MB checked at {speed})"
        )


export_app = typer.Typer(help="Write packed output in other training frameworks' formats.", no_args_is_help=True)
app.add_typer(export_app, name="export")


@export_app.command("megatron")
def export_megatron(
    path: Annotated[str, typer.Argument(help="A packed output directory.", show_default=False)],
    prefix: Annotated[str, typer.Argument(help="Output prefix: writes PREFIX.bin and PREFIX.idx.", show_default=False)],
    dtype: Annotated[Optional[str], typer.Option(help="Token dtype in .bin: uint16 or int32. (default: uint16 if the vocabulary has under 65,500 tokens, as Megatron chooses)", show_default=False)] = None,
    json_output: Json = False,
    debug: Debug = False,
) -> None:
    """Write the Megatron-LM PREFIX.bin/PREFIX.idx pair (IndexedDataset), one document per sequence."""
    with _errors(debug):
        from packcli.megatron import export_megatron as run_export

        summary = run_export(path, prefix, dtype=dtype)
        for note in summary["notes"]:
            sys.stderr.write(f"note: {note}\n")
        if json_output:
            from packcli.report import to_json

            sys.stdout.write(to_json(summary))
            return
        print(
            f"ok: wrote {summary['bin']} and {summary['idx']}: {summary['documents']:,} documents, "
            f"{summary['tokens']:,} tokens ({summary['dtype']})"
        )


def main() -> None:
    app()
