"""Text, prompt/completion and ids input: the loss falls only on what the model should learn
to say, and record text stays text."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import (
    EOT,
    as_text,
    learned_text_per_segment,
    load_rows,
    real_segments,
    report_of,
    special_ids,
    write_jsonl,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from packcli.core.errors import PackcliError
from packcli.read.records import IdLists, RecordBatch
from packcli.tokenize.sequences import Boundaries, IdsSequences, from_lists, join_prompt_completion
from packcli.tokenize.tokenizer import load_tokenizer

PAIRS = [
    {"question": "What is 2 + 3?", "answer": " It is 5."},
    {"question": "Name a colour.\n", "answer": "Blue, like the sea."},
    {"question": "héllo wörld ✓", "answer": "ünïcode ✓ answer"},
    {"question": "def f():", "answer": "\n    return 1"},
]


def test_prompt_completion_learns_only_the_completion(tmp_path, packed, demo):
    path = write_jsonl(tmp_path / "sft.jsonl", PAIRS)
    out = packed(
        path,
        "--tokenizer",
        "packcli:demo",
        "--seq-len",
        256,
        "--algorithm",
        "nf",
        "--prompt-field",
        "question",
        "--completion-field",
        "answer",
    )
    rows, manifest = load_rows(out)
    assert learned_text_per_segment(rows, demo) == [p["answer"] + EOT for p in PAIRS]
    # the joined sequence is the prompt's tokens then the completion's: nothing merged at the seam
    want = [
        demo.encode(p["question"], add_special_tokens=False)
        + demo.encode(p["answer"], add_special_tokens=False)
        + [demo.eos_token_id]
        for p in PAIRS
    ]
    assert real_segments(rows) == want
    assert manifest["labels"] == "masked" and manifest["options"]["input"] == "prompt"
    report = json.loads((out / "report.json").read_text())
    assert report["label_tokens"] == sum(len(demo.encode(p["answer"], add_special_tokens=False)) + 1 for p in PAIRS)
    assert report["label_tokens"] < report["real_tokens"]


def test_prompt_completion_no_double_bos(tmp_path, packed, bos_tokenizer):
    path = write_jsonl(tmp_path / "sft.jsonl", [{"p": "<s> w1 w2", "c": "w3"}, {"p": "w4", "c": "w5 w6"}])
    rows, _ = load_rows(
        packed(
            path,
            "--tokenizer",
            bos_tokenizer,
            "--seq-len",
            16,
            "--algorithm",
            "nf",
            "--bos",
            "--prompt-field",
            "p",
            "--completion-field",
            "c",
        )
    )
    assert real_segments(rows) == [[2, 5, 6, 7, 1], [2, 8, 9, 10, 1]]
    assert rows.labels[0, :5].tolist() == [-100, -100, -100, 7, 1]


def test_ids_input_without_a_tokenizer(tmp_path, packed):
    records = [
        {"ids": [5, 6, 7], "labels": [-100, 6, 7]},
        {"ids": [8, 9], "labels": [-100, -100]},
        {"ids": [70000], "labels": [70000]},
    ]
    path = write_jsonl(tmp_path / "ids.jsonl", records)
    out = packed(
        path,
        "--ids-field",
        "ids",
        "--labels-field",
        "labels",
        "--seq-len",
        8,
        "--algorithm",
        "nf",
        "--eos-token",
        "2",
        "--format",
        "npy",
        "--keep-unlearned",  # the second record learns nothing
        "--no-shuffle",  # nf keeps the input order; the rows stay in it
    )
    rows, manifest = load_rows(out)
    segments = real_segments(rows)
    assert segments == [[5, 6, 7, 2], [8, 9, 2], [70000, 2]]
    # the EOS after learned tokens is learned; after unlearned ones it is not
    assert rows.labels[0].tolist()[:7] == [-100, 6, 7, 2, -100, -100, -100]
    assert np.load(out / "shard-00000" / "input_ids.npy").dtype == np.uint32
    assert manifest["tokenizer"]["vocab_size"] is None and manifest["tokenizer"]["pad_id"] == 2


def test_ids_input_plain_labels(tmp_path, packed):
    path = write_jsonl(tmp_path / "ids.jsonl", [{"ids": [5, 6, 7]}, {"ids": [8]}])
    rows, manifest = load_rows(
        packed(path, "--ids-field", "ids", "--seq-len", 8, "--no-eos", "--pad-id", 0, "--algorithm", "nf")
    )
    assert rows.labels[0].tolist() == [-100, 6, 7, -100, -100, -100, -100, -100]
    assert manifest["labels"] == "text"


def _sft_report(out):
    report = json.loads((out / "report.json").read_text())
    lost = report["overlong"]["tokens_lost"] + (
        report["unlearned"]["tokens"] if report["unlearned"]["policy"] == "drop" else 0
    )
    assert report["tokens_read"] == report["real_tokens"] + lost  # nothing vanishes
    return report


TRUNCATED = [
    {"p": "w1 w2", "c": "w3 w4 w5 w6 w7 w8"},  # 2 + 6 + EOS = 9 > 6: the completion alone is longer than a row
    {"p": "w1 w2 w3 w4 w5 w6 w7", "c": "w8"},  # the prompt alone fills the row
    {"p": "w9", "c": "w10"},
]


def test_sft_truncation_keeps_the_completion_and_cuts_the_prompt(tmp_path, packed, word_tokenizer):
    path = write_jsonl(tmp_path / "sft.jsonl", TRUNCATED)
    options = ("--tokenizer", word_tokenizer, "--seq-len", 6, "--algorithm", "nf", "--no-shuffle")
    out = packed(path, *options, "--prompt-field", "p", "--completion-field", "c")
    rows, manifest = load_rows(out)
    # left: the prompt's start goes, the token before the completion stays (its label is masked);
    # a completion longer than the row keeps its start
    assert real_segments(rows) == [[6, 7, 8, 9, 10, 11], [8, 9, 10, 11, 12, 1], [13, 14, 1]]
    assert rows.labels[1].tolist() == [-100, -100, -100, -100, 12, 1]
    report = _sft_report(out)
    assert report["overlong"]["policy"] == "truncate" and manifest["options"]["overlong"] == "truncate"
    assert manifest["options"]["truncation_side"] == "left"
    assert report["overlong"]["count"] == 2 and report["overlong"]["tokens_lost"] == 3 + 3
    assert report["unlearned"]["sequences"] == 0 and report["overlong"]["dropped_without_labels"] == 0


def test_sft_right_truncation_drops_what_learns_nothing(tmp_path, packed, word_tokenizer):
    path = write_jsonl(tmp_path / "sft.jsonl", TRUNCATED)
    options = ("--tokenizer", word_tokenizer, "--seq-len", 6, "--algorithm", "nf", "--no-shuffle")
    fields = ("--prompt-field", "p", "--completion-field", "c", "--truncation-side", "right")
    out = packed(path, *options, *fields)
    assert real_segments(load_rows(out)[0]) == [[5, 6, 7, 8, 9, 10], [13, 14, 1]]
    report = _sft_report(out)
    assert report["overlong"]["dropped_without_labels"] == 1 and report["overlong"]["tokens_lost"] == 3 + 3
    assert report["unlearned"]["by_cause"]["truncated"] == {"sequences": 1, "tokens": 6}
    kept = packed(path, *options, *fields, "--keep-unlearned")
    assert real_segments(load_rows(kept)[0]) == [[5, 6, 7, 8, 9, 10], [5, 6, 7, 8, 9, 10], [13, 14, 1]]
    kept_report = _sft_report(kept)
    assert kept_report["unlearned"]["policy"] == "keep"
    assert kept_report["overlong"]["dropped_without_labels"] == 0  # kept, so not dropped


def test_long_prompt_never_makes_rows_without_labels(tmp_path, packed, word_tokenizer):
    """A 530-token prompt at --seq-len 128: split leaves no row that learns nothing, and
    truncate keeps the completion; every token is accounted for."""
    record = {"p": " ".join(f"w{k % 50 + 1}" for k in range(530)), "c": "w60 w61 w62"}
    path = write_jsonl(tmp_path / "sft.jsonl", [record])
    options = ("--tokenizer", word_tokenizer, "--seq-len", 128, "--prompt-field", "p", "--completion-field", "c")
    for overlong in ("split", "truncate"):
        out = packed(path, *options, "--overlong", overlong)
        rows, _ = load_rows(out)
        assert len(rows) == 1 and ((rows.labels != -100).sum(axis=1) > 0).all()
        assert [int(t) for t in rows.labels[0] if t != -100] == [64, 65, 66, 1]
        report = _sft_report(out)
        if overlong == "split":
            assert report["unlearned"]["by_cause"]["split_pieces"] == {"sequences": 4, "tokens": 512}
        else:
            assert report["overlong"]["tokens_lost"] == 534 - 128 and report["unlearned"]["tokens"] == 0


def test_sequences_with_no_label_are_dropped_and_counted(tmp_path, packed):
    records = [{"ids": [5, 6, 7], "labels": [-100, 6, 7]}, {"ids": [8, 9], "labels": [-100, -100]}]
    path = write_jsonl(tmp_path / "ids.jsonl", records)
    options = ("--ids-field", "ids", "--labels-field", "labels", "--seq-len", 8, "--eos-token", "2", "--no-shuffle")
    out = packed(path, *options)
    assert real_segments(load_rows(out)[0]) == [[5, 6, 7, 2]]
    report = _sft_report(out)
    assert report["unlearned"] == {
        "policy": "drop",
        "sequences": 1,
        "tokens": 3,
        "by_cause": {
            "no_labels": {"sequences": 1, "tokens": 3},
            "split_pieces": {"sequences": 0, "tokens": 0},
            "truncated": {"sequences": 0, "tokens": 0},
        },
        "examples": [f"{path}:2"],  # where the sequences with nothing to learn came from
    }


@pytest.mark.parametrize(
    "options, message",
    [
        (("--text-field", "a", "--prompt-field", "p", "--completion-field", "c"), "conflicting field options"),
        (("--messages-field", "m", "--ids-field", "i"), "conflicting field options"),
        (("--prompt-field", "p"), "go together"),
        (("--labels-field", "l"), "--labels-field goes with --ids-field"),
        (("--chat-template", "x.jinja"), "--chat-template goes with --messages-field"),
        (("--messages-field", "m", "--train-on", "robot"), "--train-on takes last or all, or roles"),
    ],
)
def test_conflicting_field_options(tmp_path, cli, word_tokenizer, options, message):
    path = write_jsonl(tmp_path / "d.jsonl", [{"text": "w1"}])
    result = cli("pack", path, "-o", tmp_path / "o", "--tokenizer", word_tokenizer, "--seq-len", 8, *options)
    assert result.exit_code == 2 and message in result.stderr


def test_tokenizer_required_except_for_ids(tmp_path, cli):
    path = write_jsonl(tmp_path / "d.jsonl", [{"text": "w1"}])
    result = cli("pack", path, "-o", tmp_path / "o", "--seq-len", 8)
    assert result.exit_code == 2 and "--tokenizer is required" in result.stderr


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.lists(st.integers(0, 6), max_size=5), st.lists(st.integers(0, 6), max_size=5)), max_size=6),
    st.sampled_from([None, 1]),
    st.sampled_from([None, 2]),
)
def test_vectorised_join_equals_the_list_rule(pairs, bos, eos):
    """join_prompt_completion is from_lists' rule, assembled with arrays."""
    bounds = Boundaries(bos, eos)
    prompts = np.array([t for p, _ in pairs for t in p], dtype=np.int32)
    completions = np.array([t for _, c in pairs for t in c], dtype=np.int32)
    p_lengths = np.array([len(p) for p, _ in pairs], dtype=np.int64)
    c_lengths = np.array([len(c) for _, c in pairs], dtype=np.int64)
    got = join_prompt_completion(prompts, p_lengths, completions, c_lengths, bounds)
    want = from_lists([p + c for p, c in pairs], [[-100] * len(p) + c for p, c in pairs], bounds)
    assert got.tokens.tolist() == want.tokens.tolist()
    assert got.lengths.tolist() == want.lengths.tolist()
    assert got.labels.tolist() == want.labels.tolist()


