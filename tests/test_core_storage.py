"""Object-store paths: inputs and output on s3:// (a local moto server), byte-identical to
the same run on a local disk; the rules a remote output keeps; URLs never carry secrets."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers import random_texts, write_jsonl

from packcli.core import storage
from packcli.core.errors import PackcliError
from packcli.core.options import PackOptions
from packcli.engine.local import run_pack


def _upload(client, local: Path, key: str) -> str:
    client.upload_file(str(local), BUCKET, key)
    return f"s3://{BUCKET}/{key}"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, s3_server):
    """Two JSONL files and a Parquet file, locally under one directory and on S3 under one prefix."""
    root = tmp_path_factory.mktemp("corpus") / "in"
    root.mkdir()
    texts = random_texts(240, seed=3)
    write_jsonl(root / "a.jsonl", [{"text": t} for t in texts[:80]])
    write_jsonl(root / "b.jsonl", [{"text": t} for t in texts[80:160]])
    pq.write_table(pa.table({"text": texts[160:]}), root / "c.parquet", row_group_size=25)
    for path in sorted(root.iterdir()):
        _upload(s3_server, path, f"in/{path.name}")
    return root


BUCKET = "corpus"  # conftest's s3_server creates it


def _pack(inputs: list[str], output: str, tokenizer: Path, **extra) -> dict:
    opts = PackOptions(inputs=inputs, output=output, tokenizer=str(tokenizer), seq_len=64, **extra)
    return dict(run_pack(opts))


def _object_bytes(client, prefix: str) -> dict[str, bytes]:
    listed = client.list_objects_v2(Bucket=BUCKET, Prefix=prefix).get("Contents", [])
    return {o["Key"][len(prefix) :]: client.get_object(Bucket=BUCKET, Key=o["Key"])["Body"].read() for o in listed}


def _local_bytes(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _without_paths(manifest: bytes) -> dict:
    data = json.loads(manifest)
    data["options"].pop("inputs")
    return data


@pytest.mark.parametrize(("fmt", "mode"), [("parquet", "bin"), ("npy", "concat")])
def test_s3_round_trip_is_byte_identical_to_a_local_run(s3_server, corpus, word_tokenizer, tmp_path, fmt, mode, cli):
    extra = {"format": fmt, "mode": mode, "rows_per_shard": 16, "shuffle": True, "seed": 7}
    _pack([str(corpus)], str(tmp_path / "local"), word_tokenizer, **extra)
    prefix = f"out-{fmt}/"
    report = _pack([f"s3://{BUCKET}/in"], f"s3://{BUCKET}/{prefix}", word_tokenizer, **extra)
    local = {k: v for k, v in _local_bytes(tmp_path / "local").items() if k.startswith("shard-")}
    remote = _object_bytes(s3_server, prefix)
    assert len(local) >= 2 * (1 if fmt == "parquet" else 6)  # more than one shard
    assert {k: v for k, v in remote.items() if k.startswith("shard-")} == local
    assert _without_paths(remote["manifest.json"]) == _without_paths((tmp_path / "local/manifest.json").read_bytes())
    assert json.loads(remote["report.json"])["rows"] == report["rows"]
    assert not storage.staging_dir(f"s3://{BUCKET}/{prefix}", None).exists()  # staging removed once uploaded
    url = f"s3://{BUCKET}/{prefix}"
    verified = cli("verify", url)
    assert verified.exit_code == 0 and url in verified.stdout, verified.output
    stats = cli("stats", url, "--json")
    assert stats.exit_code == 0, stats.output
    assert json.loads(stats.stdout)["rows"] == report["rows"]


def test_a_non_empty_remote_output_needs_overwrite_or_resume(s3_server, corpus, word_tokenizer):
    out = f"s3://{BUCKET}/again"
    first = _pack([f"s3://{BUCKET}/in/a.jsonl"], out, word_tokenizer)
    with pytest.raises(PackcliError, match="is not empty; pass --overwrite"):
        _pack([f"s3://{BUCKET}/in/a.jsonl"], out, word_tokenizer)
    resumed = _pack([f"s3://{BUCKET}/in/a.jsonl"], out, word_tokenizer, resume=True)
    assert resumed == first  # complete already: the same report
    again = _pack([f"s3://{BUCKET}/in/a.jsonl"], out, word_tokenizer, overwrite=True)
    assert again["rows"] == first["rows"]


def test_resume_needs_the_remote_run_record(s3_server, corpus, word_tokenizer):
    """A non-empty remote output without a readable run record is not resumed (an empty
    one is a fresh run)."""
    out = f"s3://{BUCKET}/never-run"
    s3_server.put_object(Bucket=BUCKET, Key="never-run/stray.txt", Body=b"not packcli's")
    with pytest.raises(PackcliError, match=f"cannot resume: {out} holds no record of an interrupted packcli run"):
        _pack([f"s3://{BUCKET}/in/a.jsonl"], out, word_tokenizer, resume=True)
    s3_server.put_object(Bucket=BUCKET, Key="never-run/.packcli-run.json", Body=b"{not json")
    with pytest.raises(PackcliError, match=f"cannot resume: {out}/.packcli-run.json is unreadable"):
        _pack([f"s3://{BUCKET}/in/a.jsonl"], out, word_tokenizer, resume=True)


def test_resume_keeps_uploaded_shards_and_gives_the_same_bytes(s3_server, corpus, word_tokenizer, tmp_path):
    """An interrupted remote run: the manifest and the last shards are gone; --resume
    uploads what is missing, leaves the uploaded shards alone, and the output equals an
    uninterrupted run's."""
    out, prefix = f"s3://{BUCKET}/resumed", "resumed/"
    extra = {"rows_per_shard": 8}
    _pack([f"s3://{BUCKET}/in"], out, word_tokenizer, **extra)
    whole = _object_bytes(s3_server, prefix)
    shards = sorted(k for k in whole if k.startswith("shard-"))
    assert len(shards) >= 4
    for key in ("manifest.json", "report.json", shards[-1], shards[-2]):
        s3_server.delete_object(Bucket=BUCKET, Key=prefix + key)
    for key in shards[:-2]:  # marked in place (same bytes): an upload would replace the mark
        source = {"Bucket": BUCKET, "Key": prefix + key}
        s3_server.copy_object(
            Bucket=BUCKET, Key=prefix + key, CopySource=source, Metadata={"kept": "1"}, MetadataDirective="REPLACE"
        )
    _pack([f"s3://{BUCKET}/in"], out, word_tokenizer, resume=True, **extra)
    marks = {key: s3_server.head_object(Bucket=BUCKET, Key=prefix + key)["Metadata"] for key in shards}
    assert marks == {key: ({"kept": "1"} if key in shards[:-2] else {}) for key in shards}
    after = _object_bytes(s3_server, prefix)
    assert sorted(after) == sorted(whole)
    assert {k: v for k, v in after.items() if k != "report.json"} == {
        k: v for k, v in whole.items() if k != "report.json"
    }


