"""Tests for packcli.read.columnar: Parquet and Arrow IPC round-trip, column types are checked
once, and bad rows are named by row."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from packcli.read.batches import read_batches
from packcli.read.records import BadRecords, IdLists
from tests.input_files import TEXT, fail_message, plain, read_all, read_skipping, write_arrow, write_parquet


def test_parquet_round_trip(tmp_path):
    texts = [f"row {i}" for i in range(30)]
    path = write_parquet(tmp_path / "data.parquet", {"text": texts, "other": list(range(30))}, row_group_size=7)
    got = read_all([path])
    assert [r["text"] for _, r in got] == texts
    assert got[0][0] == f"{path} row 0" and got[-1][0] == f"{path} row 29"


def test_parquet_large_string_and_dictionary_columns(tmp_path):
    large = write_parquet(tmp_path / "large.parquet", {"text": pa.array(["a", "b"], pa.large_string())})
    dictionary = write_parquet(tmp_path / "dict.parquet", {"text": pa.array(["x", "y", "x"]).dictionary_encode()})
    assert [r["text"] for _, r in read_all([large, dictionary])] == ["a", "b", "x", "y", "x"]


def test_parquet_ids_messages_any(tmp_path):
    ids = [[1, 2, 3], [4], [5, 6]]
    messages = [[{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": f"a{i}"}] for i in range(3)]
    path = write_parquet(tmp_path / "chat.parquet", {"ids": ids, "messages": messages, "score": [0.5, 1.0, 2.0]})
    got = read_all([path], {"ids": "ids", "messages": "messages", "score": "any"})
    assert [r["ids"].tolist() for _, r in got] == ids
    assert all(r["ids"].dtype == np.int64 for _, r in got)
    assert [r["messages"] for _, r in got] == messages
    assert [r["score"] for _, r in got] == [0.5, 1.0, 2.0]


@pytest.mark.parametrize(
    "arrow_type", [pa.list_(pa.int32()), pa.large_list(pa.uint16()), pa.list_(pa.int64(), 2)], ids=str
)
def test_parquet_ids_list_types(tmp_path, arrow_type):
    path = write_parquet(tmp_path / "ids.parquet", {"ids": pa.array([[1, 2], [3, 4], [5, 6]], arrow_type)})
    got = read_all([path], {"ids": "ids"}, batch_size=2)
    assert [r["ids"].tolist() for _, r in got] == [[1, 2], [3, 4], [5, 6]]
    # the ids keep the column's integer type: no wider copy of every token
    assert all(r["ids"].dtype == np.dtype(arrow_type.value_type.to_pandas_dtype()) for _, r in got)


def test_parquet_with_zero_rows_yields_nothing(tmp_path):
    path = write_parquet(tmp_path / "none.parquet", {"text": pa.array([], pa.string())})
    assert list(read_batches([str(path)], TEXT)) == []


@pytest.mark.parametrize("mode", ["fail", "skip"])
def test_parquet_missing_column_is_fatal(tmp_path, mode):
    path = write_parquet(tmp_path / "qa.parquet", {"question": ["q"], "answer": ["a"]})
    message = fail_message([path], on_bad_record=mode, bad=BadRecords())
    assert message == f"{path}: no column 'text' (columns: 'question', 'answer')"


@pytest.mark.parametrize("mode", ["fail", "skip"])
@pytest.mark.parametrize(
    "column,kind,expected",
    [
        (pa.array([1, 2], pa.int64()), "text", "column 'x' has type int64, expected a string"),
        (pa.array([b"a"], pa.binary()), "text", "column 'x' has type binary, expected a string"),
        (pa.array([["a"]]), "ids", "column 'x' has type list<element: string>, expected a list of integers"),
        (pa.array([1]), "ids", "column 'x' has type int64, expected a list of integers"),
        (pa.array([[{"role": "u"}]]), "messages", "column 'x' has type list<element: struct<role: string>>, expected"),
        (pa.array(["hi"]), "messages", "column 'x' has type string, expected a list of structs"),
    ],
)
def test_parquet_wrong_column_type_is_fatal(tmp_path, mode, column, kind, expected):
    path = write_parquet(tmp_path / "typed.parquet", {"x": column})
    message = fail_message([path], {"x": kind}, on_bad_record=mode, bad=BadRecords())
    assert message.startswith(f"{path}: {expected}")


@pytest.mark.parametrize("mode", ["fail", "skip"])
def test_unreadable_parquet_is_fatal(tmp_path, mode):
    path = tmp_path / "broken.parquet"
    path.write_bytes(b"PAR1 definitely not parquet")
    message = fail_message([path], on_bad_record=mode, bad=BadRecords())
    assert message.startswith(f"{path}: cannot read Parquet file (")


def test_truncated_parquet_is_fatal(tmp_path):
    path = write_parquet(tmp_path / "cut.parquet", {"text": [f"row {i}" for i in range(1000)]})
    path.write_bytes(path.read_bytes()[:-100])
    assert fail_message([path], on_bad_record="skip", bad=BadRecords()).startswith(f"{path}: cannot read Parquet")


def _invalid_utf8_strings() -> pa.Array:
    offsets = np.array([0, 2, 4, 6], dtype=np.int32).tobytes()
    return pa.Array.from_buffers(pa.string(), 3, [None, pa.py_buffer(offsets), pa.py_buffer(b"ok\xff\xfeok")])


BAD_PARQUET = [
    pytest.param({"text": ["a", None, "c"]}, TEXT, "wrong type", "field 'text' is null", id="null"),
    pytest.param({"text": ["a", "", "c"]}, TEXT, "empty text", "field 'text' is empty", id="empty"),
    pytest.param({"text": _invalid_utf8_strings()}, TEXT, "invalid UTF-8", "invalid UTF-8 (byte 0xff)", id="utf8"),
    pytest.param({"ids": [[1], None, [3]]}, {"ids": "ids"}, "wrong type", "field 'ids' is null", id="ids-null"),
    pytest.param(
        {"ids": [[1], [], [3]]}, {"ids": "ids"}, "empty field", "field 'ids' is an empty list", id="ids-empty"
    ),
    pytest.param(
        {"ids": [[1], [2, None], [3]]}, {"ids": "ids"}, "wrong type", "field 'ids' item 1 is null", id="ids-item-null"
    ),
    pytest.param(
        {"ids": pa.array([[1], [2**63], [3]], pa.list_(pa.uint64()))},
        {"ids": "ids"},
        "wrong type",
        "field 'ids' item 0 does not fit in int64",
        id="ids-uint64",
    ),
    pytest.param(
        {"m": [[{"role": "user", "content": "c"}], None, [{"role": "user", "content": "c"}]]},
        {"m": "messages"},
        "wrong type",
        "field 'm' is null",
        id="msgs-null",
    ),
    pytest.param(
        {"m": [[{"role": "user", "content": "c"}], [], [{"role": "user", "content": "c"}]]},
        {"m": "messages"},
        "empty field",
        "field 'm' is an empty list",
        id="msgs-empty",
    ),
    pytest.param(
        {
            "m": [
                [{"role": "user", "content": "c"}],
                [{"role": "user", "content": None}],
                [{"role": "user", "content": "c"}],
            ]
        },
        {"m": "messages"},
        "wrong type",
        "field 'm' item 0 'content' is null",
        id="msgs-content-null",
    ),
    pytest.param({"v": [1, None, 3]}, {"v": "any"}, "wrong type", "field 'v' is null", id="any-null"),
]


@pytest.mark.parametrize("columns,fields,reason,problem", BAD_PARQUET)
def test_bad_parquet_row_fails_with_row_and_problem(tmp_path, columns, fields, reason, problem):
    path = write_parquet(tmp_path / "data.parquet", columns)
    assert fail_message([path], fields) == f"{path} row 1: {problem}"


@pytest.mark.parametrize("columns,fields,reason,problem", BAD_PARQUET)
def test_bad_parquet_row_is_counted_under_skip(tmp_path, columns, fields, reason, problem):
    path = write_parquet(tmp_path / "data.parquet", columns)
    got, bad = read_skipping([path], fields)
    assert [loc for loc, _ in got] == [f"{path} row 0", f"{path} row 2"]
    assert bad.counts == {reason: 1}
    assert bad.examples == [f"{path} row 1: {problem}"]
    assert bad.records_seen == 3


def test_parquet_first_bad_row_wins_across_fields(tmp_path):
    path = write_parquet(tmp_path / "two.parquet", {"a": ["x", "x", None], "b": ["x", "", "x"]})
    assert fail_message([path], {"a": "text", "b": "text"}) == f"{path} row 1: field 'b' is empty"


def test_parquet_rows_are_numbered_across_batches(tmp_path):
    texts = ["t"] * 10
    texts[7] = None
    path = write_parquet(tmp_path / "ten.parquet", {"text": texts}, row_group_size=4)
    assert fail_message([path], batch_size=3) == f"{path} row 7: field 'text' is null"


@pytest.mark.parametrize("file_format", [False, True], ids=["stream", "file"])
def test_arrow_round_trip_in_batches(tmp_path, file_format):
    table = pa.table({"text": [f"row {i}" for i in range(25)], "ids": [[i, i + 1] for i in range(25)]})
    path = write_arrow(tmp_path / "data.arrow", table, file_format, max_chunksize=10)
    batches = list(read_batches([str(path)], {"text": "text", "ids": "ids"}, batch_size=4))
    assert [len(b) for b in batches] == [4] * 6 + [1]
    got = [(b.location(i), b.columns["text"][i], b.columns["ids"][i].tolist()) for b in batches for i in range(len(b))]
    assert got == [(f"{path} row {i}", f"row {i}", [i, i + 1]) for i in range(25)]


def test_arrow_bad_rows_are_reported_by_row_across_batches(tmp_path):
    ids = [[i] for i in range(20)]
    ids[3], ids[11], ids[12] = None, [], [5, None]
    path = write_arrow(tmp_path / "data.arrow", pa.table({"ids": ids}), max_chunksize=7)
    got, bad = read_skipping([path], {"ids": "ids"}, batch_size=4)
    assert [loc for loc, _ in got] == [f"{path} row {i}" for i in range(20) if i not in (3, 11, 12)]
    assert [r["ids"].tolist() for _, r in got] == [[i] for i in range(20) if i not in (3, 11, 12)]
    assert bad.examples == [
        f"{path} row 3: field 'ids' is null",
        f"{path} row 11: field 'ids' is an empty list",
        f"{path} row 12: field 'ids' item 1 is null",
    ]
    assert fail_message([path], {"ids": "ids"}) == f"{path} row 3: field 'ids' is null"


@pytest.mark.parametrize("mode", ["fail", "skip"])
def test_unreadable_or_mistyped_arrow_is_fatal(tmp_path, mode):
    garbage = tmp_path / "garbage.arrow"
    garbage.write_bytes(b"not arrow at all")
    assert fail_message([garbage], on_bad_record=mode, bad=BadRecords()).startswith(
        f"{garbage}: cannot read Arrow file ("
    )
    typed = write_arrow(tmp_path / "typed.arrow", pa.table({"text": [1, 2]}))
    assert fail_message([typed], on_bad_record=mode, bad=BadRecords()) == (
        f"{typed}: column 'text' has type int64, expected a string"
    )


def test_empty_arrow_file_holds_no_records(tmp_path):
    (tmp_path / "empty.arrow").write_bytes(b"")
    assert read_all([tmp_path / "empty.arrow"]) == []


@pytest.mark.parametrize(
    "column",
    [
        pa.array(["a", "b"], pa.large_string()),
        pa.array(["a", "b"]).dictionary_encode(),
        pa.array(["a", "b"], pa.string_view()),
    ],
    ids=["large_string", "dictionary", "string_view"],
)
def test_text_column_types_read_as_text(tmp_path, column):
    path = write_arrow(tmp_path / "t.arrow", pa.table({"text": column}))
    assert [r["text"] for _, r in read_all([path])] == ["a", "b"]


@pytest.mark.parametrize(
    "arrow_type",
    [
        pa.list_(pa.int32()),
        pa.large_list(pa.int64()),
        pa.list_(pa.uint16()),
        pa.list_(pa.int64(), 2),
        pa.list_(pa.uint64()),
        pa.large_list(pa.int8()),
    ],
    ids=str,
)
@pytest.mark.parametrize("suffix", [".parquet", ".arrow"])
def test_ids_column_types_keep_their_integer_type(tmp_path, arrow_type, suffix):
    table = pa.table({"ids": pa.array([[1, 2], [3, 4], [5, 6]], arrow_type)})
    path = tmp_path / f"ids{suffix}"
    pq.write_table(table, path) if suffix == ".parquet" else write_arrow(path, table)
    batches = list(read_batches([str(path)], {"ids": "ids"}, batch_size=2))
    assert all(isinstance(b.columns["ids"], IdLists) for b in batches)
    stored = np.dtype(np.int64 if arrow_type.value_type == pa.uint64() else str(arrow_type.value_type))
    assert [b.columns["ids"].values.dtype for b in batches] == [stored, stored]  # uint64 alone becomes int64
    assert [plain(b.columns["ids"]) for b in batches] == [[[1, 2], [3, 4]], [[5, 6]]]


def test_messages_column_mixing_both_shapes(tmp_path):
    """One table with ShareGPT and OpenAI turns: Arrow fills the other shape's fields with nulls."""
    records = [
        {"m": [{"from": "human", "value": "Q"}, {"from": "gpt", "value": "A"}]},
        {"m": [{"role": "user", "content": "Q2"}]},
    ]
    path = write_arrow(tmp_path / "mixed.arrow", pa.Table.from_pylist(records))
    got = read_all([path], {"m": "messages"})
    assert [r["m"] for _, r in got] == [
        [{"role": "user", "content": "Q"}, {"role": "assistant", "content": "A"}],
        [{"role": "user", "content": "Q2"}],
    ]


