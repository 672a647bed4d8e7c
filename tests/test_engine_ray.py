"""--engine ray on a local Ray cluster of 2 CPUs: byte-identical to --engine local for bin
and concat, Parquet and npy; a killed task is retried; a resumed driver reuses what is
complete; inputs and output on s3:// (a local moto server)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import ray
from helpers import random_texts, write_jsonl
from hypothesis import given, settings
from hypothesis import strategies as st

from packcli.core.errors import PackcliError
from packcli.core.options import PackOptions
from packcli.engine.local import run_pack
from packcli.engine.ray_tasks import FAULT_ENV


@pytest.fixture(scope="module")
def faults(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("faults")


@pytest.fixture(scope="module")
def cluster(s3_server, faults):
    """Started after the S3 server and the fault directory are in the environment, which
    the workers inherit."""
    os.environ[FAULT_ENV] = str(faults)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()
    os.environ.pop(FAULT_ENV, None)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """Three JSONL files and a Parquet file of prompt/completion records."""
    root = tmp_path_factory.mktemp("corpus")
    texts = random_texts(400, seed=11, max_words=90)
    for n in range(3):
        part = texts[n * 100 : (n + 1) * 100]
        write_jsonl(root / f"{n}.jsonl", [{"prompt": t[:40], "text": t, "completion": t[40:] or "x"} for t in part])
    rest = texts[300:]
    table = pa.table({"prompt": [t[:40] for t in rest], "completion": [t[40:] or "x" for t in rest], "text": rest})
    pq.write_table(table, root / "3.parquet", row_group_size=30)
    return root


BUCKET = "corpus"  # conftest's s3_server creates it


def _stop_the_driver_before_its_manifest(monkeypatch) -> None:
    """The driver (this process) stops once every shard is written; the tasks import their own hook."""
    from packcli.engine import ray_tasks as engine_ray

    def stop(stage: str, index: int) -> None:
        if stage == "driver":
            raise KeyboardInterrupt

    monkeypatch.setattr(engine_ray, "maybe_fail", stop)


def _pack(inputs, output, tokenizer, **extra) -> dict:
    opts = PackOptions(
        inputs=[str(i) for i in inputs], output=str(output), tokenizer=str(tokenizer), seq_len=96, **extra
    )
    return dict(run_pack(opts))


def _files(root: Path) -> dict[str, bytes]:
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.relative_to(root).as_posix().startswith("shard-"))
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in files}


def _manifest(root: Path) -> dict:
    data = json.loads((root / "manifest.json").read_text(encoding="utf-8"))
    data["options"].pop("inputs")
    return data


def _assert_same(local: Path, other: Path) -> None:
    shards = _files(local)
    assert len(shards) >= 3 and _files(other) == shards
    assert _manifest(other) == _manifest(local)
    assert not [p.name for p in other.iterdir() if p.name.startswith(".shard-")]


CASES = [
    ("bin", "parquet", {"shuffle": True, "seed": 3}),
    ("concat", "npy", {"shuffle": True}),
    ("bin", "npy", {"prompt_field": "prompt", "completion_field": "completion", "algorithm": "ffd"}),
    ("concat", "parquet", {"remainder": "drop"}),
]


@pytest.mark.parametrize(("mode", "fmt", "extra"), CASES, ids=[f"{m}-{f}" for m, f, _ in CASES])
def test_ray_output_is_byte_identical_to_local(cluster, corpus, word_tokenizer, tmp_path, mode, fmt, extra):
    common = {"mode": mode, "format": fmt, "rows_per_shard": 20, **extra}
    local = _pack([corpus], tmp_path / "local", word_tokenizer, **common)
    report = _pack([corpus], tmp_path / "ray", word_tokenizer, engine="ray", **common)
    _assert_same(tmp_path / "local", tmp_path / "ray")
    for key in ("rows", "sequences_packed", "real_tokens", "label_tokens", "efficiency", "documents", "overlong"):
        assert report[key] == local[key], key
    shards = {name.split("/")[0] for name in _files(tmp_path / "ray")}  # an npy shard is a directory of files
    assert report["engine"]["name"] == "ray" and report["engine"]["tasks"] == 4 + len(shards)
    assert report["workers"] == {"kind": "ray", "count": 2, "nodes": 1}
    assert local["engine"] == {"name": "local"}


@pytest.mark.parametrize("stage", ["spill", "shard"])
def test_a_killed_task_is_retried_and_the_output_is_unchanged(cluster, corpus, word_tokenizer, faults, tmp_path, stage):
    (faults / f"arm-{stage}-1").touch()
    common = {"mode": "bin", "format": "parquet", "rows_per_shard": 20, "shuffle": True}
    _pack([corpus], tmp_path / "local", word_tokenizer, **common)
    report = _pack([corpus], tmp_path / "ray", word_tokenizer, engine="ray", **common)
    assert (faults / f"fired-{stage}-1").exists()  # the task did die once
    assert report["engine"]["retries"] == 1
    _assert_same(tmp_path / "local", tmp_path / "ray")


def test_a_resumed_driver_keeps_complete_parts_and_shards(cluster, corpus, word_tokenizer, faults, tmp_path):
    """A driver (a CLI process on the running cluster, --ray-address) killed after the
    shards, before the manifest; some shards lost too: --resume keeps the complete parts
    and the recorded shards still in place, makes the rest, and the output is the same."""
    common = {"mode": "concat", "format": "npy", "rows_per_shard": 20}
    out, spill = tmp_path / "ray", tmp_path / "spill"
    _pack([corpus], tmp_path / "local", word_tokenizer, **common)
    (faults / "arm-driver-0").touch()
    args = [str(corpus), "-o", str(out), "--tokenizer", str(word_tokenizer), "--seq-len", "96", "--mode", "concat"]
    args += ["--format", "npy", "--rows-per-shard", "20", "--engine", "ray", "--tmp-dir", str(spill)]
    address = ray.get_runtime_context().gcs_address
    run = subprocess.run(
        [sys.executable, "-m", "packcli", "pack", *args, "--ray-address", address], capture_output=True, text=True
    )
    assert run.returncode == 1 and (faults / "fired-driver-0").exists(), run.stderr[-2000:]
    assert not (out / "manifest.json").exists()
    shards = sorted(p for p in out.iterdir() if p.name.startswith("shard-"))
    for shard in shards[1::2]:
        shutil.rmtree(shard)
    kept = (shards[0] / "input_ids.npy").stat().st_mtime_ns
    report = _pack([corpus], out, word_tokenizer, engine="ray", resume=True, tmp_dir=str(spill), **common)
    assert report["engine"]["parts_reused"] == 4
    assert report["engine"]["tasks"] == len(shards)  # every shard task ran (for its stats), no part task
    assert (shards[0] / "input_ids.npy").stat().st_mtime_ns == kept  # recorded and in place: not written again
    _assert_same(tmp_path / "local", out)


def test_bad_records_fail_and_skip_as_locally(cluster, word_tokenizer, tmp_path):
    good = write_jsonl(tmp_path / "a.jsonl", [{"text": "one two three"}] * 5)
    bad = tmp_path / "b.jsonl"
    bad.write_text('{"text": "four five"}\n{"text": 7}\n{"nope": 1}\n', encoding="utf-8")
    with pytest.raises(PackcliError, match=rf"^{bad}:2: ") as raised:
        _pack([good, bad], tmp_path / "fail", word_tokenizer, engine="ray")
    assert "Traceback" not in str(raised.value)
    local = _pack([good, bad], tmp_path / "skip-l", word_tokenizer, on_bad_record="skip")
    report = _pack([good, bad], tmp_path / "skip-r", word_tokenizer, on_bad_record="skip", engine="ray")
    assert report["documents"] == local["documents"] and report["documents"]["skipped"] == 2


def test_s3_round_trip_with_ray(cluster, s3_server, corpus, word_tokenizer, tmp_path):
    for path in sorted(corpus.iterdir()):
        s3_server.upload_file(str(path), BUCKET, f"ray-in/{path.name}")
    common = {"mode": "bin", "format": "parquet", "rows_per_shard": 20, "shuffle": True}
    _pack([corpus], tmp_path / "local", word_tokenizer, **common)
    _pack([f"s3://{BUCKET}/ray-in/"], f"s3://{BUCKET}/ray-out", word_tokenizer, engine="ray", **common)
    listed = s3_server.list_objects_v2(Bucket=BUCKET, Prefix="ray-out/")["Contents"]
    remote = {o["Key"][8:]: s3_server.get_object(Bucket=BUCKET, Key=o["Key"])["Body"].read() for o in listed}
    assert {k: v for k, v in remote.items() if k.startswith("shard-")} == _files(tmp_path / "local")
    manifest = json.loads(remote["manifest.json"])
    manifest["options"].pop("inputs")
    assert manifest == _manifest(tmp_path / "local")


def test_the_local_engine_never_imports_ray(word_tokenizer, tmp_path):
    data = write_jsonl(tmp_path / "a.jsonl", [{"text": "one two three"}] * 5)
    code = (
        "import sys\nfrom packcli.cli.app import app\nsys.argv = ['packcli', 'pack', sys.argv[1], '-o', sys.argv[2], "
        "'--tokenizer', sys.argv[3], '--seq-len', '16']\ntry:\n    app()\nexcept SystemExit:\n    pass\n"
        "assert 'ray' not in sys.modules and 'fsspec' not in sys.modules, 'imported'\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", code, str(data), str(tmp_path / "out"), str(word_tokenizer)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert (tmp_path / "out" / "manifest.json").is_file()


def test_engine_options_are_checked(word_tokenizer, tmp_path):
    with pytest.raises(PackcliError, match="--ray-address goes with --engine ray"):
        _pack([tmp_path], tmp_path / "o", word_tokenizer, ray_address="auto")
    with pytest.raises(PackcliError, match="--engine must be one of local, ray"):
        _pack([tmp_path], tmp_path / "o", word_tokenizer, engine="spark")


def test_a_large_parquet_file_is_read_by_several_tasks(cluster, word_tokenizer, tmp_path, monkeypatch):
    """Row groups as parts: the same bytes as one local read, rows named by their place in
    the whole file."""
    from packcli.engine import ray_driver as engine_ray_driver

    texts = random_texts(300, seed=5, max_words=70)
    pq.write_table(pa.table({"text": texts}), tmp_path / "big.parquet", row_group_size=40)
    monkeypatch.setattr(engine_ray_driver, "PART_BYTES", 1)  # every row group a part
    common = {"mode": "bin", "format": "parquet", "rows_per_shard": 20, "shuffle": True}
    _pack([tmp_path / "big.parquet"], tmp_path / "local", word_tokenizer, **common)
    report = _pack([tmp_path / "big.parquet"], tmp_path / "ray", word_tokenizer, engine="ray", **common)
    assert report["engine"]["parts"] == 8
    _assert_same(tmp_path / "local", tmp_path / "ray")
    texts[203] = None  # a bad row in the sixth row group
    pq.write_table(pa.table({"text": texts}), tmp_path / "bad.parquet", row_group_size=40)
    with pytest.raises(PackcliError, match=rf"^{tmp_path / 'bad.parquet'} row 203: "):
        _pack([tmp_path / "bad.parquet"], tmp_path / "bad", word_tokenizer, engine="ray")


def test_a_large_jsonl_file_is_read_by_several_tasks(cluster, word_tokenizer, tmp_path, monkeypatch):
    """Byte ranges cut at line starts as parts: the same bytes as one local read, bad
    lines named by their line in the whole file, blank lines counted as lines."""
    from packcli.engine import ray_driver as engine_ray_driver

    lines = [json.dumps({"text": t}) for t in random_texts(300, seed=8, max_words=70)]
    lines[150] = ""
    (tmp_path / "big.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    monkeypatch.setattr(engine_ray_driver, "PART_BYTES", 4000)
    common = {"mode": "concat", "format": "npy", "rows_per_shard": 20, "shuffle": True}
    local = _pack([tmp_path / "big.jsonl"], tmp_path / "local", word_tokenizer, **common)
    report = _pack([tmp_path / "big.jsonl"], tmp_path / "ray", word_tokenizer, engine="ray", **common)
    assert report["engine"]["parts"] >= 5 and report["documents"] == local["documents"]
    _assert_same(tmp_path / "local", tmp_path / "ray")
    lines[240] = '{"text": 5}'
    (tmp_path / "bad.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(PackcliError, match=rf"^{tmp_path / 'bad.jsonl'}:241: "):
        _pack([tmp_path / "bad.jsonl"], tmp_path / "bad", word_tokenizer, engine="ray")


@pytest.fixture(scope="module")
def grouped_corpus(tmp_path_factory) -> Path:
    """Records with a `source` field whose values first appear in different files (a value
    new in the third file, null, and 1 beside "1"), so the parts' own group ids differ from
    the ids over the whole input."""
    root = tmp_path_factory.mktemp("grouped")
    texts = random_texts(360, seed=23, max_words=80)
    sources: list = ["web", "code", 1, "1", None]
    for n in range(3):
        records = [{"text": t, "source": sources[(i * (n + 2)) % (3 + n)]} for i, t in enumerate(texts[n * 90 :][:90])]
        write_jsonl(root / f"{n}.jsonl", records)
    rest = texts[270:]
    names = ["books", "code", None, "web"]
    pq.write_table(pa.table({"text": rest, "source": [names[i % 4] for i in range(len(rest))]}), root / "3.parquet")
    return root


GROUPED = [
    ("bin", "parquet", {"shuffle": True, "seed": 5}),
    ("concat", "npy", {"shuffle": True}),
    ("bin", "npy", {"algorithm": "spfhp", "max_sequences_per_row": 2}),
    ("concat", "parquet", {"remainder": "drop"}),
    ("bin", "npy", {"pad_to_multiple_of": 8}),  # pads after each segment: the group hash takes real tokens only
]


@pytest.mark.parametrize(("mode", "fmt", "extra"), GROUPED, ids=[f"{m}-{f}-{sorted(e)[-1]}" for m, f, e in GROUPED])
def test_group_by_on_ray_is_byte_identical_to_local(
    cluster, grouped_corpus, word_tokenizer, tmp_path, mode, fmt, extra
):
    from packcli.inspect.verify import verify_dir

    common = {"mode": mode, "format": fmt, "rows_per_shard": 20, "group_by": "source", **extra}
    local = _pack([grouped_corpus], tmp_path / "local", word_tokenizer, **common)
    report = _pack([grouped_corpus], tmp_path / "ray", word_tokenizer, engine="ray", **common)
    _assert_same(tmp_path / "local", tmp_path / "ray")
    assert [g["value"] for g in report["groups"]] == ["web", 1, "code", "1", None, "books"]
    assert report["groups"] == local["groups"]
    assert report.get("max_sequences_per_row") == local.get("max_sequences_per_row")
    assert verify_dir(tmp_path / "ray")["groups"] == 6


def test_max_sequences_per_row_on_ray_is_byte_identical_to_local(cluster, corpus, word_tokenizer, tmp_path):
    common = {"mode": "bin", "format": "parquet", "rows_per_shard": 20, "max_sequences_per_row": 1}
    local = _pack([corpus], tmp_path / "local", word_tokenizer, **common)
    report = _pack([corpus], tmp_path / "ray", word_tokenizer, engine="ray", **common)
    _assert_same(tmp_path / "local", tmp_path / "ray")
    assert report["max_sequences_per_row"] == local["max_sequences_per_row"]
    assert report["max_sequences_per_row"]["extra_rows"] > 0


def test_a_resumed_grouped_run_keeps_its_parts(cluster, grouped_corpus, word_tokenizer, tmp_path, monkeypatch):
    """A driver stopped before the manifest: --resume takes the group tables and ids from
    the complete parts (no part task runs) and writes the same output."""

    common = {"mode": "bin", "format": "parquet", "rows_per_shard": 20, "group_by": "source", "shuffle": True}
    spill, out = tmp_path / "spill", tmp_path / "ray"
    _pack([grouped_corpus], tmp_path / "local", word_tokenizer, **common)

    _stop_the_driver_before_its_manifest(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        _pack([grouped_corpus], out, word_tokenizer, engine="ray", tmp_dir=str(spill), **common)
    monkeypatch.undo()
    assert not (out / "manifest.json").exists()
    report = _pack([grouped_corpus], out, word_tokenizer, engine="ray", resume=True, tmp_dir=str(spill), **common)
    assert report["engine"]["parts_reused"] == 4
    _assert_same(tmp_path / "local", out)


def test_a_worker_keeps_its_tokenizer_while_the_options_and_the_tokenizer_are_the_same(word_tokenizer):
    """Loaded once per worker process (by the warm-up, or the first part): reused for other
    inputs and outputs, loaded again for other options, another fingerprint or backend."""
    from dataclasses import replace

    from packcli.engine.ray_tasks import worker_setup

    opts = PackOptions(inputs=["a.jsonl"], output="out", tokenizer=str(word_tokenizer), seq_len=16)
    first = worker_setup(opts, None)
    assert worker_setup(replace(opts, inputs=["b.jsonl"], output="other"), first.fingerprint) is first
    assert worker_setup(replace(opts, tokenizer_backend=first.backend), None) is first
    other_backend = "tiktoken" if first.backend == "hf" else "hf"
    assert worker_setup(replace(opts, tokenizer_backend=other_backend), None) is not first
    second = worker_setup(opts, None)
    assert worker_setup(opts, "another tokenizer") is not second
    third = worker_setup(opts, None)
    assert worker_setup(replace(opts, eos=False), None) is not third


SORTED = [
    ("plain", {"shuffle": True, "seed": 3}),
    ("grouped-padded", {"group_by": "source", "pad_to_multiple_of": 4, "shuffle": True}),
]


@pytest.mark.parametrize(("name", "extra"), SORTED, ids=[n for n, _ in SORTED])
def test_local_through_the_sorted_spill_is_byte_identical_to_ray(
    cluster, grouped_corpus, word_tokenizer, tmp_path, monkeypatch, name, extra
):
    """The local engine reads rows of many sequences from the spill sorted by length (forced
    here); the Ray engine from the parts: the same bytes."""
    from packcli.engine import job as engine_job
    from packcli.inspect.verify import verify_dir

    monkeypatch.setattr(engine_job, "BY_BUCKET_SEQUENCES_PER_ROW", 1)
    common = {"mode": "bin", "format": "npy", "rows_per_shard": 20, **extra}
    local = _pack([grouped_corpus], tmp_path / "local", word_tokenizer, **common)
    report = _pack([grouped_corpus], tmp_path / "ray", word_tokenizer, engine="ray", **common)
    _assert_same(tmp_path / "local", tmp_path / "ray")
    assert report["rows"] == local["rows"]
    verify_dir(tmp_path / "local")


@settings(max_examples=40, deadline=None)
@given(
    parts=st.lists(st.lists(st.integers(1, 12), max_size=40), min_size=1, max_size=4),
    masked=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_the_sorted_parts_read_as_the_sorted_whole(tmp_path_factory, parts, masked, seed):
    """Pieces placed in the parts' own sorted copies (joined end to end) by the ranks of
    the whole input's sorted file: the same tokens and learned bits as from the whole one."""
    from packcli.engine.ray_tasks import PartedSortedCopy, part_histogram
    from packcli.plan.buckets import Buckets
    from packcli.write.by_length import sort_spill
    from packcli.write.spill import SpillWriter

    seq_len = 12
    rng = np.random.default_rng(seed)
    root = tmp_path_factory.mktemp("parts")
    lengths = [np.array(p, dtype=np.int64) for p in parts]
    tokens = [rng.integers(1, 60_000, int(p.sum())).astype(np.uint16) for p in lengths]
    learned = [rng.random(len(t)) < 0.5 if masked else None for t in tokens]

    def spilled(name, t, n, f):
        writer = SpillWriter(root / name, np.dtype(np.uint16), masked)
        writer.append(t, n, f)
        return writer.finish({})

    whole_spill = spilled(
        "whole",
        np.concatenate(tokens),
        np.concatenate(lengths),
        np.concatenate(learned) if masked else None,
    )
    counts = np.bincount(np.concatenate(lengths), minlength=seq_len + 1)
    buckets = Buckets.from_histograms([counts], seq_len)
    whole = sort_spill(whole_spill, buckets, seq_len, 1)
    dirs = []
    for i, (t, n, f) in enumerate(zip(tokens, lengths, learned)):
        spill = spilled(f"part-{i}", t, n, f)
        sort_spill(spill, Buckets.from_histograms([part_histogram(root / f"part-{i}", seq_len)], seq_len), seq_len, 1)
        spill.close()
        dirs.append(str(root / f"part-{i}"))
    part_counts = np.array([part_histogram(Path(d), seq_len)[buckets.length] for d in dirs]).reshape(len(dirs), -1)
    reader = PartedSortedCopy(dirs, buckets, part_counts)
    total = int(buckets.rank[-1])
    ranks = rng.permutation(total)[: rng.integers(0, total + 1)]
    starts = buckets.starts(ranks)
    sizes = buckets.length[np.searchsorted(buckets.rank, ranks, side="right") - 1]
    bucket = np.searchsorted(buckets.rank, ranks, side="right") - 1
    joined = reader.where.positions(bucket, ranks - buckets.rank[bucket])  # the parts' copies end to end
    a, b = whole.read_block(starts, sizes), reader.read_block(joined, sizes)
    for k in range(len(ranks)):
        n = int(sizes[k])
        assert (
            b.tokens[b.token_at[k] : b.token_at[k] + n].tolist() == a.tokens[a.token_at[k] : a.token_at[k] + n].tolist()
        )
        if masked:
            bits_a = np.unpackbits(a.learned, bitorder="little")[a.bit_at[k] : a.bit_at[k] + n]
            bits_b = np.unpackbits(b.learned, bitorder="little")[b.bit_at[k] : b.bit_at[k] + n]
            assert bits_a.tolist() == bits_b.tolist()
    reader.close()
    whole.close()
    whole_spill.close()


