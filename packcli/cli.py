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
        sys.stderr.write("interrupted: no manifest was written, the output is incomplete\n")
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
    text_field: Annotated[Optional[str], typer.Option(help="Field holding plain text; every token is learned. [default: text]", show_default=False)] = None,
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
    overlong: Annotated[Optional[str], typer.Option(help="Sequences longer than --seq-len: split, truncate, drop or error. [default: split for plain text, truncate for SFT/chat]", show_default=False)] = None,
    bos: Annotated[Optional[bool], typer.Option("--bos/--no-bos", help="Put BOS first. [default: as the tokenizer does]", show_default=False)] = None,
    eos: Annotated[bool, typer.Option("--eos/--no-eos", help="Append EOS to every document.")] = True,
    eos_token: Annotated[Optional[str], typer.Option(help="Token to use as EOS instead of the tokenizer's (an id number when there is no --tokenizer).", show_default=False)] = None,
    pad_id: Annotated[Optional[int], typer.Option(help="Padding token id. [default: the tokenizer's pad, else EOS]", show_default=False)] = None,
    format: Annotated[str, typer.Option("--format", help="Shard format: parquet or npy.")] = "parquet",
    rows_per_shard: Annotated[Optional[int], typer.Option(help="Rows per shard. [default: about 32M tokens per shard]", show_default=False)] = None,
    shuffle: Annotated[bool, typer.Option("--shuffle/--no-shuffle", help="Shuffle rows (deterministic, by --seed).")] = False,
    seed: Annotated[int, typer.Option(help="Seed for --shuffle and randomised packers.")] = 0,
    workers: Annotated[Optional[int], typer.Option(help="Tokenizer threads. [default: all cores]", show_default=False)] = None,
    on_bad_record: Annotated[str, typer.Option(help="fail: stop at the first bad record; skip: count it and go on.")] = "fail",
    overwrite: Annotated[bool, typer.Option(help="Replace an existing packcli output in --output.")] = False,
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
            shuffle=shuffle, seed=seed, workers=workers, on_bad_record=on_bad_record, overwrite=overwrite,
        )
        with _progress() as progress:
            report = run_pack(options, progress=progress)
        _show_report(report, f"packed into {output}", json_output)


@contextmanager
def _progress():
    """A live counter on stderr when it is a terminal; nothing otherwise."""
    if not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    columns = (SpinnerColumn(), TextColumn("{task.fields[docs]:,} documents, {task.fields[tokens]:,} tokens"), TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("pack", docs=0, tokens=0)
        totals = {"docs": 0, "tokens": 0}

        def advance(docs: int, tokens: int) -> None:
            totals["docs"] += docs
            totals["tokens"] += tokens
            bar.update(task, **totals)

        yield advance


def _show_report(report: dict, title: str, json_output: bool) -> None:
    from packcli.report import render_table, to_json

    if json_output:
        sys.stdout.write(to_json(report))
    else:
        _stdout().print(render_table(report, title))


@app.command()
def stats(
    paths: Annotated[list[str], typer.Argument(help="Packed output directories.", show_default=False)],
    json_output: Json = False,
    debug: Debug = False,
) -> None:
    """The efficiency report of packed output, recomputed from its shards."""
    with _errors(debug):
        from packcli.stats import stats_dir

        reports = [stats_dir(path) for path in paths]
        if json_output:
            from packcli.report import to_json

            sys.stdout.write(to_json(reports[0] if len(reports) == 1 else {p: r for p, r in zip(paths, reports)}))
            return
        from packcli.stats import render_stats

        console = _stdout()
        for path, report in zip(paths, reports):
            render_stats(console, path, report)


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
        rate = summary["bytes"] / summary["seconds"] / 1e9 if summary["seconds"] else 0.0
        print(
            f"ok: {path}: {summary['shards']} shard(s), {summary['rows']:,} rows, "
            f"{summary['sequences']:,} sequences, {summary['real_tokens']:,} real tokens "
            f"({summary['bytes'] / 1e6:.1f} MB checked at {rate:.2f} GB/s)"
        )


def main() -> None:
    app()
