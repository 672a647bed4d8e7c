"""The tiktoken fast path gives exactly the Hugging Face tokenizer's ids, or is not used.

Tokenizers are built in the test (no downloads): the bundled one, a GPT-2-style
byte-level BPE trained here, and variants of it shaped like Llama 3 / Qwen (Split regex +
ByteLevel, ignore_merges, NFC, added tokens that are not special), GPT-2 with
add_prefix_space, and tokenizers that must stay on `hf`.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from helpers import byte_level_bpe
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from packcli.core.errors import PackcliError
from packcli.tokenize import bpe_convert, bpe_encoders, fastbpe
from packcli.tokenize import tokenizer as tokenizing
from packcli.tokenize.tokenizer import BUNDLED_NAME, encode_texts, load_tokenizer

QWEN_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
LLAMA3_PATTERN = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def _training_text() -> list[str]:
    """The project's own code and docs, plus some unicode: enough for a few thousand merges."""
    root = Path(__file__).resolve().parents[1]
    texts = [p.read_text(encoding="utf-8") for p in sorted((root / "packcli").glob("*.py"))]
    texts += [p.read_text(encoding="utf-8") for p in sorted((root / "docs").glob("*.md"))]
    texts += ["naïve café déjà vu Ångström 日本語のテキスト 中文文本 한국어 Русский текст 😀👍🏽 1234567890"] * 20
    return texts


@pytest.fixture(scope="module")
def gpt2_json() -> dict:
    """A GPT-2-style byte-level BPE (ByteLevel pre-tokenizer with its regex), trained here."""
    tok = byte_level_bpe(_training_text(), 3000, SPECIALS)
    return json.loads(tok.to_str())


def _save(spec: dict, path: Path, *, added: list[dict] | None = None) -> Path:
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer.from_str(json.dumps(spec))
    for extra in added or []:
        from tokenizers import AddedToken

        token = AddedToken(
            extra["content"],
            special=extra.get("special", False),
            normalized=extra.get("normalized", True),
            lstrip=extra.get("lstrip", False),
            rstrip=extra.get("rstrip", False),
        )
        (tok.add_special_tokens if extra.get("special") else tok.add_tokens)([token])
    PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>").save_pretrained(str(path))
    return path


def _variant(
    base: dict,
    *,
    pattern: str | None = None,
    ignore_merges: bool | None = None,
    normalizer=None,
    prefix_space: bool | None = None,
) -> dict:
    spec = json.loads(json.dumps(base))
    if pattern is not None:
        spec["pre_tokenizer"] = {
            "type": "Sequence",
            "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False},
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
            ],
        }
    if prefix_space is not None:
        spec["pre_tokenizer"]["add_prefix_space"] = prefix_space
    if ignore_merges is not None:
        spec["model"]["ignore_merges"] = ignore_merges
    if normalizer is not None:
        spec["normalizer"] = normalizer
    return spec


NON_SPECIAL = [
    {"content": "packcli", "normalized": True},
    {"content": " token", "normalized": False},
    {"content": "é!", "normalized": True},
]


@pytest.fixture(scope="module")
def tokenizer_root(tmp_path_factory) -> Path:
    """Where tokenizers_under_test are saved (each in the directory of its name)."""
    return tmp_path_factory.mktemp("fastbpe-tok")


@pytest.fixture(scope="module")
def tokenizers_under_test(gpt2_json, tokenizer_root) -> dict:
    """name -> loaded tokenizer, every one of which must convert."""
    root = tokenizer_root
    specs = {
        "gpt2": (_variant(gpt2_json), None),
        "gpt2-prefix-space": (_variant(gpt2_json, prefix_space=True), None),
        "qwen-style": (_variant(gpt2_json, pattern=QWEN_PATTERN, ignore_merges=True), NON_SPECIAL),
        "llama3-style-nfc": (
            _variant(gpt2_json, pattern=LLAMA3_PATTERN, ignore_merges=True, normalizer={"type": "NFC"}),
            NON_SPECIAL,
        ),
    }
    loaded = {"bundled": load_tokenizer(BUNDLED_NAME)}
    for name, (spec, added) in specs.items():
        loaded[name] = load_tokenizer(str(_save(spec, root / name, added=added)))
    ranked = _ranked_spec(loaded["gpt2"], QWEN_PATTERN, root / "ranks")
    loaded["qwen-ranked"] = load_tokenizer(str(_save(ranked, root / "qwen-ranked", added=NON_SPECIAL)))
    return loaded


