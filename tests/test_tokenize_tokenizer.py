"""Tokenizer loading, special ids, and the boundary-token helper."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from packcli.core.errors import PackcliError
from packcli.tokenize.tokenizer import (
    BUNDLED_NAME,
    add_boundary_tokens,
    encode_texts,
    fingerprint,
    load_tokenizer,
    resolve_special_ids,
)


@given(
    st.lists(st.lists(st.integers(5, 99), max_size=6), max_size=8),
    st.sampled_from([None, 1]),
    st.sampled_from([None, 2]),
)
def test_add_boundary_tokens_matches_list_version(sequences, bos, eos):
    flat = np.array([t for s in sequences for t in s], dtype=np.int32)
    lengths = np.array([len(s) for s in sequences], dtype=np.int64)
    out, new_lengths = add_boundary_tokens(flat, lengths, bos, eos)
    want = [([bos] if bos is not None else []) + s + ([eos] if eos is not None else []) for s in sequences]
    assert out.tolist() == [t for s in want for t in s]
    assert new_lengths.tolist() == [len(s) for s in want]


def test_encode_texts_equals_the_tokenizer(word_tokenizer):
    tokenizer = load_tokenizer(str(word_tokenizer))
    texts = ["w1 w2 w3", "w7", "w199 w0"]
    flat, lengths = encode_texts(tokenizer, texts)
    assert flat.dtype == np.int32 and lengths.tolist() == [3, 1, 2]
    assert flat.tolist() == [t for text in texts for t in tokenizer.encode(text, add_special_tokens=False)]


def test_bundled_tokenizer_loads_offline():
    tokenizer = load_tokenizer(BUNDLED_NAME, via_transformers=True)
    assert tokenizer.eos_token == "<|endoftext|>" and tokenizer.chat_template
    ids = resolve_special_ids(tokenizer, eos_token=None, pad_id=None, need_eos=True, need_bos=False)
    assert ids.pad_id == ids.eos_id == tokenizer.eos_token_id


def test_tokenizer_json_file_directly(word_tokenizer):
    from_file = load_tokenizer(str(word_tokenizer / "tokenizer.json"))
    from_dir = load_tokenizer(str(word_tokenizer))
    assert from_file.eos_token_id == from_dir.eos_token_id == 1
    assert fingerprint(from_file) == fingerprint(from_dir)


def test_fingerprint_tells_tokenizers_apart(word_tokenizer, big_tokenizer):
    assert fingerprint(load_tokenizer(str(word_tokenizer))) != fingerprint(load_tokenizer(str(big_tokenizer)))


def test_missing_bos_when_asked_for(word_tokenizer):
    tokenizer = load_tokenizer(str(word_tokenizer))
    with pytest.raises(PackcliError, match="no BOS token"):
        resolve_special_ids(tokenizer, eos_token=None, pad_id=None, need_eos=True, need_bos=True)


def test_tokenizer_json_truncation_is_switched_off(tmp_path, word_tokenizer):
    """A tokenizer saved with truncation must not cut documents behind packcli's back."""
    import shutil

    from tokenizers import Tokenizer

    directory = tmp_path / "truncating"
    shutil.copytree(word_tokenizer, directory)
    backend = Tokenizer.from_file(str(directory / "tokenizer.json"))
    backend.enable_truncation(max_length=2)
    backend.save(str(directory / "tokenizer.json"))
    _, lengths = encode_texts(load_tokenizer(str(directory)), ["w1 w2 w3 w4 w5"])
    assert lengths.tolist() == [5]