# ------------------------------------------------------------------ special-token strings in records


FORGING_TEXTS = [
    {"text": "a<|endoftext|>b <|im_start|>user\nhi<|im_end|>"},
    {"text": "plain words"},
    {"text": "<tool> is a word, <|im_end|>"},
]


@pytest.mark.parametrize("backend", ["hf", "tiktoken"])
def test_text_records_never_become_special_tokens(tmp_path, packed, chatml_tokenizer, backend):
    tok = load_tokenizer(str(chatml_tokenizer), via_transformers=True)
    path = write_jsonl(tmp_path / "d.jsonl", FORGING_TEXTS)
    options = ["--tokenizer", chatml_tokenizer, "--seq-len", 64, "--algorithm", "nf", "--tokenizer-backend", backend]
    out = packed(path, *options)
    rows, _ = load_rows(out)
    eos = tok.eos_token_id
    tool = tok.convert_tokens_to_ids("<tool>")
    want = [
        as_text(tok, FORGING_TEXTS[0]["text"]) + [eos],
        as_text(tok, "plain words") + [eos],
        [tool] + as_text(tok, " is a word, <|im_end|>") + [eos],
    ]  # a non-special added token still matches
    assert real_segments(rows) == want
    assert report_of(out)["tokenizer_backend"] == backend
    assert report_of(out)["documents"]["special_token_records"] == 2
    parsed = packed(path, *options, "--parse-special-tokens")
    rows, manifest = load_rows(parsed)
    assert real_segments(rows) == [tok.encode(r["text"], add_special_tokens=False) + [eos] for r in FORGING_TEXTS]
    first = real_segments(rows)[0]  # the old behaviour: the record wrote a boundary and a turn
    assert first[1] == eos and special_ids(tok, "<|im_start|>")[0] in first
    assert report_of(parsed)["documents"]["special_token_records"] == 2
    assert manifest["options"]["parse_special_tokens"] is True


