"""Exports to and from an object store (a local moto server): OUT holds the bytes a local
export writes, the file each reader opens first arrives last, a non-empty OUT needs
--overwrite, a failed export leaves OUT as it was; and each stack's own reader (streaming,
energon, datatrove) takes the export straight from the store."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import numpy as np
import pytest
from helpers import random_texts, write_jsonl

from packcli.core import storage
from packcli.core.errors import PackcliError
from packcli.export.nanotron import export_nanotron

BUCKET = "corpus"  # conftest's s3_server creates it
ENTRY = {"mds": "index.json", "energon": ".nv-meta/dataset.yaml"}  # what each reader opens first


@pytest.fixture
def source(tmp_path, packed, word_tokenizer):
    path = write_jsonl(tmp_path / "in.jsonl", [{"text": t} for t in random_texts(80, seed=8, max_words=30)])
    return packed(path, "--tokenizer", word_tokenizer, "--seq-len", 16, "--rows-per-shard", 20)


def objects(client, prefix: str) -> dict[str, bytes]:
    listed = client.list_objects_v2(Bucket=BUCKET, Prefix=prefix + "/").get("Contents", [])
    return {o["Key"][len(prefix) + 1 :]: client.get_object(Bucket=BUCKET, Key=o["Key"])["Body"].read() for o in listed}


def files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def export_ok(cli, kind, source, out, *options):
    result = cli("export", kind, source, out, *options)
    assert result.exit_code == 0, result.output + result.stderr
    return result


@pytest.mark.parametrize("kind", ["mds", "energon", "nanotron"])
def test_a_remote_out_holds_what_a_local_export_writes(s3_server, tmp_path, source, cli, monkeypatch, kind):
    uploaded: list[str] = []
    staged: list[Path] = []
    put = storage.RemoteDir.put

    def recording_put(self, local, name):
        uploaded.append(name)
        staged.append(Path(local))
        put(self, local, name)

    export_ok(cli, kind, source, tmp_path / "local")
    monkeypatch.setattr(storage.RemoteDir, "put", recording_put)
    temporary = tmp_path / "tmp"  # the export's staging, where no other test's is
    temporary.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))
    result = export_ok(cli, kind, source, f"s3://{BUCKET}/{kind}-out")
    assert result.stdout.startswith(f"ok: wrote s3://{BUCKET}/{kind}-out ({kind}, ")
    local = files(tmp_path / "local")
    assert objects(s3_server, f"{kind}-out") == local
    assert sorted(uploaded) == sorted(local) and len(uploaded) == len(local)
    if kind in ENTRY:
        assert uploaded[-1] == ENTRY[kind]
    if kind == "energon":  # the index after every tar
        first_meta = min(i for i, name in enumerate(uploaded) if name.startswith(".nv-meta/"))
        assert all(name.startswith(".nv-meta/") for name in uploaded[first_meta:])
    if kind == "nanotron":  # a file's .ds, which the reader lists, after its index and loss mask
        assert all(uploaded.index(name) > uploaded.index(name + ".index") for name in uploaded if name.endswith(".ds"))
    assert all(temporary in path.parents for path in staged)
    assert not list(temporary.glob("packcli-export-*"))


def test_streaming_reads_an_mds_export_from_the_store(s3_server, tmp_path, source, cli, monkeypatch):
    from mds_reader import streaming_base
    from test_export_mds import assert_same_rows

    monkeypatch.setenv("S3_ENDPOINT_URL", os.environ["AWS_ENDPOINT_URL"])  # streaming's own variable
    export_ok(cli, "mds", source, f"s3://{BUCKET}/mds-read")
    base = streaming_base()
    base.util.clean_stale_shared_memory()
    dataset = base.StreamingDataset(
        remote=f"s3://{BUCKET}/mds-read", local=str(tmp_path / "cache"), batch_size=1, shuffle=False
    )
    try:
        samples = [dataset[i] for i in range(len(dataset))]
    finally:
        del dataset
        base.util.clean_stale_shared_memory()
    assert_same_rows(samples, source, np.uint16)


def test_datatrove_reads_a_nanotron_export_from_the_store(s3_server, tmp_path, source, cli):
    from datatrove.utils.dataset import DatatroveFolderDataset

    export_ok(cli, "nanotron", source, tmp_path / "local")
    export_ok(cli, "nanotron", source, f"s3://{BUCKET}/nanotron-read")
    local = DatatroveFolderDataset(str(tmp_path / "local"), seq_len=7, token_size=2)
    remote = DatatroveFolderDataset(f"s3://{BUCKET}/nanotron-read", seq_len=7, token_size=2)
    assert len(remote) == len(local) > 0
    assert all(remote[i]["input_ids"].tolist() == local[i]["input_ids"].tolist() for i in range(len(local)))


@pytest.mark.filterwarnings("ignore:'pin_memory' argument is set as true")
def test_energon_reads_an_energon_export_from_the_store(s3_server, tmp_path, source, cli, monkeypatch):
    """Through a multi-storage-client profile for the bucket (`msc://PROFILE/PATH`), as
    energon reads object stores."""
    from test_export_energon import assert_same_rows, read_back

    config = {
        "profiles": {
            "store": {
                "storage_provider": {
                    "type": "s3",
                    "options": {
                        "base_path": BUCKET,
                        "endpoint_url": os.environ["AWS_ENDPOINT_URL"],
                        "region_name": os.environ["AWS_DEFAULT_REGION"],
                    },
                },
                "credentials_provider": {
                    "type": "S3Credentials",
                    "options": {
                        "access_key": os.environ["AWS_ACCESS_KEY_ID"],
                        "secret_key": os.environ["AWS_SECRET_ACCESS_KEY"],
                    },
                },
            }
        }
    }
    (tmp_path / "msc.json").write_text(json.dumps(config))
    monkeypatch.setenv("MSC_CONFIG", str(tmp_path / "msc.json"))
    export_ok(cli, "energon", source, f"s3://{BUCKET}/energon-read")
    assert_same_rows(read_back("msc://store/energon-read"), source, np.uint16)


def test_a_non_empty_remote_out_needs_overwrite_and_is_then_replaced_whole(s3_server, source, cli):
    s3_server.put_object(Bucket=BUCKET, Key="taken/keep.txt", Body=b"mine")
    result = cli("export", "nanotron", source, f"s3://{BUCKET}/taken")
    assert result.exit_code == 1 and f"output s3://{BUCKET}/taken is not empty; pass --overwrite" in result.stderr
    assert objects(s3_server, "taken") == {"keep.txt": b"mine"}
    export_ok(cli, "nanotron", source, f"s3://{BUCKET}/taken", "--overwrite")
    after = objects(s3_server, "taken")
    assert "keep.txt" not in after and any(name.endswith(".ds") for name in after)


def test_a_failed_export_leaves_the_remote_out_as_it_was(s3_server, source):
    url = f"s3://{BUCKET}/kept"
    export_nanotron(source, url)
    before = objects(s3_server, "kept")
    (source / "shard-00001.parquet").write_bytes(b"not parquet")
    with pytest.raises(PackcliError, match="shard-00001.parquet: cannot read shard"):
        export_nanotron(source, url, overwrite=True)
    assert objects(s3_server, "kept") == before


def test_a_source_on_the_store_exports_as_the_local_one(s3_server, tmp_path, source, cli):
    for path in sorted(source.rglob("*")):
        if path.is_file():
            s3_server.upload_file(str(path), BUCKET, f"packed/{path.relative_to(source).as_posix()}")
    export_ok(cli, "energon", source, tmp_path / "from-local")
    export_ok(cli, "energon", f"s3://{BUCKET}/packed", tmp_path / "from-store")
    assert files(tmp_path / "from-store") == files(tmp_path / "from-local")
    result = cli("export", "energon", f"s3://{BUCKET}/nothing-here", tmp_path / "none")
    assert result.exit_code == 1 and "no manifest.json" in result.stderr
