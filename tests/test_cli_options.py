"""Option coercion without pydantic: the same values and errors as typer's own."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from helpers import packages_a_pack_imports, write_jsonl
from typer import _coercion
from typer._click import Context
from typer._click.exceptions import BadParameter

from packcli.cli.app import app
from packcli.cli.options import _PlainParam

ROOT = Path(__file__).resolve().parents[1]

TEXTS = ["x.jsonl", "", " a b ", "-", "日本", "12"]
NUMBERS = ["12", "-3", "007", "0", "+5", " 12", "12 ", "1_000", "1.0", "1.5", "0x10", "abc", "", "٣", "9" * 20]


def _params(command: str) -> dict:
    click_command = typer.main.get_command(app).commands[command]  # type: ignore[attr-defined]
    ctx = Context(click_command)
    return {param.name: (param, ctx) for param in click_command.get_params(ctx)}


def _coerced(runtime, value, param, ctx):
    try:
        return runtime.coerce(value, param=param, ctx=ctx)
    except BadParameter as exc:
        return f"error: {exc.message}"


@pytest.mark.parametrize(
    ("command", "name", "values"),
    [
        ("pack", "tokenizer", [*TEXTS, None]),
        ("pack", "seq_len", [*NUMBERS, 12, None]),
        ("pack", "seed", NUMBERS),
        ("pack", "eos", [True, False, "true", "no", "1", None]),
        ("pack", "bos", [True, None]),
        ("pack", "help", [False, None]),
        ("pack", "inputs", [tuple(TEXTS), ("a",), (), None]),
        ("stats", "seq_len", [("512", "1024"), ("12", "1.5"), ("abc",), (), None]),
    ],
)
def test_plain_coercion_gives_what_typers_adapters_give(command, name, values):
    param, ctx = _params(command)[name]
    assert isinstance(param._runtime_param, _PlainParam)
    typers = _coercion.build_runtime_param(param.type_descriptor)
    for value in values:
        assert _coerced(param._runtime_param, value, param, ctx) == _coerced(typers, value, param, ctx), value


def test_a_pack_run_imports_no_pydantic(tmp_path):
    corpus = write_jsonl(tmp_path / "in.jsonl", [{"text": f"doc {i}"} for i in range(5)])
    args = [corpus, "--tokenizer", "packcli:demo", "--seq-len", "64", "--seed", "3", "--workers", "1"]
    args += ["-o", tmp_path / "out"]
    assert packages_a_pack_imports(args, tmp_path / "cache", ("pydantic", "pydantic_core")) == []
    assert (tmp_path / "out" / "manifest.json").exists()
