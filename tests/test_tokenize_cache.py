"""The start-up cache: entries trusted only when whole and current, atomic writes, and a
warm `pack` that needs nothing of transformers or the Hugging Face tokenizer."""

from __future__ import annotations

import base64
import json
import multiprocessing
from pathlib import Path

import pytest
from helpers import packages_a_pack_imports, write_jsonl

from packcli.tokenize import bpe_convert
from packcli.tokenize import cache as tokcache
from packcli.tokenize import tokenizer as tokenizing
from packcli.tokenize.cache import Store

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def ranked_tokenizer(tmp_path_factory) -> Path:
    """A plain tokenizer directory whose merge list is made from tiktoken ranks (as Qwen's
    and Llama 3's are), so its conversion is exact: the bundled vocabulary's ranks, through
    transformers' own TikTokenConverter."""
    from transformers.convert_slow_tokenizer import TikTokenConverter

    conversion = bpe_convert.load_or_convert(tokenizing.load_tokenizer(tokenizing.BUNDLED_NAME), Store(None))
    assert isinstance(conversion, bpe_convert.Conversion)
    directory = tmp_path_factory.mktemp("ranked")
    ranks_file = directory / "ranks.tiktoken"
    ranks = sorted(conversion.mergeable_ranks.items(), key=lambda item: item[1])
    ranks_file.write_text("".join(f"{base64.b64encode(token).decode()} {rank}\n" for token, rank in ranks))

    class RankFileConverter(TikTokenConverter):
        @staticmethod
        def load_tiktoken_bpe(path):
            lines = Path(path).read_bytes().splitlines()
            return {base64.b64decode(token): int(rank) for token, rank in (line.split() for line in lines if line)}

    pattern = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
    converter = RankFileConverter(vocab_file=str(ranks_file), pattern=pattern, extra_special_tokens=["<|eot|>"])
    converter.converted().save(str(directory / "tokenizer.json"))
    ranks_file.unlink()
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|eot|>"}
    (directory / "tokenizer_config.json").write_text(json.dumps(config))
    return directory


def _entry(store: Store, kind: str, key: str) -> Path:
    path = store.path(kind, key)
    assert path is not None
    return path


