"""The `packcli export` group: one Typer command per format, each handing its options to
that format's exporter (packcli.export.<format>.export_<format>), run under a progress bar
and reported in one line (or JSON with --json).
"""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer

from packcli.cli.console import note, progress
from packcli.cli.errors import one_line_errors
from packcli.cli.options import OUTPUT, Debug, Json, PlainCommand, PlainGroup, one_of

export_app = typer.Typer(
    help="Write packed output in other training frameworks' formats.", no_args_is_help=True, cls=PlainGroup
)

Overwrite = Annotated[
    bool, typer.Option("--overwrite", help="Replace OUT if it exists and is not empty.", rich_help_panel=OUTPUT)
]
ExportSource = Annotated[str, typer.Argument(help="A packed output directory.", show_default=False)]
ExportOut = Annotated[
    str, typer.Argument(help="The directory to write (created; written whole or not at all).", show_default=False)
]


@export_app.command("megatron", cls=PlainCommand)
def export_megatron_command(
    path: ExportSource,
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
    _export("megatron", source=path, out=prefix, dtype=dtype, debug=debug, json_output=json_output)


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
    _export(
        "mds", source=path, out=out, compression=compression, overwrite=overwrite, debug=debug, json_output=json_output
    )


@export_app.command("energon", cls=PlainCommand)
def export_energon_command(
    path: ExportSource, out: ExportOut, overwrite: Overwrite = False, json_output: Json = False, debug: Debug = False
) -> None:
    """Write WebDataset tar shards with energon's .nv-meta index (CrudeWebdataset), one sample per row, for Megatron-Energon."""
    _export("energon", source=path, out=out, overwrite=overwrite, debug=debug, json_output=json_output)


@export_app.command("nanotron", cls=PlainCommand)
def export_nanotron_command(
    path: ExportSource, out: ExportOut, overwrite: Overwrite = False, json_output: Json = False, debug: Debug = False
) -> None:
    """Write datatrove .ds token files (with .ds.index, and .ds.loss for masked labels), for nanotron and datatrove."""
    _export("nanotron", source=path, out=out, overwrite=overwrite, debug=debug, json_output=json_output)


def _export(kind: str, *, debug: bool, json_output: bool, **options: Any) -> None:
    """Run one directory export with a progress bar on a terminal, then report it."""
    with one_line_errors(debug):
        import importlib

        from packcli.cli import render
        from packcli.export.base import summary_line

        run = getattr(importlib.import_module(f"packcli.export.{kind}"), f"export_{kind}")
        with progress("rows") as advance:
            summary = run(**options, progress=advance)
        for line in summary["notes"]:
            note(line)
        if json_output:
            sys.stdout.write(render.to_json(summary))
            return
        print(summary_line(summary))
