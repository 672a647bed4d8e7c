"""core/mixture.py: a mixture file and the inline form read into one MixSpec, and every
bad one refused with one line naming the file and line."""

from __future__ import annotations

import textwrap

import pytest

from packcli.core.errors import PackcliError
from packcli.core.mixture import MixSpec, SourceSpec, inline_mix, load_mix


def write(tmp_path, text: str):
    path = tmp_path / "mix.toml"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def test_a_file_reads_into_sources_in_order(tmp_path):
    path = write(
        tmp_path,
        """\
        seed = 7
        target_tokens = 1_000_000
        max_epochs = 4

        [[source]]
        name = "web"
        paths = ["web/*.jsonl", "s3://bucket/more.parquet"]
        weight = 0.7

        [[source]]
        name = "chat"
        paths = ["/abs/chat.jsonl"]
        messages_field = "messages"
        chat_template = "tpl.jinja"
        epochs = 2.5

        [[source]]
        name = "sft"
        paths = "gsm8k.jsonl"
        prompt_field = "question"
        completion_field = "answer"
        """,
    )
    spec = load_mix(path)
    assert (spec.seed, spec.target_tokens, spec.max_epochs, spec.origin) == (7, 1_000_000, 4.0, str(path))
    assert spec.names == ["web", "chat", "sft"]
    web, chat, sft = spec.sources
    assert web.paths == (str(tmp_path / "web/*.jsonl"), "s3://bucket/more.parquet")
    assert (web.weight, web.epochs, web.fixed_epochs) == (0.7, None, None)
    assert chat.paths == ("/abs/chat.jsonl",)
    assert chat.fields == {"messages_field": "messages", "chat_template": str(tmp_path / "tpl.jinja")}
    assert chat.fixed_epochs == 2.5
    assert sft.paths == (str(tmp_path / "gsm8k.jsonl"),) and sft.fixed_epochs == 1.0
    assert spec.to_dict()["sources"][2] == {
        "name": "sft",
        "paths": [str(tmp_path / "gsm8k.jsonl")],
        "weight": None,
        "epochs": None,
        "prompt_field": "question",
        "completion_field": "answer",
    }


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ('seed = 1\n[[source]]\nname = "a"\npaths = ["x"]\nweight = -1\n', 5, "source 'a': weight must be at least 0"),
        ('[[source]]\nname = "a"\npaths = ["x"]\nweight = "lots"\n', 4, "weight must be a number, not 'lots'"),
        ('[[source]]\nname = "a"\npaths = ["x"]\nweight = nan\n', 4, "must be a finite number"),
        ('[[source]]\nname = "a"\npaths = ["x"]\nweight = 1\nepochs = 2\n', 5, "weight and epochs exclude each other"),
        ('[[source]]\nname = "a"\npaths = ["x"]\ntext_feild = "t"\n', 4, "unknown key 'text_feild' in [[source]]"),
        (
            '[[source]]\nname = "a"\npaths = ["x"]\n[[source]]\nname = "a"\npaths = ["y"]\n',
            5,
            "two sources are named 'a'",
        ),
        ('[[source]]\nname = "a b"\npaths = ["x"]\n', 2, "needs a name of letters"),
        ('[[source]]\nname = "a"\npaths = []\n', 3, "paths must be a list"),
        ('target_tokens = 0\n[[source]]\nname = "a"\npaths = ["x"]\n', 1, "target_tokens must be at least 1"),
        ('max_epochs = 0\n[[source]]\nname = "a"\npaths = ["x"]\n', 1, "max_epochs must be positive"),
        ('sed = 1\n[[source]]\nname = "a"\npaths = ["x"]\n', 1, "unknown key 'sed'"),
        ('[[source]]\nname = "a"\npaths = ["x"\n', 3, ""),
        ('[[source]]\nname = "a"\npaths = ["x"]\nweight = \n', 4, ""),
    ],
)
def test_bad_files_are_one_line_naming_file_and_line(tmp_path, text, line, message):
    path = tmp_path / "mix.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(PackcliError) as caught:
        load_mix(path)
    error = caught.value
    assert error.usage
    assert str(error).startswith(f"{path}:{line}: ")
    assert message in str(error)
    assert "\n" not in str(error)


def test_a_file_without_sources_or_missing_is_refused(tmp_path):
    with pytest.raises(PackcliError, match="no such file"):
        load_mix(tmp_path / "absent.toml")
    with pytest.raises(PackcliError, match=r"no \[\[source\]\] tables"):
        load_mix(write(tmp_path, "seed = 1\n"))


def test_the_inline_form_makes_the_same_spec():
    spec = inline_mix(["web=a.jsonl", "code=c.jsonl", "web=b.jsonl"], ["web=0.7", "code=0.3"], [])
    assert spec == MixSpec(
        (SourceSpec("web", ("a.jsonl", "b.jsonl"), {}, 0.7, None), SourceSpec("code", ("c.jsonl",), {}, 0.3, None)),
        origin="--source",
    )
    assert inline_mix(["m=m.jsonl"], [], ["m=2.5"]).sources[0].fixed_epochs == 2.5


@pytest.mark.parametrize(
    ("sources", "weights", "epochs", "message"),
    [
        (["web"], [], [], "expected NAME=PATH"),
        (["web=a"], ["code=1"], [], "--weight code=1: no --source named 'code'"),
        (["web=a"], ["web=1"], ["web=2"], "--weight and --epochs exclude each other"),
        (["web=a"], ["web=-1"], [], "--weight web must be at least 0"),
        (["web=a"], ["web=x"], [], "--weight web must be a number"),
        (["web=a"], ["web=1", "web=2"], [], "--weight web: given twice"),
        (["web=a", "code=-"], [], [], "stdin"),
    ],
)
def test_bad_inline_mixtures_are_usage_errors(sources, weights, epochs, message):
    with pytest.raises(PackcliError, match=message) as caught:
        inline_mix(sources, weights, epochs)
    assert caught.value.usage
