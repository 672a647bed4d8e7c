"""cli/errors.py: a PackcliError, a signal or Ctrl-C ends a command as one line on stderr
and its exit code; --debug keeps the traceback; a signal after the manifest says complete."""

from __future__ import annotations

import subprocess
import sys

import pytest
import typer
from helpers import write_jsonl

from packcli.cli.errors import one_line_errors
from packcli.core.errors import Interrupted, PackcliError


def ended(capsys, error: BaseException, output: str | None = None) -> tuple[int, str]:
    """The exit code and stderr of `error` raised inside one_line_errors."""
    with pytest.raises(typer.Exit) as stop, one_line_errors(debug=False, output=output):
        raise error
    return stop.value.exit_code, capsys.readouterr().err


def test_a_packcli_error_is_one_line_and_exit_1_or_2_for_usage(capsys):
    assert ended(capsys, PackcliError("no such file")) == (1, "error: no such file\n")
    assert ended(capsys, PackcliError("--seq-len must be at least 1", usage=True)) == (
        2,
        "error: --seq-len must be at least 1\n",
    )


@pytest.fixture
def complete_output(packed, tmp_path, word_tokenizer) -> str:
    path = write_jsonl(tmp_path / "d.jsonl", [{"text": "w1 w2 w3"}] * 4)
    return str(packed(path, "--tokenizer", word_tokenizer, "--seq-len", 8))


def test_a_signal_says_whether_the_output_was_complete(capsys, complete_output, tmp_path):
    incomplete = Interrupted("SIGTERM", 15)
    code, err = ended(capsys, incomplete, output=str(tmp_path / "unfinished"))
    assert (code, err) == (143, f"error: {incomplete}\n") and "incomplete" in err
    code, err = ended(capsys, Interrupted("SIGTERM", 15), output=complete_output)
    assert code == 143 and err == f"error: {Interrupted('SIGTERM', 15, complete=True)}\n"
    code, err = ended(capsys, Interrupted("SIGTERM", 15), output="s3://bucket/out")  # a URL: not looked at
    assert code == 143 and err == f"error: {incomplete}\n"


def test_ctrl_c_is_told_as_sigint(capsys, complete_output, tmp_path):
    code, err = ended(capsys, KeyboardInterrupt(), output=str(tmp_path / "unfinished"))
    assert (code, err) == (130, f"error: {Interrupted('SIGINT', 2)}\n")
    code, err = ended(capsys, KeyboardInterrupt(), output=complete_output)
    assert (code, err) == (130, f"error: {Interrupted('SIGINT', 2, complete=True)}\n")
    told = KeyboardInterrupt()
    told.output_complete = True  # type: ignore[attr-defined]  # as the engine sets it after the manifest
    assert ended(capsys, told) == (130, f"error: {Interrupted('SIGINT', 2, complete=True)}\n")


def test_debug_lets_the_error_through_and_other_errors_pass_untouched(capsys):
    error = PackcliError("no such file")
    with pytest.raises(PackcliError) as raised, one_line_errors(debug=True):
        raise error
    assert raised.value is error
    with pytest.raises(ValueError, match="a bug"), one_line_errors(debug=False):
        raise ValueError("a bug")
    assert capsys.readouterr().err == ""


def test_debug_shows_the_traceback(tmp_path, word_tokenizer):
    args = [
        sys.executable,
        "-m",
        "packcli",
        "pack",
        str(tmp_path / "none.jsonl"),
        "-o",
        str(tmp_path / "o"),
        "--tokenizer",
        str(word_tokenizer),
        "--seq-len",
        "8",
    ]
    plain = subprocess.run(args, capture_output=True, text=True)
    assert plain.returncode == 1 and "Traceback" not in plain.stderr
    debug = subprocess.run(args + ["--debug"], capture_output=True, text=True)
    assert debug.returncode == 1 and "Traceback" in debug.stderr and "PackcliError" in debug.stderr