@pytest.fixture(scope="module")
def short_corpus(tmp_path_factory) -> Path:
    """Prompt/completion records of 1 to 10 words (rows of many sequences at --seq-len 96)
    in four parts; the second has only 1 to 3 words, so it lacks most lengths."""
    root = tmp_path_factory.mktemp("short")
    texts = random_texts(1300, seed=31, max_words=10)
    few = [t for t in texts[400:800] if len(t.split()) <= 3]
    for n, part in enumerate([texts[:400], few, texts[800:1100]]):
        write_jsonl(root / f"{n}.jsonl", [{"text": t, "prompt": t.split()[0], "completion": t} for t in part])
    rest = texts[1100:]
    pq.write_table(
        pa.table({"text": rest, "prompt": [t.split()[0] for t in rest], "completion": rest}), root / "3.parquet"
    )
    return root


SFT = {"prompt_field": "prompt", "completion_field": "completion"}
FLAT = [
    ("parquet", {"shuffle": True, "seed": 3}),
    ("npy", {"algorithm": "spfhp"}),
    ("npy", {**SFT, "algorithm": "lpfhp", "shuffle": True}),
]


@pytest.mark.parametrize(("fmt", "extra"), FLAT, ids=["parquet", "npy-spfhp", "npy-labels"])
def test_short_sequences_on_ray_are_planned_from_the_histogram(
    cluster, short_corpus, word_tokenizer, tmp_path, monkeypatch, fmt, extra
):
    """Rows of many short sequences: both engines plan from the histogram alone (the driver
    never reads the lengths), and the shard tasks read the parts' sorted copies."""
    from packcli.engine import job as engine_job
    from packcli.engine import ray_driver

    def no_lengths(*args, **kwargs):
        raise AssertionError("planned from the lengths")

    monkeypatch.setattr(engine_job.PlanStep, "plan_lengths", no_lengths)  # the plan step of both engines
    monkeypatch.setattr(ray_driver, "LENGTHS_FILE", "not-read")
    common = {"mode": "bin", "format": fmt, "rows_per_shard": 20, **extra}
    local = _pack([short_corpus], tmp_path / "local", word_tokenizer, **common)
    report = _pack([short_corpus], tmp_path / "ray", word_tokenizer, engine="ray", **common)
    _assert_same(tmp_path / "local", tmp_path / "ray")
    for key in ("rows", "sequences_packed", "real_tokens", "label_tokens", "efficiency"):
        assert report[key] == local[key], key
    assert report["sequences_packed"] >= 8 * report["rows"]
    shards = {name.split("/")[0] for name in _files(tmp_path / "ray")}
    assert report["engine"]["tasks"] == 4 + 4 + len(shards)  # a part task and a sort task per part
    assert report["engine"]["retries"] == 0


