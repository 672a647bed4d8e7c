"""User strategies (`--algorithm module:function` and callables in the API): the worked
example under docs/examples, and every check made before anything is written."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import load_rows, write_jsonl

from packcli.core.errors import PackcliError
from packcli.engine.memory import pack_sequences
from packcli.plan.strategy import load_strategy, place_custom

EXAMPLES = Path(__file__).resolve().parent.parent / "docs" / "examples"


@pytest.fixture
def in_examples(monkeypatch):
    monkeypatch.chdir(EXAMPLES)
    yield
    sys.modules.pop("conversation_packing", None)


def test_the_conversation_example_keeps_turns_together_and_in_order(tmp_path, packed, word_tokenizer, in_examples):
    rng = np.random.default_rng(0)
    records = []
    for turn in range(300):
        conversation = int(rng.integers(0, 12))
        words = " ".join(f"w{conversation * 10 + k}" for k in rng.integers(0, 10, size=int(rng.integers(1, 25))))
        records.append({"text": words, "conversation_id": f"c{conversation}", "turn": turn})
    path = write_jsonl(tmp_path / "turns.jsonl", records)
    out = packed(
        path,
        "--tokenizer",
        word_tokenizer,
        "--seq-len",
        64,
        "--group-by",
        "conversation_id",
        "--algorithm",
        "conversation_packing:pack",
        "--no-shuffle",
    )
    rows, manifest = load_rows(out)
    assert manifest["algorithm"] == "conversation_packing:pack"
    segments_in_order = []
    for r in range(len(rows)):
        cu = rows.cu_seqlens[rows.cu_offsets[r] : rows.cu_offsets[r + 1]]
        row = [rows.input_ids[r, cu[k] : cu[k + 1]].tolist() for k in range(int(rows.num_segments[r]))]
        assert len({(t - 4) // 10 for segment in row for t in segment if t != 1}) == 1  # one conversation per row
        segments_in_order += row
    by_conversation: dict[str, list[list[int]]] = {}
    for record in records:
        ids = [int(w[1:]) + 4 for w in record["text"].split()] + [1]
        by_conversation.setdefault(record["conversation_id"], []).append(ids)
    expected = [
        ids
        for conversation in dict.fromkeys(r["conversation_id"] for r in records)
        for ids in by_conversation[conversation]
    ]
    assert segments_in_order == expected  # rows of conversation 0 first, each in turn order


def test_the_python_api_takes_a_spec_or_a_callable(in_examples):
    sequences = [[5] * n for n in (3, 4, 2, 6, 1)]
    by_spec = pack_sequences(
        sequences, 8, algorithm="conversation_packing:pack", groups=["a", "b", "a", "b", "a"], shuffle=False
    )
    assert by_spec.row_group.tolist() == [0, 1, 1]
    assert [e["value"] for e in by_spec.report["groups"]] == ["a", "b"]
    by_callable = pack_sequences(sequences, 8, algorithm=lambda lengths, capacity, groups: np.arange(len(lengths)))
    assert by_callable.num_rows == 5


@pytest.mark.parametrize(
    "result, message",
    [
        ([[0, 1], [2, 9]], "row 1 holds sequence index 9, not in 0..3"),
        ([[0, 1], [1, 2, 3]], "row 1 holds sequence 1 again"),
        ([[0, 1], [2]], "sequence 3 is in no row"),
        ([[0, 1, 2], [3]], "row 0 holds 9 tokens, more than the capacity 8"),
        ([[0], [1, 2], [3]], "row 1 mixes groups 0 and 1"),
        ([[3], [0, 1, 2]], "row 1 holds 3 sequences, more than --max-sequences-per-row 2"),
        (np.array([0, 0, -1, 1]), "sequence 2 has row number -1"),
        (np.array([0, 1]), "returned 2 row numbers for 4 sequences"),
        ("rows", "returned str"),
    ],
)
def test_every_violation_is_one_error_naming_the_function_and_the_row(result, message):
    lengths = np.array([4, 3, 2, 5])
    groups = np.array([0, 0, 1, 1], dtype=np.int32) if "mixes" in message else None
    cap = 2 if "max-sequences" in message else None
    if "mixes" in message or "max-sequences" in message:
        lengths = np.array([1, 1, 1, 1])

    def strategy(lengths, capacity, groups):
        return result

    with pytest.raises(PackcliError, match="packing strategy .*strategy") as error:
        place_custom(strategy, lengths, 8, groups, cap)
    assert message in str(error.value)


def test_row_numbers_place_sequences_in_input_order():
    row, offset, n_rows, _ = place_custom(lambda *_: np.array([5, 2, 5, 2]), np.array([1, 2, 3, 4]), 8, None, None)
    assert (row.tolist(), offset.tolist(), n_rows) == ([1, 0, 1, 0], [0, 0, 1, 2], 2)


def test_import_failures_name_the_module_or_attribute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(PackcliError, match="cannot import module 'no_such_strategy'"):
        load_strategy("no_such_strategy:pack")
    (tmp_path / "my_strategy_mod.py").write_text("def pack(lengths, capacity, groups):\n    return [[0]]\n")
    with pytest.raises(PackcliError, match="module 'my_strategy_mod' has no attribute 'nope'"):
        load_strategy("my_strategy_mod:nope")
    sys.modules.pop("my_strategy_mod", None)


def test_a_bad_strategy_writes_nothing(tmp_path, cli, word_tokenizer, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "greedy_bad.py").write_text(
        "def pack(lengths, capacity, groups):\n    return [list(range(len(lengths)))]\n"
    )
    path = write_jsonl(tmp_path / "in.jsonl", [{"text": "w1 w2 w3 w4 w5"} for _ in range(10)])
    result = cli(
        "pack",
        path,
        "-o",
        tmp_path / "out",
        "--tokenizer",
        word_tokenizer,
        "--seq-len",
        8,
        "--algorithm",
        "greedy_bad:pack",
    )
    sys.modules.pop("greedy_bad", None)
    assert result.exit_code == 1
    assert "packing strategy greedy_bad:pack: row 0 holds 60 tokens, more than the capacity 8" in result.stderr
    assert not list((tmp_path / "out").glob("shard-*")) and not (tmp_path / "out" / "manifest.json").exists()


def test_usage_errors_for_a_malformed_spec(tmp_path, cli, word_tokenizer):
    path = write_jsonl(tmp_path / "in.jsonl", [{"text": "w1"}])
    result = cli(
        "pack", path, "-o", tmp_path / "out", "--tokenizer", word_tokenizer, "--seq-len", 8, "--algorithm", "a b:c"
    )
    assert result.exit_code == 2 and "module:function" in result.stderr
    result = cli(
        "pack",
        path,
        "-o",
        tmp_path / "out",
        "--tokenizer",
        word_tokenizer,
        "--seq-len",
        8,
        "--algorithm",
        "m:f",
        "--mode",
        "concat",
    )
    assert result.exit_code == 2 and "applies to bin mode" in result.stderr


def test_report_and_manifest_name_the_strategy(tmp_path, packed, word_tokenizer, in_examples):
    path = write_jsonl(tmp_path / "in.jsonl", [{"text": "w1 w2", "c": i % 3} for i in range(9)])
    out = packed(
        path,
        "--tokenizer",
        word_tokenizer,
        "--seq-len",
        8,
        "--group-by",
        "c",
        "--algorithm",
        "conversation_packing:pack",
    )
    report = json.loads((out / "report.json").read_text())
    assert report["algorithm"] == "conversation_packing:pack" and [g["rows"] for g in report["groups"]] == [2, 2, 2]