def _ranked_spec(trained, pattern: str, workdir: Path) -> dict:
    """A tokenizer.json whose merge list is made from tiktoken ranks (as Qwen's is), with
    `pattern`: the trained tokenizer's ranks, keeping each token that byte-pair encoding
    by the ranks before it makes from exactly two (as in a real tiktoken vocabulary),
    through transformers' own TikTokenConverter."""
    import base64

    from transformers.convert_slow_tokenizer import TikTokenConverter

    conversion = bpe_convert.load_or_convert(trained, workdir)
    assert isinstance(conversion, bpe_convert.Conversion)
    kept: dict[bytes, int] = {}
    for token, _ in sorted(conversion.mergeable_ranks.items(), key=lambda item: item[1]):
        if len(token) == 1 or len(_rank_bpe(token, kept)) == 2:
            kept[token] = len(kept)
    workdir.mkdir(parents=True, exist_ok=True)
    ranks_file = workdir / "ranks.tiktoken"
    ranks_file.write_text("".join(f"{base64.b64encode(token).decode()} {rank}\n" for token, rank in kept.items()))

    class RankFileConverter(TikTokenConverter):
        @staticmethod
        def load_tiktoken_bpe(path):
            lines = Path(path).read_bytes().splitlines()
            return {base64.b64decode(token): int(rank) for token, rank in (line.split() for line in lines if line)}

    converter = RankFileConverter(vocab_file=str(ranks_file), pattern=pattern, extra_special_tokens=SPECIALS)
    return json.loads(converter.converted().to_str())


def _rank_bpe(word: bytes, ranks: dict[bytes, int]) -> list[bytes]:
    """tiktoken's byte-pair encoding: merge the adjacent pair of lowest rank until none is a token."""
    parts = [word[i : i + 1] for i in range(len(word))]
    while len(parts) > 1:
        pair_ranks = [ranks.get(a + b) for a, b in zip(parts, parts[1:])]
        known = [(r, i) for i, r in enumerate(pair_ranks) if r is not None]
        if not known:
            break
        _, i = min(known)
        parts[i : i + 2] = [parts[i] + parts[i + 1]]
    return parts


@pytest.fixture(scope="module")
def encoders(tokenizers_under_test, tmp_path_factory) -> dict:
    """(name, parse_special_tokens) -> (tokenizer, tiktoken encoder)."""
    cache = tmp_path_factory.mktemp("fastbpe-cache")
    out = {}
    for name, tok in tokenizers_under_test.items():
        for parse in (False, True):
            encoder = fastbpe.make_encoder(tok, "tiktoken", cache_dir=cache, threads=2, parse_special_tokens=parse)
            assert encoder.backend == "tiktoken" and encoder.reason is None, name
            assert encoder.parse_special_tokens is parse
            out[name, parse] = (tok, encoder)
    for parse in (False, True):  # auto takes gigatoken for the Qwen pattern and ranks like Qwen's
        tok = tokenizers_under_test["qwen-ranked"]
        encoder = fastbpe.make_encoder(tok, "auto", cache_dir=cache, threads=2, parse_special_tokens=parse)
        assert encoder.backend == "gigatoken" and encoder.reason is None
        out["qwen-ranked-gigatoken", parse] = (tok, encoder)
    return out


def _assert_identical(tokenizer, encoder, texts):
    want_flat, want_len = encode_texts(tokenizer, list(texts), encoder.parse_special_tokens)
    got_flat, got_len = encoder.encode_batch(list(texts))
    assert got_flat.dtype == np.int32 and got_len.dtype == np.int64
    if not (np.array_equal(want_len, got_len) and np.array_equal(want_flat, got_flat)):
        ends_w, ends_g = np.cumsum(want_len), np.cumsum(got_len)
        for i, text in enumerate(texts):
            a = want_flat[ends_w[i] - want_len[i] : ends_w[i]].tolist()
            b = got_flat[ends_g[i] - got_len[i] : ends_g[i]].tolist()
            assert a == b, f"text {i}: {text!r}"


