"""pack_pairs and pack_sequences(sample_weights=...): the rows `packcli pack` writes for
the same pairs and weights, from token lists in memory."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import load_rows, random_texts, word_ids, write_jsonl

import packcli
from packcli.core.errors import PackcliError
from packcli.inspect.verify import check_rows

EOS = 1


def assert_same_rows(ours, theirs) -> None:
    for name in ("input_ids", "labels", "position_ids", "cu_seqlens", "cu_offsets", "num_segments"):
        assert np.array_equal(getattr(ours, name), getattr(theirs, name)), name
    assert sorted(ours.segment_columns) == sorted(theirs.segment_columns)
    for name, values in ours.segment_columns.items():
        assert np.array_equal(values, theirs.segment_columns[name]), name


@pytest.mark.parametrize("options", [{}, {"algorithm": "nf", "pad_to_multiple_of": 4}, {"mode": "concat"}])
def test_pack_pairs_gives_the_rows_of_pack(tmp_path, packed, word_tokenizer, options):
    texts = random_texts(150, seed=7, max_words=40)
    records = [{"p": texts[3 * i], "c": texts[3 * i + 1], "r": texts[3 * i + 2] + " w5", "w": i % 3} for i in range(50)]
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in options.items()]
    fields = ("--prompt-field", "p", "--chosen-field", "c", "--rejected-field", "r", "--weight-field", "w")
    out = packed(
        write_jsonl(tmp_path / "pairs.jsonl", records), "--tokenizer", word_tokenizer, "--seq-len", 64, *fields, *flags
    )
    rows, _ = load_rows(out)
    sides = {"chosen": [], "rejected": [], "chosen_labels": [], "rejected_labels": []}
    for record in records:
        prompt = word_ids(record["p"])
        for side, field in (("chosen", "c"), ("rejected", "r")):
            answer = word_ids(record[field]) + [EOS]
            sides[side].append(prompt + answer)
            sides[f"{side}_labels"].append([-100] * len(prompt) + answer)
    ours = packcli.pack_pairs(**sides, seq_len=64, sample_weights=[r["w"] for r in records], pad_id=EOS, **options)
    assert_same_rows(ours.rows, rows)
    check_rows(
        ours.rows, seq_len=64, pad_id=EOS, labels_follow_ids=False, pad_to_multiple_of=options.get("pad_to_multiple_of")
    )
    report = ours.report["pairs"]
    assert report["pairs"] == 50 - 17 - report["overlong_dropped"]  # weight 0 drops a pair
    placed = sorted(ours.placement["sequence"].tolist())  # each pair's index in the input
    assert len(placed) == report["pairs"] and set(placed) <= {i for i, r in enumerate(records) if r["w"]}


def test_sample_weights_give_the_rows_of_pack(tmp_path, packed, word_tokenizer):
    texts = random_texts(40, seed=2, max_words=30)
    weights = [0.5 * (i % 4) for i in range(40)]
    path = write_jsonl(tmp_path / "w.jsonl", [{"text": t, "w": w} for t, w in zip(texts, weights)])
    rows, _ = load_rows(packed(path, "--tokenizer", word_tokenizer, "--seq-len", 48, "--weight-field", "w"))
    ours = packcli.pack_sequences([word_ids(t) + [EOS] for t in texts], 48, pad_id=EOS, sample_weights=weights)
    assert_same_rows(ours.rows, rows)
    assert ours.report["zero_weight"] == 10


def test_bad_pairs_and_weights_are_refused():
    with pytest.raises(PackcliError, match="2 chosen sequences for 1 rejected"):
        packcli.pack_pairs([[1, 2], [3, 4]], [[1, 5]], 16)
    with pytest.raises(PackcliError, match="sample weight -1.0 of sequence 1 is not a finite number"):
        packcli.pack_pairs([[1, 2], [3, 4]], [[1, 5], [3, 6]], 16, sample_weights=[1, -1])
    with pytest.raises(PackcliError, match="max_sequences_per_row must be at least 2"):
        packcli.pack_pairs([[1, 2]], [[1, 5]], 16, max_sequences_per_row=1)
    with pytest.raises(PackcliError, match="overlong must be one of truncate, drop, error"):
        packcli.pack_pairs([[1, 2]], [[1, 5]], 16, overlong="split")