def test_remote_inputs_are_named_in_errors(s3_server, corpus, word_tokenizer, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "fine"}\n{"text": 5}\n', encoding="utf-8")
    url = _upload(s3_server, bad, "bad/bad.jsonl")
    with pytest.raises(PackcliError, match=rf"^{url}:2: "):
        _pack([url], str(tmp_path / "out"), word_tokenizer)
    with pytest.raises(PackcliError, match="no such file or directory"):
        _pack([f"s3://{BUCKET}/missing.jsonl"], str(tmp_path / "out2"), word_tokenizer)


def test_urls_with_credentials_are_refused_and_redacted():
    with pytest.raises(PackcliError, match="credentials in a URL are refused") as raised:
        storage.check_url("s3://KEY:SECRET@bucket/data.jsonl")
    assert "SECRET" not in str(raised.value)
    assert storage.redact("az://acct/c/x.parquet?sig=abc") == "az://acct/c/x.parquet"
    assert storage.is_remote("s3://b/k") and not storage.is_remote("C://x") and not storage.is_remote("file:///tmp/x")
    assert storage.local_path("file:///tmp/x") == "/tmp/x"


def test_an_output_is_complete_once_its_manifest_is_there(tmp_path):
    """Local or remote (a RemoteDir or its URL), the one check: the manifest, written last."""
    from packcli.core.storage import MANIFEST_FILE, RemoteDir, is_complete

    assert not is_complete(tmp_path)
    (tmp_path / "report.json").write_text("{}")
    (tmp_path / f".{MANIFEST_FILE}.tmp").write_text("{}")  # not renamed into place yet
    assert not is_complete(tmp_path)
    (tmp_path / MANIFEST_FILE).write_text("{}")
    assert is_complete(tmp_path)
    remote = RemoteDir(f"memory://{tmp_path.name}/out")
    remote.write_json("report.json", {})
    assert not is_complete(remote) and not is_complete(str(remote))
    remote.write_json(MANIFEST_FILE, {})
    assert is_complete(remote) and is_complete(str(remote))
    remote.remove(MANIFEST_FILE)
    assert not is_complete(remote)


def test_an_array_beside_the_spill_of_another_length_or_unreadable_is_refused(tmp_path):
    import numpy as np

    from packcli.core.errors import PackcliError
    from packcli.core.storage import load_per_segment

    path = tmp_path / "ids.npy"
    np.save(path, np.arange(3, dtype=np.int32))
    assert load_per_segment(path, 3, "group ids").tolist() == [0, 1, 2]
    with pytest.raises(PackcliError, match=r"ids.npy: 3 group ids for 4 segments; start again with --overwrite"):
        load_per_segment(path, 4, "group ids")
    path.write_bytes(b"not an array")
    with pytest.raises(PackcliError, match=r"cannot read the spill's group ids .*; start again with --overwrite"):
        load_per_segment(path, 3, "group ids")


def test_show_of_a_remote_output_checks_its_manifest_as_a_local_one(s3_server, tmp_path, cli):
    """show reads a remote manifest through the same checks as load_manifest: a newer
    format, a missing key and an unknown format are each refused with the URL."""
    url = f"s3://{BUCKET}/checked/"
    cases = [
        ({"format_version": 99, "format": "parquet"}, "written by a newer packcli (format 99)"),
        ({"format_version": 1, "format": "parquet"}, "manifest.json: missing "),
        ({**_manifest_keys(), "format": "csv"}, "manifest.json: unknown format 'csv'"),
    ]
    for manifest, message in cases:
        s3_server.put_object(Bucket=BUCKET, Key="checked/manifest.json", Body=json.dumps(manifest).encode())
        result = cli("show", url, "--row", "0")
        assert result.exit_code == 1 and f"s3://{BUCKET}/checked" in result.stderr and message in result.stderr, (
            result.output
        )


def _manifest_keys() -> dict:
    from packcli.write.manifest import REQUIRED_KEYS

    return dict.fromkeys(REQUIRED_KEYS, 0) | {"format_version": 1}