def test_both_backends_give_the_same_rows(tmp_path, packed, chatml_tokenizer):
    path = write_jsonl(tmp_path / "d.jsonl", FORGING_TEXTS * 3)
    for extra in ([], ["--parse-special-tokens"]):
        outputs = [
            packed(path, "--tokenizer", chatml_tokenizer, "--seq-len", 32, "--tokenizer-backend", b, *extra)
            for b in ("hf", "tiktoken")
        ]
        assert [report_of(out)["tokenizer_backend"] for out in outputs] == ["hf", "tiktoken"]
        rows = [load_rows(out)[0] for out in outputs]
        assert np.array_equal(rows[0].input_ids, rows[1].input_ids) and np.array_equal(rows[0].labels, rows[1].labels)


@pytest.mark.parametrize("backend", ["hf", "tiktoken"])
def test_prompt_completion_records_are_text(tmp_path, packed, chatml_tokenizer, backend):
    tok = load_tokenizer(str(chatml_tokenizer), via_transformers=True)
    record = {"p": "say <|im_end|><|im_start|>assistant\n", "c": "forged<|endoftext|>"}
    path = write_jsonl(tmp_path / "sft.jsonl", [record])
    options = [
        "--tokenizer",
        chatml_tokenizer,
        "--seq-len",
        64,
        "--prompt-field",
        "p",
        "--completion-field",
        "c",
        "--tokenizer-backend",
        backend,
    ]
    out = packed(path, *options)
    rows, _ = load_rows(out)
    prompt, completion, eos = as_text(tok, record["p"]), as_text(tok, record["c"]), tok.eos_token_id
    assert real_segments(rows) == [prompt + completion + [eos]]  # the literal EOS is text: a real one is appended
    assert rows.labels[0, : len(prompt) + len(completion) + 1].tolist() == [-100] * len(prompt) + completion + [eos]
    assert report_of(out)["documents"]["special_token_records"] == 1
    rows, _ = load_rows(packed(path, *options, "--parse-special-tokens"))
    old = tok.encode(record["p"], add_special_tokens=False) + tok.encode(record["c"], add_special_tokens=False)
    assert real_segments(rows) == [old] and old[-1] == eos  # parsed, the completion already ends with EOS


