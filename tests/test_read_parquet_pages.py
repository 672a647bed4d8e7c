"""Parquet shards read page by page: the same rows as pyarrow's reader, on every layout
the module accepts, and a clear error or pyarrow's path for the rest."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers import packages_a_pack_imports
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from packcli.core import jit
from packcli.core.errors import PackcliError
from packcli.inspect.verify import verify_dir
from packcli.read.parquet_pages import dictionary_values, id_list_batches, level_positions
from packcli.write.shard_pages import ShardPages
from packcli.write.shard_reader import read_shard_parquet
from tests.naive_parquet import decode_hybrid, encode_hybrid

ROW_FIELDS = ("input_ids", "labels", "position_ids", "cu_seqlens", "cu_offsets", "num_segments", "max_seqlen")


def _shard(path: Path, rng: np.random.Generator, rows: int, seq_len: int, unpadded: bool = False, **options) -> Path:
    """A shard of packcli's columns with random values (the checks of verify are not the point)."""
    width = np.arange(0, (rows + 1) * seq_len, seq_len, dtype=np.int32)
    segments = rng.integers(1, 5, size=rows)
    cu_offsets = np.concatenate([[0], np.cumsum(segments + 1)]).astype(np.int32)
    cu = rng.integers(0, seq_len + 1, size=int(cu_offsets[-1]), dtype=np.int32)

    def fixed() -> pa.Array:
        return pa.ListArray.from_arrays(
            pa.array(width), pa.array(rng.integers(-100, 70_000, size=rows * seq_len, dtype=np.int32))
        )

    columns = {
        "input_ids": fixed(),
        "labels": fixed(),
        "position_ids": fixed(),
        "cu_seqlens": pa.ListArray.from_arrays(pa.array(cu_offsets), pa.array(cu)),
        "num_segments": pa.array(segments.astype(np.int32)),
        "max_seqlen": pa.array(rng.integers(0, seq_len, size=rows, dtype=np.int32)),
    }
    if unpadded:
        columns["cu_seqlens_unpadded"] = pa.ListArray.from_arrays(pa.array(cu_offsets), pa.array(cu // 2))
    pq.write_table(pa.table(columns), str(path), **options)
    return path


def _joined(blocks) -> dict[str, np.ndarray]:
    """Every field of a run of row blocks, joined (cu_offsets made global)."""
    blocks = list(blocks)
    out = {
        name: np.concatenate([np.asarray(getattr(b, name)).reshape(-1) for b in blocks])
        for name in ROW_FIELDS
        if name != "cu_offsets"
    }
    ends = np.cumsum([0] + [int(b.cu_offsets[-1]) for b in blocks])
    out["cu_offsets"] = np.concatenate([[0]] + [b.cu_offsets[1:] + ends[i] for i, b in enumerate(blocks)])
    if blocks[0].cu_seqlens_unpadded is not None:
        out["cu_seqlens_unpadded"] = np.concatenate([b.cu_seqlens_unpadded for b in blocks])
    return out


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    rows=st.integers(1, 40),
    seq_len=st.integers(1, 300),
    codec=st.sampled_from(["zstd", "snappy", "gzip", "none"]),
    version=st.sampled_from(["1.0", "2.0"]),
    page_bytes=st.sampled_from([64, 1000, 1 << 20]),
    group_rows=st.integers(1, 50),
    unpadded=st.booleans(),
    dictionary=st.booleans(),
)
def test_rows_are_pyarrows(
    tmp_path_factory, seed, rows, seq_len, codec, version, page_bytes, group_rows, unpadded, dictionary
):
    """Pages that split rows, several row groups, each codec and page version: the same
    arrays as pyarrow's reader (shard_reader.read_shard_parquet)."""
    options = {
        "compression": codec,
        "use_dictionary": dictionary,
        "data_page_version": version,
        "data_page_size": page_bytes,
        "row_group_size": group_rows,
        "write_statistics": False,
    }
    path = _shard(
        tmp_path_factory.mktemp("pq") / "s.parquet", np.random.default_rng(seed), rows, seq_len, unpadded, **options
    )
    pages = ShardPages.of(path)
    assert pages is not None
    got, want = _joined(pages.rows(seq_len)), _joined(read_shard_parquet(path, seq_len))
    assert got.keys() == want.keys()
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    assert len(list(pages.rows(seq_len))) == pq.read_metadata(path).num_row_groups


def _runs(levels: list[int], draw_rle: list[bool]) -> list[tuple[bool, int]]:
    """Split `levels` into RLE runs (where asked for and the values repeat) and bit-packed groups."""
    runs, at, k = [], 0, 0
    while at < len(levels):
        same = 1
        while at + same < len(levels) and levels[at + same] == levels[at]:
            same += 1
        if draw_rle[k % len(draw_rle)]:
            runs.append((True, same))
            at += same
        else:
            groups = max(1, min(3, (len(levels) - at + 7) // 8))
            runs.append((False, groups))
            at += 8 * groups
        k += 1
    return runs


@pytest.mark.parametrize("twin", [False, True], ids=["compiled", "interpreted"])
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    data=st.data(),
    bit_width=st.integers(1, 8),
    draw_rle=st.lists(st.booleans(), min_size=1, max_size=6),
)
def test_level_positions_against_naive(monkeypatch, twin, data, bit_width, draw_rle):
    """Against tests/naive_parquet.py, compiled and as the interpreted twin a small run gets."""
    top = (1 << bit_width) - 1
    levels = data.draw(st.lists(st.integers(0, top), min_size=1, max_size=200))
    repeats = data.draw(st.integers(1, 600))  # long runs take headers of several bytes
    levels = [v for v in levels for _ in range(repeats if v == levels[0] else 1)]
    encoded = encode_hybrid(levels, bit_width, _runs(levels, draw_rle))
    assert decode_hybrid(encoded, bit_width, len(levels)) == levels  # the reference agrees with itself
    buf = np.frombuffer(b"\xff" + encoded + b"\xff", dtype=np.uint8)  # the range excludes its neighbours
    level = data.draw(st.integers(0, top))
    monkeypatch.setattr(jit, "SMALL_WORK", 1 << 30 if twin else -1)
    monkeypatch.setattr(jit, "_compiled", False)  # else every kernel stays compiled in this process
    for equal in (True, False):
        got = level_positions(buf, 1, 1 + len(encoded), bit_width, len(levels), level, equal)
        want = [i for i, v in enumerate(levels) if (v == level) == equal]
        assert got.tolist() == want


def test_level_runs_cut_short_are_an_error():
    levels = [1] * 30
    encoded = encode_hybrid(levels, 1, [(False, 4)])
    buf = np.frombuffer(encoded, dtype=np.uint8)
    with pytest.raises(ValueError, match="levels where the page has 30"):
        level_positions(buf, 0, len(encoded) - 1, 1, 30, 0, True)
    with pytest.raises(ValueError, match="levels where the page has 40"):
        level_positions(buf, 0, len(encoded), 1, 40, 0, True)  # 32 decoded, then the runs end


@pytest.mark.parametrize(
    "options",
    [
        {"compression": "lz4", "use_dictionary": False},
        {"compression": "zstd", "use_dictionary": False, "column_encoding": {"num_segments": "DELTA_BINARY_PACKED"}},
    ],
    ids=["lz4", "delta"],
)
def test_other_layouts_are_left_to_pyarrow(tmp_path, options):
    path = _shard(tmp_path / "s.parquet", np.random.default_rng(0), 5, 16, **options)
    assert ShardPages.of(path) is None
    assert len(list(read_shard_parquet(path, 16))) == 1


def _one_row_shard(input_ids: pa.Array, others: pa.Array) -> pa.Table:
    """A one-row table of packcli's shard columns: `input_ids`, and `others` in every other list column."""
    lists = {"input_ids": input_ids, "labels": others, "position_ids": others, "cu_seqlens": others}
    return pa.table({**lists, "num_segments": pa.array([1], pa.int32())})


def test_other_column_types_are_left_to_pyarrow(tmp_path):
    path = tmp_path / "s.parquet"
    ids = pa.ListArray.from_arrays(pa.array([0, 2], type=pa.int32()), pa.array([1, 2], type=pa.int64()))
    pq.write_table(_one_row_shard(ids, ids), str(path), use_dictionary=False)
    assert ShardPages.of(path) is None
    (tmp_path / "junk.parquet").write_bytes(b"not parquet")
    assert ShardPages.of(tmp_path / "junk.parquet") is None


def test_nulls_are_an_error_naming_the_file(tmp_path):
    path = tmp_path / "s.parquet"
    offsets = pa.array([0, 2], type=pa.int32())
    good = pa.ListArray.from_arrays(offsets, pa.array([1, 2], type=pa.int32()))
    holed = pa.ListArray.from_arrays(offsets, pa.array([1, None], type=pa.int32()))
    pq.write_table(_one_row_shard(holed, good), str(path), use_dictionary=False)
    pages = ShardPages.of(path)
    assert pages is not None
    with pytest.raises(PackcliError, match=r"^s\.parquet: cannot read shard \(null"):
        list(pages.rows(2))


def test_rows_of_another_width_are_named(tmp_path):
    path = _shard(tmp_path / "s.parquet", np.random.default_rng(0), 5, 16, use_dictionary=False)
    pages = ShardPages.of(path)
    assert pages is not None
    with pytest.raises(PackcliError, match=r"^s\.parquet row 0: input_ids has 16 tokens, not seq_len 8$"):
        list(pages.rows(8))


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), codec=st.sampled_from(["zstd", "none"]), version=st.sampled_from(["1.0", "2.0"]))
def test_damaged_pages_are_an_error_naming_the_file(tmp_path_factory, seed, codec, version):
    """Bytes overwritten anywhere in the column chunks (the footer intact): rows that read
    back equal to pyarrow's, or a PackcliError naming the file; never another exception."""
    rng = np.random.default_rng(seed)
    options = {"compression": codec, "use_dictionary": False, "data_page_version": version, "data_page_size": 500}
    path = _shard(tmp_path_factory.mktemp("pq") / "s.parquet", rng, 6, 32, **options)
    metadata = pq.read_metadata(path)
    data = bytearray(path.read_bytes())
    first = metadata.row_group(0).column(0).data_page_offset
    end = len(data) - 8 - int.from_bytes(data[-8:-4], "little")  # where the footer starts
    for at in rng.integers(first, end, size=int(rng.integers(1, 4))):
        data[at] = int(rng.integers(0, 256))
    path.write_bytes(bytes(data))
    pages = ShardPages.of(path)
    assert pages is not None
    try:
        rows = list(pages.rows(32))
    except PackcliError as exc:
        assert str(exc).startswith("s.parquet")
        return
    assert sum(len(r) for r in rows) == 6