def test_a_killed_sort_task_is_retried_and_a_resumed_driver_keeps_the_sorted_parts(
    cluster, short_corpus, word_tokenizer, faults, tmp_path, monkeypatch
):
    """A sort task killed mid-way is retried; a driver stopped before the manifest, with
    one part's sorted copy left half-written, keeps the parts and the whole copies on
    --resume and sorts that one part again: the same output."""
    from packcli.engine.ray_tasks import SORTED_COMPLETE_FILE, part_path
    from packcli.write.by_length import SORTED_TOKENS_FILE

    common = {"mode": "bin", "format": "npy", "rows_per_shard": 20, **SFT, "shuffle": True}
    spill, out = tmp_path / "spill", tmp_path / "ray"
    _pack([short_corpus], tmp_path / "local", word_tokenizer, **common)
    (faults / "arm-sort-2").touch()

    _stop_the_driver_before_its_manifest(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        _pack([short_corpus], out, word_tokenizer, engine="ray", tmp_dir=str(spill), **common)
    monkeypatch.undo()
    assert (faults / "fired-sort-2").exists()
    assert not (out / "manifest.json").exists()
    (run_spill,) = spill.glob("packcli-spill-*")
    half = part_path(run_spill, 1)
    (half / SORTED_COMPLETE_FILE).unlink()
    with open(half / SORTED_TOKENS_FILE, "r+b") as f:
        f.truncate(f.seek(0, 2) // 2)
    report = _pack([short_corpus], out, word_tokenizer, engine="ray", resume=True, tmp_dir=str(spill), **common)
    shards = {name.split("/")[0] for name in _files(out)}
    assert report["engine"]["parts_reused"] == 4
    assert report["engine"]["tasks"] == 1 + len(shards)  # part 1 sorted again, every shard task (for its stats)
    _assert_same(tmp_path / "local", out)


# ----------------------------------------------------------------------------- mixtures


MIX_CASES = [
    ("bin", "parquet", {"holdout": 0.2}),
    ("concat", "npy", {"holdout": 0.3, "holdout_key": "prompt"}),
    ("bin", "npy", {"algorithm": "ffd", "pad_to_multiple_of": 8}),
]


@pytest.mark.parametrize(("mode", "fmt", "extra"), MIX_CASES)
def test_a_mixture_on_ray_is_byte_identical_to_local(
    cluster, corpus, word_tokenizer, tmp_path, monkeypatch, mode, fmt, extra
):
    """Sources read by one task per part (files cut small here, so a source is several
    parts), then the same outputs as the local engine writes, byte for byte."""
    from packcli.core.mixture import MixSpec, SourceSpec
    from packcli.engine import ray_driver
    from packcli.engine.pack import run_pack as run_any

    monkeypatch.setattr(ray_driver, "PART_BYTES", 4000)
    spec = MixSpec(
        (
            SourceSpec("a", (str(corpus / "0.jsonl"), str(corpus / "1.jsonl")), {}, 0.5, None),
            SourceSpec("b", (str(corpus / "2.jsonl"),), {}, None, 2.5),
            SourceSpec(
                "c", (str(corpus / "3.parquet"),), {"prompt_field": "prompt", "completion_field": "completion"}, 0.5
            ),
        ),
        seed=5,
    )

    def pack(engine: str) -> Path:
        out = tmp_path / engine
        opts = PackOptions(
            inputs=[], output=str(out), tokenizer=str(word_tokenizer), seq_len=96, mode=mode, format=fmt,
            mix=spec, engine=engine, rows_per_shard=8, **extra,
        )  # fmt: skip
        run_any(opts)
        return out

    local, on_ray = pack("local"), pack("ray")
    outputs = ["train", "validation"] if "holdout" in extra else [""]
    for name in outputs:
        _assert_same(local / name, on_ray / name)
        assert (
            json.loads((on_ray / name / "report.json").read_text())["sources"]
            == json.loads((local / name / "report.json").read_text())["sources"]
        )
    assert not (on_ray / ".packcli-spill-sources").exists()


# ----------------------------------------------------------------------------- preference pairs and weights


@pytest.fixture(scope="module")
def pair_corpus(tmp_path_factory) -> Path:
    """Preference pairs with a weight (and a group), in three JSONL files and a Parquet file."""
    root = tmp_path_factory.mktemp("pairs")
    texts = random_texts(480, seed=29, max_words=40)
    records = [
        {
            "prompt": texts[3 * i],
            "chosen": texts[3 * i + 1],
            "rejected": texts[3 * i + 2] + " w1",
            "w": (i % 5) / 2,
            "g": i % 3,
        }
        for i in range(160)
    ]
    for n in range(3):
        write_jsonl(root / f"{n}.jsonl", records[n * 40 : (n + 1) * 40])
    rest = records[120:]
    pq.write_table(pa.table({key: [r[key] for r in rest] for key in rest[0]}), root / "3.parquet", row_group_size=15)
    return root


PAIRS = {"prompt_field": "prompt", "chosen_field": "chosen", "rejected_field": "rejected"}
PAIR_CASES = [
    ("bin", "parquet", {**PAIRS, "weight_field": "w", "shuffle": True, "seed": 2}),
    ("concat", "npy", PAIRS),
    ("bin", "npy", {**PAIRS, "group_by": "g", "pad_to_multiple_of": 8, "algorithm": "ffd"}),
    ("bin", "parquet", {"text_field": "chosen", "weight_field": "w"}),
]


@pytest.mark.parametrize(
    ("mode", "fmt", "extra"),
    PAIR_CASES,
    ids=[f"{m}-{f}-{'pairs' if 'chosen_field' in e else 'weights'}" for m, f, e in PAIR_CASES],
)
def test_pairs_and_weights_on_ray_are_byte_identical_to_local(
    cluster, pair_corpus, word_tokenizer, tmp_path, mode, fmt, extra
):
    from packcli.inspect.verify import verify_dir

    common = {"mode": mode, "format": fmt, "rows_per_shard": 8, "seq_len": 128, **extra}
    local = dict(run_pack(PackOptions([str(pair_corpus)], str(tmp_path / "local"), str(word_tokenizer), **common)))
    opts = PackOptions([str(pair_corpus)], str(tmp_path / "ray"), str(word_tokenizer), engine="ray", **common)
    report = dict(run_pack(opts))
    _assert_same(tmp_path / "local", tmp_path / "ray")
    assert report.get("pairs") == local.get("pairs") and report["documents"] == local["documents"]
    verified = verify_dir(tmp_path / "ray")
    if "chosen_field" in extra:
        weighted = "weight_field" in extra
        kept = 160 - (32 if weighted else 0)  # a weight of 0 drops the pair: i % 5 == 0
        assert report["pairs"]["pairs"] == kept and verified["sequences"] == 2 * kept