NAMES = [
    "bundled",
    "gpt2",
    "gpt2-prefix-space",
    "qwen-style",
    "llama3-style-nfc",
    "qwen-ranked",
    "qwen-ranked-gigatoken",
]
PARSE = pytest.mark.parametrize("parse", [False, True], ids=["specials-as-text", "parse-specials"])


@PARSE
@pytest.mark.parametrize("name", NAMES)
def test_hard_strings_identical(encoders, name, parse):
    tok, encoder = encoders[name, parse]
    _assert_identical(tok, encoder, fastbpe.hard_strings(tok))


@pytest.mark.parametrize("name", NAMES)
def test_training_text_identical(encoders, name):
    tok, encoder = encoders[name, False]
    texts = _training_text()
    _assert_identical(tok, encoder, texts + [t[i:] for t in texts[:5] for i in (1, 2, 3)])


FRAGMENTS = (
    SPECIALS
    + [c["content"] for c in NON_SPECIAL]
    + [
        "<|im_",
        "|>",
        " ",
        "  ",
        "\n",
        "\r\n",
        "\t",
        "'s",
        "'LL",
        "é",
        "e\u0301",
        ">\u0338",
        "\u212b",
        "ﬁ",
        "ſ",
        "123",
        "x",
        "Hello",
        " world",
        "日本",
        "😀",
        "\u200d",
        "\u00a0",
        "packcli",
        "token",
    ]
)
text_strategy = st.one_of(
    st.text(max_size=80),
    st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=6)), max_size=25).map("".join),
)


@PARSE
@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(texts=st.lists(text_strategy, min_size=1, max_size=8))
def test_random_text_identical(encoders, name, parse, texts):
    tok, encoder = encoders[name, parse]
    _assert_identical(tok, encoder, texts)


def test_threads_and_batching_do_not_change_ids(tokenizers_under_test, tmp_path):
    tok = tokenizers_under_test["qwen-style"]
    texts = _training_text() * 3 + ["", "<|im_end|>"]
    one = fastbpe.make_encoder(tok, "tiktoken", cache_dir=tmp_path, threads=1)
    three = fastbpe.make_encoder(tok, "tiktoken", cache_dir=tmp_path, threads=3)
    a, b = one.encode_batch(texts), three.encode_batch(texts)
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    empty_flat, empty_len = three.encode_batch([])
    assert len(empty_flat) == 0 and len(empty_len) == 0


def test_auto_picks_tiktoken_when_identical(tokenizers_under_test, tmp_path):
    tok = tokenizers_under_test["gpt2"]
    encoder = fastbpe.make_encoder(tok, "auto", _training_text(), cache_dir=tmp_path)
    assert encoder.backend == "tiktoken" and encoder.reason is None


def test_hf_backend_is_the_plain_path(tokenizers_under_test):
    tok = tokenizers_under_test["gpt2"]
    encoder = fastbpe.make_encoder(tok, "hf")
    assert encoder.backend == "hf" and encoder.reason is None
    _assert_identical(tok, encoder, ["a b", "<|im_end|>x"])


def test_unknown_backend_is_a_usage_error(tokenizers_under_test):
    with pytest.raises(PackcliError, match="--tokenizer-backend must be one of") as err:
        fastbpe.make_encoder(tokenizers_under_test["gpt2"], "fast")
    assert err.value.usage


@pytest.mark.parametrize("name", ["gpt2", "qwen-ranked-gigatoken"])
def test_lone_surrogate_behaves_as_hf(encoders, name):
    tok, encoder = encoders[name, False]
    with pytest.raises(Exception) as want:
        encode_texts(tok, ["a\ud800b"])
    with pytest.raises(Exception) as got:
        encoder.encode_batch(["ok", "a\ud800b"])
    assert type(got.value) is type(want.value)
    assert str(got.value) == str(want.value)  # the tokenizer's own error: the text went to hf