def naive_ids_build(field, labels_field, bounds, batch):
    """The per-list reference: IdsSequences.build as a loop over Python lists and from_lists."""
    ids = [np.asarray(x, dtype=np.int64) for x in batch.columns[field]]
    if labels_field:
        labels = [np.asarray(x, dtype=np.int64) for x in batch.columns[labels_field]]
        for i, (a, b) in enumerate(zip(ids, labels)):
            if len(a) != len(b):
                raise PackcliError(f"{batch.location(i)}: {labels_field!r} has {len(b)} labels for {len(a)} ids")
    else:
        labels = [None] * len(ids)
    for i, seq in enumerate(ids):
        if len(seq) and (seq.min() < 0 or seq.max() > np.iinfo(np.int32).max):
            raise PackcliError(
                f"{batch.location(i)}: {field!r} holds {int(seq.min() if seq.min() < 0 else seq.max())}, not a token id"
            )
    result = from_lists(ids, labels, bounds)
    if not labels_field:
        result.labels = None
    return result


def ids_batch(id_lists, label_lists=None) -> RecordBatch:
    columns = {"ids": IdLists.concat([[np.asarray(x, dtype=np.int64) for x in id_lists]])}
    if label_lists is not None:
        columns["labels"] = IdLists.concat([[np.asarray(x, dtype=np.int64) for x in label_lists]])
    return RecordBatch("d.jsonl", "line", np.arange(1, len(id_lists) + 1), columns)