def test_cache_root_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("PACKCLI_CACHE_DIR", str(tmp_path / "explicit"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert tokcache.cache_root() == tmp_path / "explicit"
    monkeypatch.delenv("PACKCLI_CACHE_DIR")
    assert tokcache.cache_root() == tmp_path / "xdg" / "packcli"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert tokcache.cache_root() == Path.home() / ".cache" / "packcli"


def test_an_entry_is_read_back(tmp_path):
    store = Store(tmp_path)
    assert store.load("facts", "k") == (False, None)
    store.save("facts", "k", {"vocab": 7})
    assert store.load("facts", "k") == (True, {"vocab": 7})
    assert Store(None).load("facts", "k") == (False, None)  # caching off: nothing read
    Store(None).save("facts", "other", 1)
    assert not (tmp_path / "facts" / "other.pkl").exists()


@pytest.mark.parametrize("damage", ["truncated", "flipped byte", "garbage", "empty"])
def test_a_damaged_entry_is_a_miss(tmp_path, damage):
    store = Store(tmp_path)
    store.save("facts", "k", list(range(1000)))
    path = _entry(store, "facts", "k")
    data = path.read_bytes()
    if damage == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "flipped byte":
        path.write_bytes(data[:-10] + bytes([data[-10] ^ 1]) + data[-9:])
    elif damage == "garbage":
        path.write_bytes(b"not a cache entry at all")
    else:
        path.write_bytes(b"")
    assert store.load("facts", "k") == (False, None)


@pytest.mark.parametrize("field", ["format", "packcli", "tokenizers", "tiktoken"])
def test_an_entry_from_other_versions_is_a_miss(tmp_path, monkeypatch, field):
    store = Store(tmp_path)
    store.save("facts", "k", 1)
    monkeypatch.setattr(tokcache, "_STAMP", {**tokcache.stamp(), field: "other"})
    assert store.load("facts", "k") == (False, None)


def test_an_entry_under_another_key_is_a_miss(tmp_path):
    """A file copied or renamed to another fingerprint's name is not that fingerprint's."""
    store = Store(tmp_path)
    store.save("facts", "one", 1)
    _entry(store, "facts", "one").rename(_entry(store, "facts", "two"))
    assert store.load("facts", "two") == (False, None)


def _write_many(root: str, value: int) -> None:
    store = Store(root)
    for _ in range(200):
        store.save("facts", "shared", [value] * 20_000)


def test_two_writers_at_once_leave_a_whole_entry(tmp_path):
    context = multiprocessing.get_context("fork")
    writers = [context.Process(target=_write_many, args=(str(tmp_path), v)) for v in (1, 2)]
    for writer in writers:
        writer.start()
    store, seen = Store(tmp_path), set()
    while any(writer.is_alive() for writer in writers):
        hit, value = store.load("facts", "shared")
        if hit:  # never half of one, never a mix of both
            assert value in ([1] * 20_000, [2] * 20_000)
            seen.add(value[0])
    for writer in writers:
        writer.join()
        assert writer.exitcode == 0
    hit, value = store.load("facts", "shared")
    assert hit and value in ([1] * 20_000, [2] * 20_000)
    assert [p.name for p in (tmp_path / "facts").iterdir()] == ["shared.pkl"]  # no temporary file left


def test_files_fingerprint_follows_the_files(tmp_path, word_tokenizer):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(word_tokenizer, copy)
    first = tokcache.files_fingerprint(str(copy))
    assert first == tokcache.files_fingerprint(str(word_tokenizer))
    assert tokcache.files_fingerprint(str(copy / "tokenizer.json")) not in (None, first)
    config = copy / "tokenizer_config.json"
    config.write_text(config.read_text().replace("}", ', "model_max_length": 5}', 1))
    assert tokcache.files_fingerprint(str(copy)) != first
    assert tokcache.files_fingerprint("some-org/some-hub-name") is None


def _pack(cli, tokenizer: Path, corpus: Path, out: Path, *extra) -> dict:
    result = cli("pack", corpus, "--tokenizer", tokenizer, "--seq-len", 64, "-o", out, "--json", *extra)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_warm_pack_uses_no_tokenizer(cli, tmp_path, monkeypatch, ranked_tokenizer):
    monkeypatch.setenv("PACKCLI_CACHE_DIR", str(tmp_path / "cache"))
    corpus = write_jsonl(
        tmp_path / "in.jsonl", [{"text": f"Document {i}: naïve café, 日本語 {i * 7}."} for i in range(5)]
    )
    cold = _pack(cli, ranked_tokenizer, corpus, tmp_path / "cold")
    assert cold["tokenizer_backend"] == "tiktoken"

    def no_loading(*args, **kwargs):
        raise AssertionError("the tokenizer was loaded")

    monkeypatch.setattr(tokenizing, "load_tokenizer", no_loading)
    warm = _pack(cli, ranked_tokenizer, corpus, tmp_path / "warm")
    assert warm["tokenizer_backend"] == "tiktoken"
    manifests = [json.loads((tmp_path / name / "manifest.json").read_text()) for name in ("cold", "warm")]
    assert manifests[0]["tokenizer"] == manifests[1]["tokenizer"]
    assert [s["checksum"] for s in manifests[0]["shards"]] == [s["checksum"] for s in manifests[1]["shards"]]
    with pytest.raises(AssertionError, match="was loaded"):  # the hf backend needs the tokenizer itself
        _pack(cli, ranked_tokenizer, corpus, tmp_path / "hf", "--tokenizer-backend", "hf")


def test_warm_pack_imports_no_transformers(tmp_path, ranked_tokenizer):
    corpus = write_jsonl(tmp_path / "in.jsonl", [{"text": f"doc {i}"} for i in range(5)])
    args = [corpus, "--tokenizer", ranked_tokenizer, "--seq-len", "64", "--overwrite", "--workers", "1"]
    args += ["-o", tmp_path / "out"]
    runs = [packages_a_pack_imports(args, tmp_path / "cache", ("transformers", "tokenizers")) for _ in range(2)]
    assert runs == [["tokenizers"], []]  # cold: loaded with tokenizers alone; warm: neither


def test_a_warm_run_that_falls_back_to_hf_loads_the_tokenizer_once(tmp_path, ranked_tokenizer, monkeypatch):
    """A cached refusal means the HF encoder: the tokenizer is loaded in this process (not
    in every forked worker), once."""
    from packcli.tokenize import fastbpe

    store = Store(tmp_path)
    loads = []

    def load(spec, **kwargs):
        loads.append(spec)
        return real_load(spec, **kwargs)

    real_load = tokenizing.load_tokenizer
    _, facts = tokenizing.load_with_facts(str(ranked_tokenizer), store)
    lazy, _ = tokenizing.load_with_facts(str(ranked_tokenizer), store)
    assert isinstance(lazy, tokcache.LazyTokenizer) and not lazy.is_loaded
    store.save("tiktoken", facts.fingerprint.split(":")[1], "a reason the conversion was refused")
    monkeypatch.setattr(tokenizing, "load_tokenizer", load)
    encoder = fastbpe.make_encoder(lazy, "auto", ["some text"], store=store, fingerprint=facts.fingerprint)
    assert encoder.backend == "hf" and "a reason the conversion was refused" in (encoder.reason or "")
    assert lazy.is_loaded and loads == [str(ranked_tokenizer)]
    assert encoder.encode_batch(["some text"])[1].tolist() == [len(lazy.encode("some text", add_special_tokens=False))]
    assert loads == [str(ranked_tokenizer)]


def test_stale_or_damaged_facts_are_rebuilt(cli, tmp_path, monkeypatch, word_tokenizer):
    import shutil

    cache = tmp_path / "cache"
    monkeypatch.setenv("PACKCLI_CACHE_DIR", str(cache))
    tokenizer = tmp_path / "tok"
    shutil.copytree(word_tokenizer, tokenizer)
    corpus = write_jsonl(tmp_path / "in.jsonl", [{"text": "w1 w2 w3"}])
    first = _pack(cli, tokenizer, corpus, tmp_path / "a")
    (entry,) = (cache / "facts").iterdir()
    entry.write_bytes(entry.read_bytes()[:-5])  # truncated: rebuilt, same result
    assert _pack(cli, tokenizer, corpus, tmp_path / "b")["real_tokens"] == first["real_tokens"]
    assert Store(cache).load("facts", entry.stem)[0]
    # Another tokenizer in the same place (one more added token): another fingerprint, its own facts.
    from tokenizers import Tokenizer

    backend = Tokenizer.from_file(str(tokenizer / "tokenizer.json"))
    backend.add_tokens(["brand-new-token"])
    backend.save(str(tokenizer / "tokenizer.json"))
    _pack(cli, tokenizer, corpus, tmp_path / "c")
    manifests = [json.loads((tmp_path / name / "manifest.json").read_text()) for name in ("a", "c")]
    assert manifests[1]["tokenizer"]["vocab_size"] == manifests[0]["tokenizer"]["vocab_size"] + 1
    assert manifests[1]["tokenizer"]["fingerprint"] != manifests[0]["tokenizer"]["fingerprint"]
    assert len(list((cache / "facts").iterdir())) == 2


def test_no_cache_reads_and_writes_nothing(cli, tmp_path, monkeypatch, word_tokenizer):
    cache = tmp_path / "cache"
    monkeypatch.setenv("PACKCLI_CACHE_DIR", str(cache))
    corpus = write_jsonl(tmp_path / "in.jsonl", [{"text": "w1 w2 w3"}])
    _pack(cli, word_tokenizer, corpus, tmp_path / "a", "--no-cache")
    assert not cache.exists()
    result = cli("stats", corpus, "--tokenizer", word_tokenizer, "--seq-len", 64, "--no-cache")
    assert result.exit_code == 0, result.output
    assert not cache.exists()
    _pack(cli, word_tokenizer, corpus, tmp_path / "b")
    assert (cache / "facts").is_dir()