def test_sharegpt_column_with_an_unknown_speaker(tmp_path):
    path = write_parquet(
        tmp_path / "s.parquet", {"m": [[{"from": "human", "value": "Q"}], [{"from": "robot", "value": "A"}]]}
    )
    assert fail_message([path], {"m": "messages"}).startswith(
        f"{path} row 1: field 'm' item 0 'from' is 'robot', not one of"
    )


@pytest.mark.parametrize("dictionary", [True, False])
def test_token_ids_decoded_page_by_page_as_pyarrow_reads_them(tmp_path, monkeypatch, dictionary):
    """Columns of token ids alone are read by packcli.read.parquet_pages: the same records, row
    numbers and integer types as through pyarrow's reader."""
    from packcli.read import parquet_pages

    rng = np.random.default_rng(0)
    ids = [rng.integers(0, 70_000, size=int(n)).astype(np.int32).tolist() for n in rng.integers(1, 300, size=80)]
    path = tmp_path / "ids.parquet"
    pq.write_table(
        pa.table({"ids": pa.array(ids, pa.list_(pa.int32()))}), path, row_group_size=7, use_dictionary=dictionary
    )
    decoded = []
    real = parquet_pages.id_list_batches
    monkeypatch.setattr(parquet_pages, "id_list_batches", lambda *a: decoded.append(1) or real(*a))
    fast = read_all([path], {"ids": "ids"}, batch_size=5)
    monkeypatch.setattr(parquet_pages, "id_list_batches", lambda *a: None)
    slow = read_all([path], {"ids": "ids"}, batch_size=5)
    assert decoded  # the first read went through the page decoder
    assert [(where, r["ids"].tolist(), r["ids"].dtype) for where, r in fast] == [
        (where, r["ids"].tolist(), r["ids"].dtype) for where, r in slow
    ]
    assert [r["ids"].tolist() for _, r in fast] == ids


def test_a_damaged_page_of_token_ids_is_one_line_naming_the_file(tmp_path):
    path = tmp_path / "ids.parquet"
    pq.write_table(pa.table({"ids": pa.array([[1, 2, 3]] * 50, pa.list_(pa.int32()))}), path, use_dictionary=False)
    data = bytearray(path.read_bytes())
    first = pq.read_metadata(path).row_group(0).column(0).data_page_offset
    data[first : first + 6] = b"\xff" * 6  # the first page header
    path.write_bytes(bytes(data))
    message = fail_message([path], {"ids": "ids"})
    assert message.startswith(f"{path}: cannot read Parquet file near row 0 (") and "\n" not in message