def assert_same(got, want):
    assert got.tokens.dtype == np.int32 and got.tokens.tolist() == want.tokens.tolist()
    assert got.lengths.tolist() == want.lengths.tolist()
    if want.labels is None:
        assert got.labels is None
    else:
        assert got.labels.dtype == np.int32 and got.labels.tolist() == want.labels.tolist()


@pytest.mark.parametrize("bos, eos", [(None, None), (1, None), (None, 2), (1, 2), (3, 3)])
@pytest.mark.parametrize("with_labels", [False, True])
def test_ids_build_equals_the_list_rule_on_fixed_input(bos, eos, with_labels):
    ids = [[5, 6, 7], [1, 9], [9, 2], [1], [2], [3], [70000], [], [1, 2]]
    labels = [[-100, 6, 7], [-100, 9], [9, -100], [-100], [2], [3], [70000], [], [-100, -100]]
    batch = ids_batch(ids, labels if with_labels else None)
    builder = IdsSequences("ids", "labels" if with_labels else None, Boundaries(bos, eos))
    assert_same(builder.build(batch), naive_ids_build("ids", builder.labels_field, builder.bounds, batch))


def test_ids_build_known_answer():
    batch = ids_batch([[5, 6, 7], [8, 9], [70000, 2]], [[-100, 6, 7], [-100, -100], [70000, 2]])
    got = IdsSequences("ids", "labels", Boundaries(None, 2)).build(batch)
    assert got.tokens.tolist() == [5, 6, 7, 2, 8, 9, 2, 70000, 2]
    assert got.lengths.tolist() == [4, 3, 2]
    # the EOS after a learned token is learned; after an unlearned one it is not; one already there stays
    assert got.labels.tolist() == [-100, 6, 7, 2, -100, -100, -100, 70000, 2]


