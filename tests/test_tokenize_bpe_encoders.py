"""The encoders themselves (packcli/tokenize/bpe_encoders.py); which one a run gets, and
their ids against the tokenizer's, are tested through make_encoder in
tests/test_tokenize_fastbpe.py."""

from __future__ import annotations

import pytest

from packcli.tokenize.bpe_encoders import retried_while_borrowed


def test_only_a_borrow_is_retried():
    calls = []

    def borrowed_once(text):
        calls.append(text)
        if len(calls) == 1:
            raise RuntimeError("Already borrowed")
        return text.upper()

    assert retried_while_borrowed(borrowed_once)("ab") == "AB"
    assert calls == ["ab", "ab"]

    def broken(text):
        raise RuntimeError("a panic")

    with pytest.raises(RuntimeError, match="a panic"):
        retried_while_borrowed(broken)("ab")
