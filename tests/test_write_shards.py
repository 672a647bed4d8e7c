"""Shard writers and readers: round trips, byte stability, and atomic names."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from packcli.core.errors import PackcliError
from packcli.inspect.verify import check_rows
from packcli.plan.rows import Rows, build_rows
from packcli.write.columns import NPY_FILES
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


# ----------------------------------------------------------------------------- per-segment columns


def tagged(rows: Rows, seed: int = 0, weight: bool = False) -> Rows:
    """The rows with a segment_source (and, with `weight`, a float segment_weight) per real segment."""
    rng = np.random.default_rng(seed)
    count = int(rows.num_segments.sum())
    rows.segment_columns = {"segment_source": rng.integers(0, 5, size=count).astype(np.int32)}
    if weight:
        rows.segment_columns["segment_weight"] = rng.random(count).astype(np.float32)
    return rows


def write_cut(out, rows: Rows, fmt: str, cuts: list[int], rows_per_shard: int) -> list:
    writer = ShardWriter(out, fmt, rows.seq_len, rows_per_shard=rows_per_shard, vocab_size=70_000)
    start = 0
    for stop in [*cuts, len(rows)]:
        writer.add(rows.slice(start, stop))
        start = stop
    return writer.close()


def assert_same_segments(got: Rows, want: Rows) -> None:
    for name in ("input_ids", "cu_seqlens", "cu_offsets", "num_segments"):
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name), err_msg=name)
    assert sorted(got.segment_columns) == sorted(want.segment_columns)
    for name, values in want.segment_columns.items():
        assert got.segment_columns[name].dtype == values.dtype, name
        np.testing.assert_array_equal(got.segment_columns[name], values, err_msg=name)


@settings(max_examples=25, deadline=None)
@given(
    st.integers(1, 60),
    st.sampled_from(["parquet", "npy"]),
    st.lists(st.integers(0, 60), max_size=4),
    st.integers(1, 25),
    st.integers(1, 9),
    st.integers(0, 1000),
)
def test_segment_columns_round_trip(tmp_path_factory, n_rows, fmt, cuts, rows_per_shard, block_rows, seed):
    out = tmp_path_factory.mktemp("shards")
    rows = tagged(make_rows(n_rows, seed=seed), seed, weight=seed % 2 == 1)
    shards = write_cut(out, rows, fmt, sorted(c for c in cuts if c < n_rows), rows_per_shard)
    blocks = [block for s in shards for block in read_shard(out / s.path, fmt, 16, block_rows=block_rows)]
    back = Rows.concat(blocks)
    assert_same_segments(back, rows)
    assert all(len(b.segment_columns["segment_source"]) == int(b.num_segments.sum()) for b in blocks)
    check_rows(back, seq_len=16, pad_id=3, sources=5)


@pytest.mark.parametrize("fmt", ["parquet", "npy"])
def test_segment_columns_on_disk(tmp_path, fmt):
    """Parquet: one list per row; npy: flat values and one shared segment_offsets.npy (CSR)."""
    rows = tagged(make_rows(12, seed=3), weight=True)
    shard = tmp_path / write_cut(tmp_path, rows, fmt, [5], 100)[0].path
    offsets = rows.seg_offsets
    want = [rows.segment_columns["segment_source"][offsets[r] : offsets[r + 1]].tolist() for r in range(12)]
    if fmt == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pq.read_table(shard)
        assert table.schema.field("segment_source").type == pa.list_(pa.int32())
        assert table.schema.field("segment_weight").type == pa.list_(pa.float32())
        assert table.column("segment_source").to_pylist() == want
        return
    assert sorted(p.name for p in shard.iterdir()) == sorted(
        [*NPY_FILES, "max_seqlen.npy", "segment_offsets.npy", "segment_source.npy", "segment_weight.npy"]
    )
    seg_offsets = np.load(shard / "segment_offsets.npy", mmap_mode="r")
    source = np.load(shard / "segment_source.npy", mmap_mode="r")
    assert seg_offsets.dtype == np.int64 and seg_offsets.tolist() == offsets.tolist()
    assert source.dtype == np.int32 and np.load(shard / "segment_weight.npy").dtype == np.float32
    assert [source[seg_offsets[r] : seg_offsets[r + 1]].tolist() for r in range(12)] == want
    before = checksum(shard)
    for name in ("segment_source.npy", "segment_offsets.npy"):  # the checksum covers the new files too
        data = bytearray((shard / name).read_bytes())
        data[-1] ^= 1
        (shard / name).write_bytes(bytes(data))
        assert checksum(shard) != before
        data[-1] ^= 1
        (shard / name).write_bytes(bytes(data))
    assert checksum(shard) == before


@pytest.mark.parametrize("fmt", ["parquet", "npy"])
def test_shards_without_segment_columns_hold_no_new_file_or_column(tmp_path, fmt):
    shard = tmp_path / write_cut(tmp_path, make_rows(9), fmt, [], 100)[0].path
    if fmt == "parquet":
        import pyarrow.parquet as pq

        names = pq.read_schema(shard).names
        assert names == ["input_ids", "labels", "position_ids", "cu_seqlens", "num_segments", "max_seqlen"]
    else:
        assert sorted(p.name for p in shard.iterdir()) == sorted([*NPY_FILES, "max_seqlen.npy"])
    assert all(block.segment_columns == {} for block in read_shard(shard, fmt, 16))


def test_a_parquet_shard_with_segment_columns_loads_with_datasets(tmp_path):
    import datasets

    rows = tagged(make_rows(8, seed=4, vocab=300))
    shard = tmp_path / write_cut(tmp_path, rows, "parquet", [], 100)[0].path
    ds = datasets.load_dataset("parquet", data_files=str(shard), split="train", cache_dir=str(tmp_path / "cache"))
    offsets = rows.seg_offsets
    assert ds["segment_source"] == [
        rows.segment_columns["segment_source"][offsets[r] : offsets[r + 1]].tolist() for r in range(8)
    ]
    assert ds["num_segments"] == rows.num_segments.tolist()


def test_the_page_reader_gives_the_segment_columns_and_leaves_empty_lists_to_pyarrow(tmp_path):
    from packcli.write.shard_pages import ShardPages

    full = tagged(make_rows(30, seed=5))
    every = np.flatnonzero(full.num_segments > 0)
    rows = tagged(full.take(every), 5)  # every row with a segment: no empty list
    for name, sample, readable in (("full", rows, True), ("empty", full, False)):
        out = tmp_path / name
        out.mkdir()
        shard = out / write_cut(out, sample, "parquet", [], 100)[0].path
        pages = ShardPages.of(shard)
        assert (pages is not None) == readable and (full.num_segments == 0).any()
        if pages is not None:
            assert_same_segments(Rows.concat(list(pages.rows(16))), sample)


@pytest.mark.parametrize("fmt", ["parquet", "npy"])
@pytest.mark.parametrize("tagged_first", [True, False])
def test_rows_that_change_segment_columns_inside_a_shard_are_refused(tmp_path, fmt, tagged_first):
    rows = make_rows(10)
    first, second = tagged(rows.slice(0, 5)), rows.slice(5, 10)
    writer = ShardWriter(tmp_path, fmt, 16, rows_per_shard=100, vocab_size=70_000)
    writer.add(first if tagged_first else second)
    with pytest.raises(PackcliError, match="segment columns"):
        writer.add(second if tagged_first else first)
        writer.close()
    writer.abort()


def test_an_npy_segment_offsets_file_that_does_not_fit_is_named(tmp_path):
    rows = tagged(make_rows(6, seed=2))
    shard = tmp_path / write_cut(tmp_path, rows, "npy", [], 100)[0].path
    offsets = np.load(shard / "segment_offsets.npy")
    offsets[3] += 1
    np.save(shard / "segment_offsets.npy", offsets)
    with pytest.raises(PackcliError, match=r"shard-00000 row 2: segment_source has \d+ entries, num_segments is"):
        list(read_shard(shard, "npy", 16))
    (shard / "segment_offsets.npy").unlink()
    with pytest.raises(PackcliError, match="without segment_offsets.npy"):
        list(read_shard(shard, "npy", 16))
