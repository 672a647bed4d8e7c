"""Shard writers and readers: round trips, byte stability, and atomic names."""

from __future__ import annotations

import numpy as np
import pytest

from packcli.inspect.verify import check_rows
from packcli.plan.rows import Rows, build_rows
from packcli.write.shard_reader import read_shard
from packcli.write.shards import ShardWriter, checksum


def make_rows(n_rows: int, seq_len: int = 16, seed: int = 0, vocab: int = 70_000) -> Rows:
    rng = np.random.default_rng(seed)
    lengths, row_of, offset_of = [], [], []
    for r in range(n_rows):
        used = 0
        while used < seq_len and rng.random() < 0.8:
            n = int(rng.integers(1, seq_len - used + 1))
            lengths.append(n)
            row_of.append(r)
            offset_of.append(used)
            used += n
    tokens = rng.integers(0, vocab, size=sum(lengths), dtype=np.int32)
    starts = np.cumsum([0] + lengths[:-1]) if lengths else []
    return build_rows(tokens, None, starts, lengths, row_of, offset_of, n_rows, seq_len, 3)


def read_all(path, fmt, seq_len=16) -> Rows:
    return Rows.concat(list(read_shard(path, fmt, seq_len, block_rows=5)))


@pytest.mark.parametrize("fmt", ["parquet", "npy"])
def test_round_trip(tmp_path, fmt):
    rows = make_rows(23)
    writer = ShardWriter(tmp_path, fmt, 16, rows_per_shard=10, vocab_size=70_000)
    writer.add(rows.slice(0, 4))
    writer.add(rows.slice(4, 23))
    shards = writer.close()
    assert [s.rows for s in shards] == [10, 10, 3]
    assert sum(s.sequences for s in shards) == int(rows.num_segments.sum())
    assert sum(s.real_tokens for s in shards) == int(rows.real_lengths().sum())
    back = Rows.concat([read_all(tmp_path / s.path, fmt) for s in shards])
    for name in ("input_ids", "labels", "position_ids", "cu_seqlens", "cu_offsets", "num_segments"):
        np.testing.assert_array_equal(getattr(back, name), getattr(rows, name), err_msg=name)
    check_rows(back, seq_len=16, pad_id=3)
    assert sorted(p.name for p in tmp_path.iterdir()) == [s.path for s in shards]  # no temporary left


@pytest.mark.parametrize("fmt", ["parquet", "npy"])
def test_bytes_do_not_depend_on_how_rows_arrive(tmp_path, fmt):
    rows = make_rows(3000, seed=1)
    outputs = []
    for name, cuts in (("a", [3000]), ("b", [1, 999, 2000, 3000]), ("c", list(range(7, 3000, 7)) + [3000])):
        out = tmp_path / name
        out.mkdir()
        writer = ShardWriter(out, fmt, 16, rows_per_shard=2500, vocab_size=70_000)
        start = 0
        for stop in cuts:
            writer.add(rows.slice(start, stop))
            start = stop
        outputs.append([checksum(out / s.path) for s in writer.close()])
    assert outputs[0] == outputs[1] == outputs[2]


def test_npy_files_load_with_mmap_and_have_the_spec_dtypes(tmp_path):
    rows = make_rows(5, vocab=300)
    writer = ShardWriter(tmp_path, "npy", 16, rows_per_shard=100, vocab_size=300)
    writer.add(rows)
    shard = tmp_path / writer.close()[0].path
    expected = {
        "input_ids.npy": (np.uint16, (5, 16)),
        "labels.npy": (np.int32, (5, 16)),
        "position_ids.npy": (np.int32, (5, 16)),
        "cu_seqlens.npy": (np.int32, (len(rows.cu_seqlens),)),
        "cu_seqlens_offsets.npy": (np.int64, (6,)),
        "num_segments.npy": (np.int32, (5,)),
    }
    for name, (dtype, shape) in expected.items():
        array = np.load(shard / name, mmap_mode="r")
        assert array.dtype == dtype and array.shape == shape, name
    np.testing.assert_array_equal(np.load(shard / "input_ids.npy"), rows.input_ids)
    np.testing.assert_array_equal(np.load(shard / "cu_seqlens.npy"), rows.cu_seqlens)


def test_abort_leaves_only_finished_shards(tmp_path):
    rows = make_rows(15)
    writer = ShardWriter(tmp_path, "parquet", 16, rows_per_shard=10, vocab_size=70_000)
    writer.add(rows)  # one finished shard, one in progress
    assert any(p.name.startswith(".shard-") for p in tmp_path.iterdir())
    writer.abort()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shard-00000.parquet"]


def test_checksum_sees_a_changed_byte(tmp_path):
    rows = make_rows(5)
    writer = ShardWriter(tmp_path, "npy", 16, rows_per_shard=100, vocab_size=70_000)
    writer.add(rows)
    info = writer.close()[0]
    path = tmp_path / info.path / "labels.npy"
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))
    assert checksum(tmp_path / info.path) != info.checksum


@pytest.mark.parametrize(
    "array",
    [
        np.arange(12, dtype=np.int32).reshape(3, 4),
        np.arange(12, dtype=">u2").reshape(3, 4),
        np.asfortranarray(np.arange(12, dtype=np.int64).reshape(3, 4)),
        np.zeros((0, 5), dtype=np.int32),
        np.array(7, dtype=np.int32),
    ],
    ids=["int32", "big-endian", "fortran", "empty", "scalar"],
)
def test_map_npy_reads_what_np_load_reads(tmp_path, array):
    from packcli.write.shard_reader import map_npy

    path = tmp_path / "a.npy"
    np.save(path, array)
    mapped = map_npy(path)
    assert mapped.dtype == array.dtype and mapped.shape == array.shape
    assert mapped.flags.f_contiguous == np.load(path).flags.f_contiguous
    assert np.array_equal(mapped, array)
    with pytest.raises(ValueError, match="read-only"):
        mapped[...] = 0


def test_map_npy_reads_version_2_headers(tmp_path):
    from packcli.write.shard_reader import map_npy

    path = tmp_path / "a.npy"
    with open(path, "wb") as file:
        np.lib.format.write_array(file, np.arange(5, dtype=np.int16), version=(2, 0))
    assert map_npy(path).tolist() == [0, 1, 2, 3, 4]


@pytest.mark.parametrize(
    "damage",
    [
        lambda data: data[: len(data) - 3],  # cut short
        lambda data: b"not a numpy file at all" + data,
        lambda data: data[:20],  # the header itself cut
    ],
    ids=["truncated", "garbage", "header-cut"],
)
def test_map_npy_names_the_file_it_cannot_read(tmp_path, damage):
    from packcli.core.errors import PackcliError
    from packcli.write.shard_reader import map_npy

    path = tmp_path / "shard-00000" / "labels.npy"
    path.parent.mkdir()
    np.save(path, np.arange(10, dtype=np.int32))
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(PackcliError, match=r"^shard-00000/labels\.npy: not a readable \.npy file"):
        map_npy(path)


def test_map_npy_refuses_object_arrays(tmp_path):
    from packcli.core.errors import PackcliError
    from packcli.write.shard_reader import map_npy

    path = tmp_path / "a.npy"
    np.save(path, np.array([1, "x"], dtype=object), allow_pickle=True)
    with pytest.raises(PackcliError, match="object arrays"):
        map_npy(path)