# ------------------------------------------------------------------ gigatoken


def test_gigatoken_needs_the_exact_qwen2_pattern_and_ranks(tokenizers_under_test, tmp_path):
    """Only a pattern equal, as a string, to the one gigatoken's scheme implements: Llama 3's
    differs from Qwen's by `\\p{N}{1,3}` and GPT-2's by far more; both stay on tiktoken, as
    does the Qwen pattern over a trained merge list (gigatoken rebuilds merges from ranks)."""
    assert QWEN_PATTERN == bpe_encoders.QWEN2_PATTERN
    for name in ("bundled", "gpt2", "llama3-style-nfc", "qwen-style"):
        encoder = fastbpe.make_encoder(tokenizers_under_test[name], "auto", cache_dir=tmp_path)
        assert encoder.backend == "tiktoken" and encoder.reason is None, name
    conversion = bpe_convert.load_or_convert(tokenizers_under_test["llama3-style-nfc"], tmp_path)
    with pytest.raises(bpe_encoders.GigatokenUnavailable, match="no scheme"):
        bpe_encoders.GigatokenEncoder(tokenizers_under_test["llama3-style-nfc"], conversion)
    conversion = bpe_convert.load_or_convert(tokenizers_under_test["qwen-style"], tmp_path)
    with pytest.raises(bpe_encoders.GigatokenUnavailable, match="merge list was made from"):
        bpe_encoders.GigatokenEncoder(tokenizers_under_test["qwen-style"], conversion)


def test_ranks_gigatoken_refuses_are_a_reason_not_a_crash(tokenizers_under_test, tmp_path, capfd):
    """gigatoken panics on ranks it cannot rebuild merges from: a reason, and nothing on stderr."""
    conversion = bpe_convert.load_or_convert(tokenizers_under_test["qwen-style"], tmp_path)
    conversion.exact = True  # claimed, not true: a trained merge list
    with pytest.raises(bpe_encoders.GigatokenUnavailable, match="refused"):
        bpe_encoders.GigatokenEncoder(tokenizers_under_test["qwen-style"], conversion)
    assert capfd.readouterr().err == ""


def test_tiktoken_backend_never_takes_gigatoken(tokenizers_under_test, tmp_path):
    encoder = fastbpe.make_encoder(tokenizers_under_test["qwen-ranked"], "tiktoken", cache_dir=tmp_path)
    assert encoder.backend == "tiktoken"


def test_without_gigatoken_auto_is_tiktoken(tokenizers_under_test, tmp_path, monkeypatch):
    tok = tokenizers_under_test["qwen-ranked"]
    monkeypatch.setattr(fastbpe, "gigatoken_version", lambda: None)  # not installed
    encoder = fastbpe.make_encoder(tok, "auto", ["some text"], cache_dir=tmp_path)
    assert encoder.backend == "tiktoken" and encoder.reason is None
    monkeypatch.setattr(fastbpe, "gigatoken_version", lambda: "0.0-broken")
    monkeypatch.setitem(__import__("sys").modules, "gigatoken.gigatoken_rs", None)  # installed, not importable
    encoder = fastbpe.make_encoder(tok, "auto", ["some text"], cache_dir=tmp_path)
    assert encoder.backend == "tiktoken" and "gigatoken is not importable" in encoder.reason
    _assert_identical(tok, encoder, _training_text())


def test_a_gigatoken_difference_falls_back_to_tiktoken(tokenizers_under_test, tmp_path, monkeypatch):
    """gigatoken passes the same identity check as tiktoken; if it differs, tiktoken is
    checked and used, and the reason says why gigatoken was not."""
    tok = tokenizers_under_test["qwen-ranked"]
    real = fastbpe.GigatokenEncoder._ranks_encoder

    def off_by_one(self, conversion):
        encode = real(self, conversion)
        return lambda text: encode(text)[::-1] if len(text) > 3 else encode(text)  # wrong order on longer texts

    monkeypatch.setattr(fastbpe.GigatokenEncoder, "_ranks_encoder", off_by_one)
    encoder = fastbpe.make_encoder(tok, "auto", ["hello world, again"], cache_dir=tmp_path)
    assert (
        encoder.backend == "tiktoken" and "gigatoken ids differ" in encoder.reason and "input sample" in encoder.reason
    )
    encoder = fastbpe.make_encoder(tok, "auto", [], cache_dir=tmp_path / "2")
    assert (
        encoder.backend == "tiktoken" and "gigatoken ids differ" in encoder.reason and "hard strings" in encoder.reason
    )