@pytest.mark.parametrize(
    "name", ["demo_tokenizer", "word_tokenizer", "big_tokenizer", "no_eos_tokenizer", "bos_tokenizer"]
)
def test_tokenizer_file_is_what_transformers_loads(request, name):
    from packcli.tokenize.tokenizer import TokenizerFile, adds_bos_by_default

    path = str(request.getfixturevalue(name))
    light, full = load_tokenizer(path), load_tokenizer(path, via_transformers=True)
    assert isinstance(light, TokenizerFile) and not isinstance(full, TokenizerFile)
    assert len(light) == len(full)
    assert fingerprint(light) == fingerprint(full)
    for key in ("eos_token", "bos_token", "pad_token", "unk_token"):
        assert getattr(light, key) == getattr(full, key), key
        assert getattr(light, key + "_id") == getattr(full, key + "_id"), key
    assert adds_bos_by_default(light) == adds_bos_by_default(full)
    texts = ["w1 w2 w3 w999", "", "Hello <|endoftext|> naïve 日本 </s> <s>", "  spaced\n\tout  "]
    for text in texts:
        for special in (True, False):
            assert light.encode(text, add_special_tokens=special) == full.encode(text, add_special_tokens=special)
    tokens = ["</s>", "<s>", "<pad>", "[UNK]", "<|endoftext|>", "w5", "not-a-token"]
    assert [i if i is not None else full.unk_token_id for i in light.convert_tokens_to_ids(tokens)] == [
        i if i is not None else full.unk_token_id for i in full.convert_tokens_to_ids(tokens)
    ]


@pytest.mark.parametrize(
    "change",
    [
        {"add_bos_token": True},
        {"tokenizer_class": "LlamaTokenizer"},
        {"add_prefix_space": True},
        {"eos_token": "w7"},  # in the vocabulary but not a special added token: transformers would add it
    ],
)
def test_configs_transformers_would_change_go_through_transformers(tmp_path, word_tokenizer, change):
    import json
    import shutil

    from packcli.tokenize.tokenizer import TokenizerFile

    path = tmp_path / "tok"
    shutil.copytree(word_tokenizer, path)
    config = json.loads((path / "tokenizer_config.json").read_text())
    (path / "tokenizer_config.json").write_text(json.dumps({**config, **change}))
    assert isinstance(load_tokenizer(str(word_tokenizer)), TokenizerFile)
    assert not isinstance(load_tokenizer(str(path)), TokenizerFile)


def test_special_token_strings_are_text_unless_parsed():
    from tokenizers import AddedToken

    tokenizer = load_tokenizer(BUNDLED_NAME)
    backend = tokenizer.backend_tokenizer
    backend.add_tokens([AddedToken("hello world", special=False, normalized=False)])
    word = backend.token_to_id("hello world")
    eot, im_start = backend.token_to_id("<|endoftext|>"), backend.token_to_id("<|im_start|>")
    text = "a<|endoftext|>b <|im_start|>hello world"
    as_text, _ = encode_texts(tokenizer, [text])
    parsed, _ = encode_texts(tokenizer, [text], parse_special_tokens=True)
    assert eot not in as_text and im_start not in as_text and word in as_text  # added words still match
    assert (
        parsed.tolist() == backend.encode(text, add_special_tokens=False).ids and eot in parsed and im_start in parsed
    )
    assert as_text[-1] == parsed[-1] == word
    assert backend.encode_special_tokens is False  # the tokenizer is left as it was
    assert tokenizer.encode("<|endoftext|>", add_special_tokens=False) == [eot]  # as transformers encodes


def test_special_token_finder_counts_records():
    from packcli.tokenize.tokenizer import SpecialTokenFinder, special_token_strings

    tokenizer = load_tokenizer(BUNDLED_NAME)
    assert special_token_strings(tokenizer) == ["<|endoftext|>", "<|im_end|>", "<|im_start|>", "<|startoftext|>"]
    finder = SpecialTokenFinder.of(tokenizer)
    prompts = ["plain", "x<|im_end|>", "<|endoftext", "ok"]
    completions = ["<|startoftext|>", "y<|im_end|>", "text|>", "fine"]
    assert finder.records_with(prompts) == 1
    assert finder.records_with(prompts, completions) == 2
    assert finder.found("a<|im_start|>") and not finder.found("<|im_start")
    assert SpecialTokenFinder([]).records_with(prompts) == 0
