"""Every command's --help at 80 columns: nothing cut, no type metavars on flags, the same
panels for the options `pack` and `stats` share; every usage error one line, exit 2."""

from __future__ import annotations

import re

import pytest
import typer
from helpers import write_jsonl

from packcli.cli.app import app


def every_command():
    """(path, click command) for the root, each command and each export subcommand."""
    root = typer.main.get_command(app)
    found = [((), root)]
    for name, command in root.commands.items():
        found.append(((name,), command))
        for sub, subcommand in getattr(command, "commands", {}).items():
            found.append(((name, sub), subcommand))
    return found


COMMANDS = every_command()


@pytest.fixture
def at_80(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")


def panels_of(text: str) -> dict[str, str]:
    """Each option name and the panel heading above it."""
    panel, where = None, {}
    for line in text.splitlines():
        if re.fullmatch(r"[A-Z][A-Za-z ]*:", line):
            panel = line[:-1]
        for name in re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", line[:32] if line.startswith("  -") else ""):
            where.setdefault(name, panel)
    return where


@pytest.mark.parametrize("path, command", COMMANDS, ids=[" ".join(p) or "packcli" for p, _ in COMMANDS])
def test_help_fits_80_columns_and_cuts_nothing(cli, at_80, path, command):
    result = cli(*path, "--help")
    assert result.exit_code == 0, result.stderr
    text = result.stdout
    assert all(len(line) <= 80 for line in text.splitlines()), text
    assert "…" not in text and "<bool>" not in text and "<str>" not in text and "<int>" not in text
    usage = text.splitlines()[0]
    assert usage.startswith("Usage: ") and "{" not in usage
    if path in (("pack",), ("stats",)):  # --help stands with the run's options, not in a panel of its own
        assert "\nOptions:" not in text
    for param in command.params:
        for name in [*getattr(param, "opts", []), *getattr(param, "secondary_opts", [])]:
            if name.startswith("-") and not param.hidden:
                assert re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text), (name, text)
        if getattr(param, "is_flag", False):  # a flag takes no value, so none is shown
            for name in param.opts:
                assert not re.search(rf"(?<![\w-]){re.escape(name)} [A-Z<]", text), (name, text)


def test_pack_help_names_every_input_kind_and_the_right_extra(cli, at_80):
    text = " ".join(cli("pack", "--help").stdout.split())
    assert text.splitlines()[0].startswith("Usage:") and "INPUT..." in text
    for kind in (".jsonl", ".jsonl.gz", ".jsonl.zst", ".json,", ".parquet", ".arrow", "save_to_disk", "s3://", "hf://"):
        assert kind in text, kind
    assert "pip install 'packcli[ray]'" in text


def test_pack_and_stats_show_shared_options_in_the_same_panels(cli, at_80):
    pack = panels_of(cli("pack", "--help").stdout)
    stats = panels_of(cli("stats", "--help").stdout)
    shared = set(pack) & set(stats)
    assert {"--tokenizer", "--seq-len", "--pad-to-multiple-of", "--json", "--workers", "--help"} <= shared
    assert {name: pack[name] for name in shared} == {name: stats[name] for name in shared}
    assert None not in pack.values()


@pytest.mark.parametrize(
    "args, message",
    [
        (("--seq-lenn", "8"), "No such option: --seq-lenn"),
        (("--seq-len", "abc"), "Invalid value for '--seq-len'"),
        (("--seq-len", "8", "--workers", "two"), "Invalid value for '--workers'"),
        (("--seq-len", "8", "--mode"), "--mode"),
    ],
)
def test_every_usage_error_is_one_line_with_exit_2(tmp_path, cli, word_tokenizer, args, message):
    data = write_jsonl(tmp_path / "d.jsonl", [{"text": "w1"}])
    result = cli("pack", data, "-o", tmp_path / "o", "--tokenizer", word_tokenizer, *args)
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], result.stderr
    assert not (tmp_path / "o").exists()


def test_unknown_command_is_one_line(cli):
    result = cli("pakc")
    assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1
    assert result.stderr.startswith("error: No such command 'pakc'.")