def test_gigatoken_is_renewed_when_its_cache_grows(tokenizers_under_test, tmp_path, monkeypatch):
    """Memory stays bounded: past the growth allowed, the next chunk gets a fresh encoder
    (an empty pre-token cache), and the ids do not change."""
    tok = tokenizers_under_test["qwen-ranked"]
    encoder = fastbpe.make_encoder(tok, "auto", [], cache_dir=tmp_path, threads=2)
    assert encoder.backend == "gigatoken"
    _assert_identical(tok, encoder, _training_text())
    assert encoder.renewals == 0
    monkeypatch.setattr(encoder, "renew_after_bytes", -1)  # any size is past it
    _assert_identical(tok, encoder, _training_text() * 2)
    assert encoder.renewals >= 1


def test_gigatoken_called_from_many_threads_gives_the_same_ids(tokenizers_under_test, tmp_path):
    """gigatoken's encoder refuses, now and then, a call made while another thread's holds
    it ("Already borrowed"): the call is made again, so threads never see the error."""
    from concurrent.futures import ThreadPoolExecutor

    tok = tokenizers_under_test["qwen-ranked"]
    encoder = fastbpe.make_encoder(tok, "auto", [], cache_dir=tmp_path, threads=2)
    assert encoder.backend == "gigatoken"
    texts = fastbpe.hard_strings(tok)
    alone = [encoder._encode_ranks(t).tolist() for t in texts]
    with ThreadPoolExecutor(4) as pool:
        for _ in range(5):
            assert [r.tolist() for r in pool.map(encoder._encode_ranks, texts)] == alone


def test_a_small_input_takes_tiktoken_before_gigatoken(tokenizers_under_test, tmp_path):
    tok = tokenizers_under_test["qwen-ranked"]
    texts = ["def f(x):\n    return x  # é!", "Hello, world. 123 abc", "   spaces   and\ttabs"]
    small = fastbpe.make_encoder(tok, "auto", texts, cache_dir=tmp_path, small_input=True)
    assert small.backend == "tiktoken" and "small input" in small.reason
    assert fastbpe.make_encoder(tok, "auto", texts, cache_dir=tmp_path).backend == "gigatoken"
    assert fastbpe.make_encoder(tok, "hf", texts, cache_dir=tmp_path, small_input=True).backend == "hf"
    _assert_identical(tok, small, texts)
    plain = fastbpe.make_encoder(tokenizers_under_test["gpt2"], "auto", texts, cache_dir=tmp_path, small_input=True)
    assert plain.backend == "tiktoken" and plain.reason is None  # gigatoken was never a candidate there


def test_pack_skips_gigatoken_only_for_an_input_of_one_small_batch(
    tokenizers_under_test, tokenizer_root, tmp_path, monkeypatch
):
    from packcli.core.options import PackOptions
    from packcli.engine import ingest
    from packcli.engine.local import run_pack
    from packcli.inspect.verify import verify_dir
    from packcli.tokenize import setup as tokensetup

    corpus = tmp_path / "in.jsonl"
    corpus.write_text("".join(json.dumps({"text": f"line {i}: def f(x): return x * {i}"}) + "\n" for i in range(3)))

    def pack(name: str, batch: int, small_chars: int) -> tuple[dict, list[str]]:
        monkeypatch.setattr(ingest, "READ_BATCH", batch)
        monkeypatch.setattr(tokensetup, "SMALL_INPUT_CHARS", small_chars)
        out = tmp_path / name
        opts = PackOptions(
            inputs=[str(corpus)], output=str(out), tokenizer=str(tokenizer_root / "qwen-ranked"), seq_len=64
        )
        report = run_pack(opts)
        verify_dir(out)
        return report, [s["checksum"] for s in json.loads((out / "manifest.json").read_text())["shards"]]

    one_small, shards = pack("one-small", 4, tokensetup.SMALL_INPUT_CHARS)
    assert one_small["tokenizer_backend"] == "tiktoken" and "small input" in one_small["tokenizer_backend_reason"]
    two_batches, shards_two = pack("two-batches", 2, tokensetup.SMALL_INPUT_CHARS)
    one_large, shards_large = pack("one-large", 4, 10)
    assert two_batches["tokenizer_backend"] == one_large["tokenizer_backend"] == "gigatoken"
    assert shards == shards_two == shards_large


