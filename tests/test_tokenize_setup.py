"""tokenize/setup.py: the sources of a mixture share one tokenizer, each with its own builder."""

from __future__ import annotations

import numpy as np

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


def test_a_source_borrows_the_encoder_another_chose_where_it_serves(chatml_tokenizer):
    """A mixture's text sources share one encoder (one vocabulary in memory): the second
    source borrows the first's, and encodes exactly as an encoder of its own would."""
    from packcli.read.records import RecordBatch
    from packcli.tokenize.setup import Borrowed, choose_backend

    texts = ["hello world, say forged answers", "user assistant system: hello", "endoftext im_start"] * 5
    batch = RecordBatch("a.jsonl", "line", np.arange(1, len(texts) + 1), {"text": texts})
    first, second, alone = setup_sources([options(chatml_tokenizer) for _ in range(3)])
    choose_backend(options(chatml_tokenizer), first, batch, threads=1)
    assert first.encoder is not None and first.backend in ("tiktoken", "gigatoken")
    choose_backend(options(chatml_tokenizer), second, batch, threads=1, shared=first.encoder)
    assert isinstance(second.encoder, Borrowed) and second.encoder.owner is first.encoder
    assert second.backend == first.backend
    choose_backend(options(chatml_tokenizer), alone, batch, threads=1)
    assert not isinstance(alone.encoder, Borrowed)
    for got, want in zip(second.builder.encode(texts), alone.builder.encode(texts)):
        assert np.array_equal(got, want)
    second.close()  # a borrower closes nothing: the owner still encodes
    assert first.builder.encode(texts[:1])[0].size
    first.close()
    alone.close()
