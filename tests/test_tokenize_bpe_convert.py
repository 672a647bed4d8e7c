"""The conversion cache: one entry per tokenizer fingerprint, refusals included, rebuilt
when damaged. What converts and what is refused is tested through make_encoder in
tests/test_tokenize_fastbpe.py; the cache itself in tests/test_tokenize_cache.py."""

from __future__ import annotations

from packcli.tokenize import bpe_convert, fastbpe
from packcli.tokenize.tokenizer import BUNDLED_NAME, fingerprint, load_tokenizer


def test_conversion_is_cached_per_fingerprint(tmp_path, monkeypatch):
    tok = load_tokenizer(BUNDLED_NAME)
    fastbpe.make_encoder(tok, "auto", cache_dir=tmp_path)
    path = tmp_path / "tiktoken" / (fingerprint(tok).split(":")[1] + ".pkl")
    assert path.is_file()

    def no_conversion(_):
        raise AssertionError("converted again")

    monkeypatch.setattr(bpe_convert, "convert", no_conversion)
    assert fastbpe.make_encoder(tok, "auto", cache_dir=tmp_path).backend == "tiktoken"
    path.write_bytes(b"not a pickle")  # a damaged cache entry is rebuilt, not an error
    monkeypatch.undo()
    assert fastbpe.make_encoder(tok, "auto", cache_dir=tmp_path).backend == "tiktoken"
    assert path.read_bytes() != b"not a pickle"


def test_refusals_are_cached_too(word_tokenizer, tmp_path, monkeypatch):
    tok = load_tokenizer(str(word_tokenizer))
    first = bpe_convert.load_or_convert(tok, tmp_path)
    assert isinstance(first, str) and "not BPE" in first
    monkeypatch.setattr(bpe_convert, "convert", lambda _: (_ for _ in ()).throw(AssertionError("converted again")))
    assert bpe_convert.load_or_convert(tok, tmp_path) == first


def test_exact_only_for_merge_lists_made_from_ranks(tmp_path):
    """The bundled tokenizer's trained merge list has splits that are not merges: its
    identity is shown on probes and samples, not by construction."""
    conversion = bpe_convert.load_or_convert(load_tokenizer(BUNDLED_NAME), tmp_path)
    assert isinstance(conversion, bpe_convert.Conversion) and not conversion.exact