def test_gigatoken_verdict_is_cached_apart_from_tiktokens(tokenizers_under_test, tmp_path):
    tok = tokenizers_under_test["qwen-ranked"]
    assert fastbpe.make_encoder(tok, "tiktoken", [], cache_dir=tmp_path).backend == "tiktoken"
    keys = sorted(p.name for p in (tmp_path / "identity").iterdir())
    assert fastbpe.make_encoder(tok, "auto", [], cache_dir=tmp_path).backend == "gigatoken"
    added = sorted({p.name for p in (tmp_path / "identity").iterdir()} - set(keys))
    assert len(added) == 1 and f"gigatoken-{fastbpe.gigatoken_version()}" in added[0]
    assert (tmp_path / "gigatoken").is_dir()  # the ranks file, cached


def test_special_tokens_are_text_unless_parsed(gpt2_json, tmp_path):
    """Special tokens written in text are split as text (non-special added tokens still
    match, even inside one); parsed, they are the tokens. Both backends agree either way,
    whatever the tokenizer's own encode_special_tokens flag was left at."""
    tok = load_tokenizer(str(_save(_variant(gpt2_json), tmp_path / "t", added=NON_SPECIAL)))
    texts = ["a<|im_end|>b", "<|endoftext|>", "packcli token", " token<|im_start|>", "<|endofpackcli|>"]
    eot = tok.backend_tokenizer.token_to_id("<|endoftext|>")
    for flag in (True, False):
        tok.backend_tokenizer.encode_special_tokens = flag
        for parse in (False, True):
            encoder = fastbpe.make_encoder(tok, "tiktoken", cache_dir=tmp_path / "cache", parse_special_tokens=parse)
            _assert_identical(tok, encoder, texts)
            ids = encoder.encode_batch(["<|endoftext|>"])[0].tolist()
            assert (ids == [eot]) is parse
        assert tok.backend_tokenizer.encode_special_tokens is flag  # left as it was
    text_ids = encode_texts(tok, ["x<|endoftext|>y"])[0].tolist()
    plain = tok.backend_tokenizer.model
    pieces = tok.backend_tokenizer.pre_tokenizer.pre_tokenize_str("x<|endoftext|>y")
    assert text_ids == [t.id for piece, _ in pieces for t in plain.tokenize(piece)]


def test_hard_strings_catch_an_encoder_that_parses_special_tokens(tokenizers_under_test, tmp_path, monkeypatch):
    """auto's identity check covers the default: a fast path that still turned special-token
    strings into the tokens would differ from the tokenizer on the hard strings."""
    tok = tokenizers_under_test["gpt2"]
    assert "x<|endoftext|>y" in fastbpe.hard_strings(tok)

    class Parsing(fastbpe.TiktokenEncoder):
        def __init__(self, tokenizer, conversion, *, threads=None, parse_special_tokens=False):
            super().__init__(tokenizer, conversion, threads=threads, parse_special_tokens=True)
            self.parse_special_tokens = parse_special_tokens

    monkeypatch.setattr(fastbpe, "TiktokenEncoder", Parsing)
    encoder = fastbpe.make_encoder(tok, "auto", [], cache_dir=tmp_path)
    assert encoder.backend == "hf" and "hard strings" in encoder.reason and not encoder.parse_special_tokens
    assert fastbpe.make_encoder(tok, "auto", [], cache_dir=tmp_path, parse_special_tokens=True).backend == "tiktoken"