id_lists = st.lists(st.lists(st.integers(0, 6), max_size=5), max_size=8)


@settings(max_examples=300, deadline=None)
@given(id_lists, st.data(), st.sampled_from([None, 1]), st.sampled_from([None, 2, 1]), st.booleans())
def test_vectorised_ids_build_equals_the_list_rule(ids, data, bos, eos, with_labels):
    labels = None
    if with_labels:
        labels = [
            data.draw(st.lists(st.sampled_from([-100, 0, 1, 2, 5]), min_size=len(x), max_size=len(x))) for x in ids
        ]
    batch = ids_batch(ids, labels)
    bounds = Boundaries(bos, eos)
    builder = IdsSequences("ids", "labels" if with_labels else None, bounds)
    assert_same(builder.build(batch), naive_ids_build("ids", builder.labels_field, bounds, batch))


def test_ids_build_accepts_lists_of_arrays_too():
    batch = RecordBatch("d.jsonl", "line", np.array([1, 2]), {"ids": [np.array([4, 5]), np.array([6])]})
    got = IdsSequences("ids", None, Boundaries(None, 2)).build(batch)
    assert got.tokens.tolist() == [4, 5, 2, 6, 2] and got.labels is None


def test_ids_build_reads_offsets_that_do_not_start_at_zero():
    column = IdLists(np.array([99, 4, 5, 6, 99], dtype=np.int64), np.array([1, 3, 4]))
    batch = RecordBatch("d.parquet", "row", np.array([0, 1]), {"ids": column})
    assert IdsSequences("ids", None, Boundaries(None, None)).build(batch).tokens.tolist() == [4, 5, 6]


@pytest.mark.parametrize(
    "ids, message",
    [
        ([[1, 2], [3, -1, 7]], "d.jsonl:2: 'ids' holds -1, not a token id"),
        ([[1, 2], [3, 2**31, 7], [-5]], "d.jsonl:2: 'ids' holds 2147483648, not a token id"),
        ([[2**40], [1]], "d.jsonl:1: 'ids' holds 1099511627776, not a token id"),
    ],
)
def test_ids_out_of_range_name_the_record(ids, message):
    batch = ids_batch(ids)
    builder = IdsSequences("ids", None, Boundaries(None, 2))
    with pytest.raises(PackcliError) as want:
        naive_ids_build("ids", None, builder.bounds, batch)
    with pytest.raises(PackcliError) as got:
        builder.build(batch)
    assert str(got.value) == str(want.value) == message


def test_labels_must_match_ids_in_length():
    batch = ids_batch([[1, 2], [3, 4]], [[1, 2], [3]])
    with pytest.raises(PackcliError, match=r"^d.jsonl:2: 'labels' has 1 labels for 2 ids$"):
        IdsSequences("ids", "labels", Boundaries(None, 2)).build(batch)


def test_labels_beyond_int32_are_refused_not_wrapped():
    batch = ids_batch([[1, 2], [3, 4]], [[1, 2], [3, 2**32 - 100]])
    with pytest.raises(PackcliError, match=r"^d.jsonl:2: 'labels' holds 4294967196, not a label$"):
        IdsSequences("ids", "labels", Boundaries(None, 2)).build(batch)


def test_eos_id_beyond_int32_is_refused():
    batch = ids_batch([[1, 2]])
    with pytest.raises(PackcliError, match=r"token id 4294967296 is not a valid id"):
        IdsSequences("ids", None, Boundaries(None, 2**32)).build(batch)
