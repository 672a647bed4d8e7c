"""Preference pairs to sequences: two per pair, each side as SFT or chat would make it,
the prompt shared; a pair that is no pair refused with its reason, equal sides skipped."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import NO_MARKER_TEMPLATE

from packcli.core.options import PackOptions
from packcli.read.records import RecordBatch
from packcli.tokenize.sequences import IGNORE_INDEX
from packcli.tokenize.setup import setup_tokens


def batch(columns: dict) -> RecordBatch:
    n = len(next(iter(columns.values())))
    return RecordBatch("in.jsonl", "line", np.arange(1, n + 1), columns)


def sequences_of(result) -> list[tuple[list[int], list[int]]]:
    """(ids, labels) of every sequence of a SequenceBatch."""
    ends = np.cumsum(result.lengths)
    starts = ends - result.lengths
    return [(result.tokens[a:b].tolist(), result.labels[a:b].tolist()) for a, b in zip(starts, ends)]


def builder(tokenizer, **fields):
    opts = PackOptions(inputs=["x"], output="o", tokenizer=str(tokenizer), seq_len=512, **fields)
    opts.validate()
    return setup_tokens(opts).builder


def test_string_pairs_are_two_sft_sequences_with_one_prompt(word_tokenizer):
    prompts, chosen, rejected = ["w1 w2 w3", "w9"], ["w4 w5", "w7 w7 w7"], ["w6", "w8"]
    pairs = builder(word_tokenizer, prompt_field="p", chosen_field="c", rejected_field="r")
    result = pairs.build(batch({"p": prompts, "c": chosen, "r": rejected}))
    assert result.records.tolist() == [0, 0, 1, 1] and result.problems == [] and result.identical == []
    sft = builder(word_tokenizer, prompt_field="p", completion_field="q")
    for k, side in ((0, chosen), (1, rejected)):
        expected = sequences_of(sft.build(batch({"p": prompts, "q": side})))
        assert sequences_of(result)[k::2] == expected
    ids, labels = sequences_of(result)[0]
    assert labels[:3] == [IGNORE_INDEX] * 3 and labels[3:] == ids[3:]  # prompt masked; completion and EOS learned


CHAT = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hi?"},
    {"role": "assistant", "content": "Hello."},
    {"role": "user", "content": "And now?"},
]


@pytest.fixture
def template(tmp_path):
    path = tmp_path / "t.jinja"
    path.write_text(NO_MARKER_TEMPLATE)
    return str(path)


@pytest.mark.parametrize("form", ["prompt turns shared", "a prompt of messages"])
def test_pairs_in_messages_learn_the_completion_alone(form, template):
    good = {"role": "assistant", "content": "Good answer."}
    bad = {"role": "assistant", "content": "Bad."}
    if form == "prompt turns shared":
        pairs = builder("packcli:demo", chosen_field="c", rejected_field="r", chat_template=template)
        columns = {"c": [[*CHAT, good]], "r": [[*CHAT, bad]]}
    else:
        pairs = builder("packcli:demo", prompt_field="p", chosen_field="c", rejected_field="r", chat_template=template)
        columns = {"p": [CHAT], "c": [[good]], "r": [[bad]]}
    result = pairs.build(batch(columns))
    last = builder("packcli:demo", messages_field="m", chat_template=template, train_on="last")
    for k, side in enumerate((good, bad)):
        assert sequences_of(result)[k] == sequences_of(last.build(batch({"m": [[*CHAT, side]]})))[0]
    (c_ids, c_labels), (r_ids, r_labels) = sequences_of(result)
    prompt = next(i for i, label in enumerate(c_labels) if label != IGNORE_INDEX)
    assert c_ids[:prompt] == r_ids[:prompt] and all(label == IGNORE_INDEX for label in r_labels[:prompt])


def test_pairs_that_are_no_pairs_are_refused_or_skipped(template):
    pairs = builder("packcli:demo", chosen_field="c", rejected_field="r", chat_template=template)
    answer = {"role": "assistant", "content": "Yes."}
    records = {
        "c": [
            [*CHAT, answer],  # good
            [*CHAT[:2], answer],  # the prompts differ
            [*CHAT, {"role": "user", "content": "no completion"}],
            [*CHAT, {"role": "assistant", "content": ""}],  # an empty side
            [*CHAT, answer],  # the same on both sides
        ],
        "r": [
            [*CHAT, {"role": "assistant", "content": "No."}],
            [*CHAT, {"role": "assistant", "content": "No."}],
            [*CHAT, answer],
            [*CHAT, answer],
            [*CHAT, answer],
        ],
    }
    result = pairs.build(batch(records))
    assert result.records.tolist() == [0, 0] and result.identical == [4]
    reasons = {record: (reason, problem) for record, reason, problem in result.problems}
    assert sorted(reasons) == [1, 2, 3]
    assert reasons[1] == (
        "prompts differ",
        "the prompt turns of 'c' and 'r' differ (turn 2): a pair's two sides share everything but their last turn",
    )
    assert reasons[2][0] == "no completion" and "'c': its last turn is not an assistant's" in reasons[2][1]
    assert reasons[3] == ("empty side", "field 'c': the completion is empty")


def test_a_pair_in_two_forms_and_reasoning_in_strings_are_refused(word_tokenizer):
    pairs = builder(word_tokenizer, prompt_field="p", chosen_field="c", rejected_field="r")
    result = pairs.build(batch({"p": ["w1"], "c": [[{"role": "assistant", "content": "w2"}]], "r": ["w3"]}))
    ((record, reason, problem),) = result.problems
    assert (
        record == 0
        and reason == "mixed pair"
        and "give a pair's fields all as strings or all as message lists" in problem
    )
    masked = builder(word_tokenizer, prompt_field="p", chosen_field="c", rejected_field="r", mask_reasoning=True)
    ((_, reason, problem),) = masked.build(batch({"p": ["w1"], "c": ["w2"], "r": ["w3"]})).problems
    assert reason == "reasoning in text" and "give this pair as message lists" in problem


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"chosen_field": "c"}, "--chosen-field and --rejected-field go together"),
        ({"chosen_field": "c", "rejected_field": "c"}, "must name different fields"),
        ({"chosen_field": "c", "rejected_field": "r", "completion_field": "x"}, "conflicting field options"),
        ({"chosen_field": "c", "rejected_field": "r", "overlong": "split"}, "a pair is never cut"),
        ({"chosen_field": "c", "rejected_field": "r", "truncation_side": "right"}, "would cut a pair's completions"),
        ({"chosen_field": "c", "rejected_field": "r", "max_sequences_per_row": 1}, "a pair is two sequences"),
        ({"chosen_field": "c", "rejected_field": "r", "buffer_size": 10}, "planned over the whole input"),
        ({"chosen_field": "c", "rejected_field": "r", "train_on": "all"}, "a pair learns its two completions"),
        ({"text_field": "t", "default_weight": 1.0}, "--default-weight goes with --weight-field"),
        ({"text_field": "t", "weight_field": "w", "default_weight": -1.0}, "must be a non-negative number"),
        ({"text_field": "t", "weight_field": "t"}, "that field is the one tokenized"),
    ],
)
def test_usage_errors(fields, message):
    from packcli.core.errors import PackcliError

    opts = PackOptions(inputs=["x"], output="o", tokenizer="packcli:demo", seq_len=64, **fields)
    with pytest.raises(PackcliError, match=message) as raised:
        opts.validate()
    assert raised.value.usage


def test_reasoning_of_a_pair_in_messages_is_left_out(template):
    from packcli.tokenize.tokenizer import load_tokenizer

    pairs = builder("packcli:demo", chosen_field="c", rejected_field="r", chat_template=template, mask_reasoning=True)
    good = {"role": "assistant", "content": "<think>\nsum them\n</think>\n\nFive."}
    bad = {"role": "assistant", "content": "<think>\nguess\n</think>\n\nSix."}
    result = pairs.build(batch({"c": [[*CHAT, good]], "r": [[*CHAT, bad]]}))
    demo = load_tokenizer("packcli:demo", via_transformers=True)
    learned = [
        demo.decode([t for t, label in zip(ids, labels) if label != IGNORE_INDEX])
        for ids, labels in sequences_of(result)
    ]
    assert learned == ["\n\nFive.<|im_end|>\n<|endoftext|>", "\n\nSix.<|im_end|>\n<|endoftext|>"]