@pytest.mark.parametrize("twin", [False, True], ids=["compiled", "interpreted"])
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), bit_width=st.integers(0, 32), draw_rle=st.lists(st.booleans(), min_size=1, max_size=6))
def test_dictionary_values_against_naive(monkeypatch, twin, data, bit_width, draw_rle):
    """Indices of every width (a page's last values read byte by byte), against the naive
    decoder, looked up in the dictionary; an index past it is an error."""
    size = data.draw(st.integers(1, min(1 << bit_width, 3000)))
    indices = data.draw(st.lists(st.integers(0, size - 1), min_size=1, max_size=300))
    repeats = data.draw(st.integers(1, 300))
    indices = [v for v in indices for _ in range(repeats if v == indices[0] else 1)]
    encoded = encode_hybrid(indices, bit_width, _runs(indices, draw_rle))
    assert decode_hybrid(encoded, bit_width, len(indices)) == indices
    dictionary = np.arange(size, dtype=np.int64) * 7 - 3
    buf = np.frombuffer(b"\xff" + encoded, dtype=np.uint8)
    monkeypatch.setattr(jit, "SMALL_WORK", 1 << 30 if twin else -1)
    monkeypatch.setattr(jit, "_compiled", False)
    out = np.empty(len(indices), dtype=np.int64)
    dictionary_values(buf, 1, len(buf), bit_width, dictionary, out)
    assert out.tolist() == [int(dictionary[i]) for i in indices]
    if size < (1 << bit_width):
        with pytest.raises(ValueError, match="past the dictionary"):
            dictionary_values(buf, 1, len(buf), bit_width, dictionary[: max(indices)], out)


