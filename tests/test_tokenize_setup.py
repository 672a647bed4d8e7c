"""tokenize/setup.py: the sources of a mixture share one tokenizer, each with its own builder."""

from __future__ import annotations

from packcli.core.options import PackOptions
from packcli.tokenize import sequences
from packcli.tokenize.chat import ChatSequences
from packcli.tokenize.setup import setup_sources, setup_tokens


def options(tokenizer, **fields) -> PackOptions:
    return PackOptions(inputs=["x.jsonl"], output="out", tokenizer=str(tokenizer), seq_len=64, **fields)


def test_sources_share_one_tokenizer_with_a_builder_each(chatml_tokenizer):
    text, sft, chat = setup_sources(
        [
            options(chatml_tokenizer),
            options(chatml_tokenizer, prompt_field="q", completion_field="a"),
            options(chatml_tokenizer, messages_field="messages", chat_template=str(chatml_tokenizer / "chatml.jinja")),
        ]
    )
    assert text.tokenizer is sft.tokenizer is chat.tokenizer
    assert isinstance(text.builder, sequences.TextSequences)
    assert isinstance(sft.builder, sequences.PromptCompletionSequences)
    assert isinstance(chat.builder, ChatSequences)
    assert {s.eos_id for s in (text, sft, chat)} == {text.eos_id}
    assert text.fingerprint == chat.fingerprint


def test_one_source_is_the_plain_setup(word_tokenizer):
    (one,) = setup_sources([options(word_tokenizer)])
    plain = setup_tokens(options(word_tokenizer))
    assert (one.vocab_size, one.eos_id, one.pad_id, one.fingerprint) == (
        plain.vocab_size,
        plain.eos_id,
        plain.pad_id,
        plain.fingerprint,
    )