# ------------------------------------------------------------------ refusals


def _refusal(tok, tmp_path) -> str:
    encoder = fastbpe.make_encoder(tok, "auto", ["some text"], cache_dir=tmp_path / "cache")
    assert encoder.backend == "hf"
    with pytest.raises(PackcliError, match="--tokenizer-backend tiktoken") as err:
        fastbpe.make_encoder(tok, "tiktoken", cache_dir=tmp_path / "cache")
    assert not err.value.usage
    assert encoder.reason and "\n" not in str(err.value)
    return encoder.reason


def test_word_level_tokenizer_stays_on_hf(word_tokenizer, tmp_path):
    assert "WordLevel, not BPE" in _refusal(load_tokenizer(str(word_tokenizer)), tmp_path)


def test_normalizer_that_cannot_be_mirrored(gpt2_json, tmp_path):
    spec = _variant(gpt2_json, normalizer={"type": "Lowercase"})
    assert "normalizer Lowercase" in _refusal(load_tokenizer(str(_save(spec, tmp_path / "t"))), tmp_path)


def test_added_token_with_lstrip(gpt2_json, tmp_path):
    tok = load_tokenizer(str(_save(_variant(gpt2_json), tmp_path / "t", added=[{"content": "<mask>", "lstrip": True}])))
    assert "lstrip" in _refusal(tok, tmp_path)


def test_metaspace_tokenizer(gpt2_json, tmp_path):
    spec = _variant(gpt2_json)
    spec["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": True}
    assert "Metaspace is not byte-level" in _refusal(load_tokenizer(str(_save(spec, tmp_path / "t"))), tmp_path)


def _tiny_bpe(ignore_merges: bool) -> dict:
    """Bytes plus merges a+b, b+c, a+bc: BPE turns "abc" into [ab][c], never [abc]."""
    alphabet = tokenizing.bytes_to_unicode()
    vocab = {alphabet[b]: i for i, b in enumerate(sorted(alphabet))}
    for tok in ("ab", "bc", "abc"):
        vocab[tok] = len(vocab)
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": ignore_merges,
            "vocab": vocab,
            "merges": [["a", "b"], ["b", "c"], ["a", "bc"]],
        },
    }


def test_token_unreachable_by_its_merges_is_refused(tmp_path):
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(json.dumps(_tiny_bpe(False))))
    assert [t.value for t in tok.backend_tokenizer.model.tokenize("abc")] == ["ab", "c"]
    assert "does not encode to itself" in _refusal(tok, tmp_path)
    # With ignore_merges the piece "abc" is one token in both, but in "abcabc" tiktoken
    # merges [ab][c] into [abc] (it merges any pair whose concatenation is a token), while
    # the tokenizer has no merge ab + c: the probe of missing merges finds it.
    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(json.dumps(_tiny_bpe(True))))
    assert [t.value for t in tok.backend_tokenizer.model.tokenize("abcabc")] == ["ab", "c", "ab", "c"]
    assert "is not a merge, yet tiktoken" in _refusal(tok, tmp_path / "2")


def test_a_difference_on_the_sample_means_hf(tokenizers_under_test, tmp_path, monkeypatch):
    tok = tokenizers_under_test["gpt2"]
    good = bpe_convert.load_or_convert(tok, tmp_path)
    broken = bpe_convert.Conversion(**{**good.__dict__, "prefix_space": True})  # a subtly wrong conversion
    monkeypatch.setattr(fastbpe, "load_or_convert", lambda *a, **k: broken)
    encoder = fastbpe.make_encoder(tok, "auto", ["hello world"], cache_dir=tmp_path)
    assert encoder.backend == "hf" and "differ" in encoder.reason and "input sample" in encoder.reason
    encoder = fastbpe.make_encoder(tok, "auto", [], cache_dir=tmp_path)
    assert encoder.backend == "hf" and "hard strings" in encoder.reason
    with pytest.raises(PackcliError, match="differ"):
        fastbpe.make_encoder(tok, "tiktoken", ["hello world"], cache_dir=tmp_path)