@settings(max_examples=50, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    rows=st.integers(1, 60),
    dtype=st.sampled_from([np.int32, np.int64]),
    codec=st.sampled_from(["zstd", "snappy", "none"]),
    version=st.sampled_from(["1.0", "2.0"]),
    dictionary=st.booleans(),
    group_rows=st.integers(1, 30),
    batch_rows=st.integers(1, 25),
    vocab=st.sampled_from([2, 300, 200_000]),
)
def test_id_lists_are_pyarrows(
    tmp_path_factory, seed, rows, dtype, codec, version, dictionary, group_rows, batch_rows, vocab
):
    """An input's token-id lists decoded page by page: the same rows as
    ParquetFile.iter_batches, for the whole file and a range of row groups."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 400, size=rows)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    ids = pa.ListArray.from_arrays(
        pa.array(offsets), pa.array(rng.integers(0, vocab, size=int(offsets[-1])).astype(dtype))
    )
    path = tmp_path_factory.mktemp("ids") / "in.parquet"
    options = {"compression": codec, "use_dictionary": dictionary, "data_page_version": version, "data_page_size": 2000}
    pq.write_table(pa.table({"ids": ids, "text": ["x"] * rows}), str(path), row_group_size=group_rows, **options)
    groups = pq.read_metadata(path).num_row_groups
    part = range(groups // 3, groups)
    for chosen in (None, part):
        batches = id_list_batches(str(path), ["ids"], batch_rows, chosen)
        assert batches is not None
        got = list(batches)
        want = list(pq.ParquetFile(str(path)).iter_batches(batch_size=batch_rows, columns=["ids"], row_groups=chosen))
        assert all(0 < b.num_rows <= batch_rows for b in got)  # batches end at row groups too
        assert all(b.column("ids").type.value_type == pa.from_numpy_dtype(dtype) for b in got)
        assert [row for b in got for row in b.column("ids").to_pylist()] == [
            row for b in want for row in b.column("ids").to_pylist()
        ]


def test_id_lists_with_nulls_or_empty_lists_are_left_to_pyarrow(tmp_path):
    for ids in ([[1, 2], None], [[1, 2], []], [[1, None]]):
        path = tmp_path / "in.parquet"
        pq.write_table(pa.table({"ids": pa.array(ids, type=pa.list_(pa.int32()))}), str(path))
        assert id_list_batches(str(path), ["ids"], 10) is None
    pq.write_table(pa.table({"ids": pa.array([[1, 2]], type=pa.list_(pa.int32()))}), str(path), write_statistics=False)
    assert id_list_batches(str(path), ["ids"], 10) is None  # no statistics: nulls not ruled out
    pq.write_table(pa.table({"ids": pa.array([["a"]], type=pa.list_(pa.string()))}), str(path))
    assert id_list_batches(str(path), ["ids"], 10) is None


def test_a_pack_of_id_lists_imports_no_pandas(tmp_path):
    """The decoded lists become Arrow arrays without `pyarrow.array`, whose first call
    imports pandas when it is installed (as here: the test extra's datasets requires it)."""
    assert importlib.util.find_spec("pandas") is not None
    ids = pa.array([[1, 2, 3], [4, 5], [6] * 40], type=pa.list_(pa.int32()))
    path = tmp_path / "in.parquet"
    pq.write_table(pa.table({"ids": ids}), str(path))
    assert id_list_batches(str(path), ["ids"], 10) is not None  # the page reader's file
    args = [path, "--ids-field", "ids", "--eos-token", "7", "--pad-id", "7", "--seq-len", "16"]
    args += ["-o", tmp_path / "out"]
    assert packages_a_pack_imports(args, tmp_path / "cache", ("pandas",)) == []
    assert verify_dir(tmp_path / "out")["real_tokens"] == 45 + 3  # each list and its EOS
