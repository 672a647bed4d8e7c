"""The spill sorted by (group, placed length): its file against the obvious layout, its
starts against the naive slot map, and `pack` through it byte for byte the same as
through the spill in input order, and whatever the number of workers."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import bucket_reads, random_texts, write_jsonl
from hypothesis import given, settings
from hypothesis import strategies as st
from naive_slots import sorted_spill

from packcli.plan.buckets import BucketParts, Buckets
from packcli.plan.patterns import SlotMap, pattern_plan
from packcli.write import by_length
from packcli.write import spill as spilling
from packcli.write.by_length import SORTED_LEARNED_FILE, SORTED_TOKENS_FILE, sort_spill
from packcli.write.spill import Spill, SpillWriter


def _histograms(lengths, groups, multiple, seq_len):
    placed = [-(-n // multiple) * multiple for n in lengths]
    ids = sorted(set(groups)) if groups is not None else [0]
    of = groups if groups is not None else [0] * len(lengths)
    return [np.bincount([p for p, g in zip(placed, of) if g == gid], minlength=seq_len + 1) for gid in ids]


@settings(max_examples=60, deadline=None)
@given(
    data=st.lists(st.integers(1, 24), min_size=1, max_size=120),
    multiple=st.sampled_from([1, 2, 4]),
    n_groups=st.sampled_from([0, 1, 3]),
    masked=st.booleans(),
    chunk=st.sampled_from([1, 7, 64, 1 << 22]),
    seed=st.integers(0, 2**16),
)
def test_the_sorted_spill_is_the_obvious_layout(tmp_path_factory, data, multiple, n_groups, masked, chunk, seed):
    seq_len = 24
    rng = np.random.default_rng(seed)
    lengths = np.array(data, dtype=np.int64)
    groups = None if n_groups == 0 else rng.integers(0, n_groups, len(lengths)).astype(np.int32)
    tokens = rng.integers(1, 60_000, int(lengths.sum())).astype(np.uint16)
    learned = rng.random(len(tokens)) < 0.6 if masked else None
    directory = tmp_path_factory.mktemp("spill") / "s"
    writer = SpillWriter(directory, np.dtype(np.uint16), masked)
    writer.append(tokens, lengths, learned)
    spill = writer.finish({})
    buckets = Buckets.from_histograms(
        _histograms(data, None if groups is None else groups.tolist(), multiple, seq_len), seq_len
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(by_length, "CHUNK_TOKENS", chunk)
        reader = sort_spill(spill, buckets, seq_len, multiple, groups)
    want_tokens, want_flags, want_starts = sorted_spill(
        tokens.tolist(), data, multiple, None if groups is None else groups.tolist(), learned
    )
    got = np.fromfile(directory / SORTED_TOKENS_FILE, dtype=np.uint16)
    assert got.tolist() == want_tokens
    if masked:
        assert np.fromfile(directory / SORTED_LEARNED_FILE, dtype=np.uint8).tolist() == want_flags
    assert buckets.starts(np.arange(len(data))).tolist() == want_starts
    # a block read back: the pieces of every rank, real lengths, flags packed again
    real = [data[i] for i in _rank_order(data, multiple, groups)]
    block = reader.read_block(np.array(want_starts, dtype=np.int64), np.array(real, dtype=np.int64))
    for k, (start, n) in enumerate(zip(want_starts, real)):
        at = int(block.token_at[k])
        assert block.tokens[at : at + n].tolist() == want_tokens[start : start + n]
        if masked:
            bits = np.unpackbits(block.learned, bitorder="little")[int(block.bit_at[k]) : int(block.bit_at[k]) + n]
            assert bits.tolist() == want_flags[start : start + n]
    reader.close()
    spill.close()


@settings(max_examples=60, deadline=None)
@given(
    data=st.lists(st.integers(1, 24), min_size=1, max_size=120),
    masked=st.booleans(),
    chunk=st.sampled_from([1, 7, 64, 1 << 22]),
    cuts=st.lists(st.integers(0, 120), max_size=4),
    seed=st.integers(0, 2**16),
)
def test_a_spill_written_by_length_reads_as_the_sorted_spill(tmp_path_factory, data, masked, chunk, cuts, seed):
    """Appended in any batches and held in chunks of any size: the lengths stay in input
    order, and the k-th sequence of length L in input order is found in place (by bucket
    and through the slot map) and copied where the sorted spill has it."""
    seq_len = 24
    rng = np.random.default_rng(seed)
    lengths = np.array(data, dtype=np.int64)
    tokens = rng.integers(1, 60_000, int(lengths.sum())).astype(np.uint16)
    learned = rng.random(len(tokens)) < 0.6 if masked else None
    directory = tmp_path_factory.mktemp("spill") / "s"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(spilling, "BY_LENGTH_CHUNK", chunk)
        writer = SpillWriter(directory, np.dtype(np.uint16), masked, by_length=True)
        starts = np.concatenate([[0], np.cumsum(lengths)])
        bounds = sorted({0, len(data), *[c for c in cuts if c < len(data)]})
        for a, b in zip(bounds, bounds[1:]):
            flags = None if learned is None else learned[starts[a] : starts[b]]
            writer.append(tokens[starts[a] : starts[b]], lengths[a:b], flags)
        spill = writer.finish({})
    spill = Spill.open(directory)  # as --resume finds it
    assert spill.lengths.tolist() == data
    want_tokens, want_flags, want_starts = sorted_spill(tokens.tolist(), data, 1, None, learned)
    buckets = Buckets.from_histograms(_histograms(data, None, 1, seq_len), seq_len)
    real = np.array([data[i] for i in _rank_order(data, 1, None)], dtype=np.int64)
    parts = by_length.chunk_parts(spill, buckets)
    assert parts is not None
    ranks = np.arange(len(data))
    bucket = np.searchsorted(buckets.rank, ranks, side="right") - 1
    in_spill = parts.positions(bucket, ranks - buckets.rank[bucket])
    readers = {"by bucket": (by_length.SpillByLength(spill, parts), in_spill)}
    readers["slot map"] = (spill, by_length.file_slot_starts(spill))
    for reader, where in readers.values():
        block = reader.read_block(where, real)
        for k, (start, n) in enumerate(zip(want_starts, real.tolist())):
            at = int(block.token_at[k])
            assert block.tokens[at : at + n].tolist() == want_tokens[start : start + n]
            if masked:
                bits = np.unpackbits(block.learned, bitorder="little")[int(block.bit_at[k]) : int(block.bit_at[k]) + n]
                assert bits.tolist() == want_flags[start : start + n]
    sort_spill(spill, buckets, seq_len, 1).close()
    assert np.fromfile(directory / SORTED_TOKENS_FILE, dtype=np.uint16).tolist() == want_tokens
    if masked:
        assert np.fromfile(directory / SORTED_LEARNED_FILE, dtype=np.uint8).tolist() == want_flags
    spill.close()


def _rank_order(lengths, multiple, groups):
    placed = [-(-n // multiple) * multiple for n in lengths]
    of = [0] * len(lengths) if groups is None else groups.tolist()
    return sorted(range(len(lengths)), key=lambda i: (of[i], placed[i], i))


@settings(max_examples=30, deadline=None)
@given(
    data=st.lists(st.integers(1, 40), min_size=1, max_size=200),
    multiple=st.sampled_from([1, 4]),
    grouped=st.booleans(),
    algorithm=st.sampled_from(["bfd", "spfhp", "lpfhp"]),
    seed=st.integers(0, 2**16),
)
def test_a_plan_by_bucket_places_what_the_slot_map_places(tmp_path_factory, data, multiple, grouped, algorithm, seed):
    """Same rows, offsets and real lengths; each slot's tokens are the same sequence's."""
    seq_len = 64
    rng = np.random.default_rng(seed)
    lengths = np.array(data, dtype=np.int64)
    groups = rng.integers(0, 3, len(lengths)).astype(np.int32) if grouped else None
    tokens = rng.integers(1, 60_000, int(lengths.sum())).astype(np.uint16)
    directory = tmp_path_factory.mktemp("spill") / "s"
    writer = SpillWriter(directory, np.dtype(np.uint16), False)
    writer.append(tokens, lengths, None)
    spill = writer.finish({})
    options = {"multiple": multiple, "groups": groups, "shuffle": True, "seed": seed}
    mapped = pattern_plan(lengths, seq_len, algorithm, **options)
    bucketed = pattern_plan(lengths, seq_len, algorithm, **options, by_bucket=True)
    assert isinstance(mapped.lookup, SlotMap) and isinstance(bucketed.lookup, Buckets)
    reader = sort_spill(spill, bucketed.lookup, seq_len, multiple, groups)
    s1, n1, r1, o1 = mapped.pieces(0, mapped.n_rows)
    s2, n2, r2, o2 = bucketed.pieces(0, bucketed.n_rows)
    assert n1.tolist() == n2.tolist() and r1.tolist() == r2.tolist() and o1.tolist() == o2.tolist()
    a, b = spill.read_block(s1, n1), reader.read_block(s2, n2)
    for k in range(len(n1)):
        x, y = int(a.token_at[k]), int(b.token_at[k])
        assert a.tokens[x : x + n1[k]].tolist() == b.tokens[y : y + n2[k]].tolist()
    reader.close()
    spill.close()


OPENED = [
    # (plan, spill written by length, the reader, the plan's lookup)
    ("rows", False, Spill, None),
    ("slot map", False, Spill, SlotMap),
    ("slot map", True, Spill, SlotMap),
    ("by bucket", False, by_length.SortedCopy, Buckets),
    ("by bucket", True, by_length.SpillByLength, BucketParts),
]


@pytest.mark.parametrize(("kind", "spilled_by_length", "reader_type", "lookup_type"), OPENED)
@pytest.mark.parametrize("masked", [False, True])
def test_open_reader_reads_every_plan_where_its_slots_are(
    tmp_path, monkeypatch, kind, spilled_by_length, reader_type, lookup_type, masked
):
    """The write step's reader for each plan and spill layout, and the plan placed in it:
    the rows gathered through them are the rows of the spill in input order."""
    from packcli.plan.planner import PlanSettings, plan_rows
    from packcli.write.gather import gather_rows

    seq_len = 32
    rng = np.random.default_rng(9)
    lengths = rng.integers(1, 9, 300).astype(np.int64)
    tokens = rng.integers(2, 60_000, int(lengths.sum())).astype(np.uint16)
    learned = rng.random(len(tokens)) < 0.5 if masked else None
    monkeypatch.setattr(spilling, "BY_LENGTH_CHUNK", 200)  # several chunks

    def spilled(name, layout_by_length):
        writer = SpillWriter(tmp_path / name, np.dtype(np.uint16), masked, by_length=layout_by_length)
        writer.append(tokens, lengths, learned)
        return writer.finish({})

    plain, spill = spilled("plain", False), spilled("spill", spilled_by_length)
    assert (spill.chunks is not None) == spilled_by_length
    settings_ = PlanSettings(seq_len, algorithm="ffd" if kind == "rows" else "bfd", shuffle=True, seed=4)
    if kind == "rows":
        plan = plan_rows(lengths, settings_)
    else:
        plan = pattern_plan(lengths, seq_len, "bfd", shuffle=True, seed=4, by_bucket=kind == "by bucket")
    expected = list(gather_rows(plain, plan_rows(lengths, settings_), seq_len, 0))
    reader, placed = by_length.open_reader(spill, plan, seq_len, 1)
    assert type(reader) is reader_type
    assert lookup_type is None or isinstance(placed.lookup, lookup_type)
    got = list(gather_rows(reader, placed, seq_len, 0))
    assert len(got) == len(expected)
    for a, b in zip(got, expected):
        assert a.input_ids.tolist() == b.input_ids.tolist() and a.labels.tolist() == b.labels.tolist()
    reader.close()
    spill.close()
    plain.close()


def test_a_plan_of_pieces_cannot_read_a_spill_written_by_length(tmp_path):
    from packcli.core.errors import PackcliError
    from packcli.plan.planner import PlanSettings, plan_rows

    writer = SpillWriter(tmp_path / "s", np.dtype(np.uint16), False, by_length=True)
    writer.append(np.arange(1, 11, dtype=np.uint16), np.array([4, 6]), None)
    spill = writer.finish({})
    plan = plan_rows(np.array([4, 6]), PlanSettings(8, algorithm="ffd"))
    with pytest.raises(PackcliError, match="cannot read a spill written by length"):
        by_length.open_reader(spill, plan, 8, 1)
    spill.close()


@pytest.fixture
def short_corpus(tmp_path):
    """Short documents (a few words): many sequences a row."""
    texts = random_texts(400, seed=3, max_words=6)
    rows = [{"text": t, "g": i % 3} for i, t in enumerate(texts)]
    rng = np.random.default_rng(5)
    ids = [{"ids": rng.integers(2, 250, n).tolist()} for n in rng.integers(1, 9, 400)]
    for row in ids:
        row["labels"] = [t if rng.random() < 0.5 else -100 for t in row["ids"]]
    return (
        write_jsonl(tmp_path / "in" / "short.jsonl", rows),
        write_jsonl(tmp_path / "ids" / "ids.jsonl", ids),
    )


def _files(out):
    return {
        p.relative_to(out).as_posix(): p.read_bytes()
        for p in sorted(out.rglob("*"))
        if p.is_file() and p.name != "report.json"
    }


def _source(short_corpus, word_tokenizer, options: tuple) -> tuple[list, tuple]:
    """The input and its options: the texts, or with ("labels",) the ids with their labels."""
    texts, ids = short_corpus
    if options == ("labels",):
        source = [ids, "--ids-field", "ids", "--labels-field", "labels", "--eos-token", "1", "--pad-id", "0"]
        return source, ("--rows-per-shard", "7", "--format", "npy")
    return [texts, "--tokenizer", word_tokenizer], options


@pytest.mark.parametrize(
    "options",
    [
        (),
        ("--group-by", "g"),
        ("--pad-to-multiple-of", "4"),
        ("--algorithm", "spfhp", "--max-sequences-per-row", "3"),
        ("--algorithm", "lpfhp", "--group-by", "g", "--pad-to-multiple-of", "2"),
        ("--rows-per-shard", "5", "--format", "npy"),
        ("--workers", "2", "--buffer-size", "150"),
        ("labels",),
    ],
)
def test_pack_through_the_sorted_spill_is_byte_identical(short_corpus, packed, word_tokenizer, monkeypatch, options):
    from packcli.engine import job as engine_job
    from packcli.engine import local as pipeline

    source, options = _source(short_corpus, word_tokenizer, options)
    calls = bucket_reads(monkeypatch)
    monkeypatch.setattr(pipeline, "spills_by_length", lambda opts: False)  # the spill in input order
    monkeypatch.setattr(engine_job, "BY_BUCKET_SEQUENCES_PER_ROW", 1)
    sorted_out = packed(source[0], *source[1:], "--seq-len", 32, *options)
    assert calls and set(calls) == {"copy"}  # the corpus went through the sorted copy (per window)
    monkeypatch.setattr(engine_job, "BY_BUCKET_SEQUENCES_PER_ROW", 10**9)
    calls.clear()
    plain_out = packed(source[0], *source[1:], "--seq-len", 32, *options)
    assert not calls
    assert _files(sorted_out) == _files(plain_out)


@pytest.mark.parametrize(
    "options",
    [
        (),
        ("--algorithm", "spfhp", "--max-sequences-per-row", "3"),
        ("--algorithm", "lpfhp", "--rows-per-shard", "5", "--format", "npy"),
        ("labels",),
    ],
)
@pytest.mark.parametrize("chunk", [23, 1 << 22])
def test_a_spill_written_by_length_packs_the_same_bytes(
    short_corpus, packed, word_tokenizer, monkeypatch, options, chunk
):
    """A spill written by length (in chunks of `chunk` tokens) read in place by bucket, or
    through its slot map, or copied sorted: the bytes of a spill in input order. The
    first chunk chooses the layout and the whole input the plan: each is set on its own
    here (rows of one sequence or more count as "many" for one and not the other)."""
    from packcli.core.pause import pause as real_pause
    from packcli.engine import job as engine_job
    from packcli.engine import local as pipeline

    source, options = _source(short_corpus, word_tokenizer, options)
    monkeypatch.setattr(spilling, "BY_LENGTH_CHUNK", chunk)
    calls = bucket_reads(monkeypatch)
    layouts = []
    real_finish = spilling.SpillWriter.finish

    def finish(self, meta):
        spill = real_finish(self, meta)
        layouts.append("by length" if spill.chunks is not None else "input order")
        return spill

    monkeypatch.setattr(spilling.SpillWriter, "finish", finish)

    def pack(spilled_by_length: bool, planned_by_bucket: bool) -> dict:
        def plan_decides(at):
            if at == "spilled":
                monkeypatch.setattr(engine_job, "BY_BUCKET_SEQUENCES_PER_ROW", 1 if planned_by_bucket else 10**9)
            real_pause(at)

        monkeypatch.setattr(engine_job, "BY_BUCKET_SEQUENCES_PER_ROW", 1 if spilled_by_length else 10**9)
        monkeypatch.setattr(pipeline, "pause", plan_decides)
        return _files(packed(source[0], *source[1:], "--seq-len", 32, *options))

    in_place, mapped = pack(True, True), pack(True, False)
    assert calls == ["by length"] and layouts == ["by length"] * 2  # the slot map reads it as it is
    copied_in_order = pack(False, True)
    assert calls == ["by length", "copy"] and layouts[-1] == "input order"
    monkeypatch.setattr(by_length, "CHUNK_TABLE_CELLS", 0)  # the chunks' table too large to hold
    copied = pack(True, True)
    assert calls == ["by length", "copy", "copy"] and layouts[-1] == "by length"
    plain = pack(False, False)
    assert layouts[-1] == "input order"
    assert in_place == mapped == copied_in_order == copied == plain


@pytest.mark.parametrize("first_chunk_by_length", [False, True])
def test_the_first_chunk_chooses_the_spill_s_layout(tmp_path, first_chunk_by_length, monkeypatch):
    """Asked once, of the first chunk's tokens and sequences; input order from then on
    when it says no, with the tokens as appended."""
    monkeypatch.setattr(spilling, "BY_LENGTH_CHUNK", 10)
    asked = []

    def choose(tokens, sequences):
        asked.append((tokens, sequences))
        return first_chunk_by_length

    lengths = np.array([4, 3, 5, 1, 2, 6, 3], dtype=np.int64)
    tokens = np.arange(1, int(lengths.sum()) + 1, dtype=np.uint16)
    learned = np.arange(len(tokens)) % 3 == 0
    writer = SpillWriter(tmp_path / "s", np.dtype(np.uint16), True, by_length=choose)
    starts = np.concatenate([[0], np.cumsum(lengths)])
    for a, b in [(0, 2), (2, 4), (4, 7)]:
        writer.append(tokens[starts[a] : starts[b]], lengths[a:b], learned[starts[a] : starts[b]])
    spill = writer.finish({})
    assert asked == [(7, 2)]  # the first chunk: the two segments held before the next passed 10 tokens
    assert (spill.chunks is not None) == first_chunk_by_length
    assert json.loads((tmp_path / "s" / "complete.json").read_text())["by_length"] == first_chunk_by_length
    written = np.fromfile(tmp_path / "s" / "tokens.bin", dtype=np.uint16)
    flags = np.unpackbits(np.fromfile(tmp_path / "s" / "learned.bin", dtype=np.uint8), bitorder="little")
    if first_chunk_by_length:
        assert spill.chunks.tolist() == [[0, 3, 1], [0, 4, 1], [1, 1, 1], [1, 5, 1], [2, 2, 1], [2, 3, 1], [2, 6, 1]]
        order = np.concatenate([tokens[s : s + n] for s, n in _by_length_order(starts, lengths, [2, 4, 7])])
        assert written.tolist() == order.tolist()
        want_flags = np.concatenate([learned[s : s + n] for s, n in _by_length_order(starts, lengths, [2, 4, 7])])
    else:
        assert written.tolist() == tokens.tolist()
        want_flags = learned
    assert flags[: len(tokens)].tolist() == want_flags.tolist()
    assert spill.lengths.tolist() == lengths.tolist()


def _by_length_order(starts, lengths, chunk_ends):
    """(start, length) of each segment in the order a spill by length holds them."""
    out, first = [], 0
    for end in chunk_ends:
        members = sorted(range(first, end), key=lambda i: (lengths[i], i))
        out += [(int(starts[i]), int(lengths[i])) for i in members]
        first = end
    return out


def test_a_spill_is_written_by_length_only_where_a_plan_may_read_it_so():
    """Bin mode from counts, each length its own bucket, one plan of the whole input."""
    from packcli.core.options import PackOptions
    from packcli.engine.job import spills_by_length

    def opts(**changes):
        return PackOptions(**{"inputs": ["x"], "output": "o", "tokenizer": "t", "seq_len": 32, **changes})

    assert spills_by_length(opts())
    assert spills_by_length(opts(algorithm="lpfhp", max_sequences_per_row=3))
    assert not spills_by_length(opts(mode="concat"))
    assert not spills_by_length(opts(group_by="g"))
    assert not spills_by_length(opts(pad_to_multiple_of=8))
    assert not spills_by_length(opts(buffer_size=100))
    assert not spills_by_length(opts(algorithm="ffd"))
    assert not spills_by_length(opts(algorithm="bfd", max_sequences_per_row=3))  # placed one at a time


@pytest.mark.parametrize("point", ["spilled", "shard-done"])
def test_a_run_stopped_then_resumed_through_the_sorted_spill_is_byte_identical(
    short_corpus, packed, cli, word_tokenizer, monkeypatch, tmp_path, point
):
    from packcli.core.pause import pause as real_pause
    from packcli.engine import job as engine_job
    from packcli.engine import local as pipeline
    from packcli.inspect.verify import verify_dir

    texts, _ = short_corpus
    monkeypatch.setattr(engine_job, "BY_BUCKET_SEQUENCES_PER_ROW", 1)
    options = ("--tokenizer", word_tokenizer, "--seq-len", 32, "--rows-per-shard", 6, "--format", "npy")
    fresh = packed(texts, *options)

    def stop(at):
        if at == point:
            raise KeyboardInterrupt
        real_pause(at)

    monkeypatch.setattr(pipeline, "pause", stop)
    out = tmp_path / "stopped"
    assert cli("pack", texts, "-o", out, *options).exit_code == 130
    assert not (out / "manifest.json").exists()
    monkeypatch.setattr(pipeline, "pause", real_pause)
    resumed = cli("pack", texts, "-o", out, *options, "--resume")
    assert resumed.exit_code == 0, resumed.stderr
    verify_dir(out)
    assert _files(fresh) == _files(out)


@pytest.mark.parametrize(
    "options",
    [
        (),
        ("--no-shuffle", "--remainder", "drop"),
        ("--rows-per-shard", "5", "--format", "npy", "--workers", "2"),
        ("labels",),
    ],
)
def test_concat_with_its_ends_on_disk_is_byte_identical(short_corpus, packed, word_tokenizer, monkeypatch, options):
    """Concat mode of a whole input keeps one segment end in SPARSE_ENDS and reads the
    lengths of the rows it gathers from the spill: the bytes of the ends in memory."""
    from packcli.engine import local as pipeline

    source, options = _source(short_corpus, word_tokenizer, options)
    monkeypatch.setattr(pipeline, "SPARSE_ENDS", 3)
    sparse = packed(source[0], *source[1:], "--mode", "concat", "--seq-len", 32, *options)
    monkeypatch.setattr(pipeline, "SPARSE_ENDS", 0)
    whole = packed(source[0], *source[1:], "--mode", "concat", "--seq-len", 32, *options)
    assert _files(sparse) == _files(whole)


@pytest.mark.parametrize(
    "kind, options",
    [
        ("text", ()),
        ("prompt", ("--prompt-field", "q", "--completion-field", "a", "--group-by", "g", "--buffer-size", "1500")),
        (
            "prompt",
            ("--prompt-field", "q", "--completion-field", "a", "--max-sequences-per-row", "12", "--algorithm", "spfhp"),
        ),
        ("prompt", ("--prompt-field", "q", "--completion-field", "a", "--pad-to-multiple-of", "4")),
        ("prompt", ("--prompt-field", "q", "--completion-field", "a", "--mode", "concat", "--group-by", "g")),
    ],
    ids=["text", "prompt-group-by-windows", "prompt-cap", "prompt-pad-multiple", "prompt-concat-group-by"],
)
def test_workers_give_the_same_bytes_through_the_sorted_spill(
    tmp_path, packed, word_tokenizer, monkeypatch, kind, options
):
    """Short sequences (no forcing): one plan of plain text, and windows of prompts and
    completions (learned flags sorted too) by group, with a cap, with a pad multiple,
    tokenized in two processes; and concat by group, which takes no sorted copy."""
    from packcli.engine import ingest

    texts = random_texts(3 * ingest.READ_BATCH, seed=8, max_words=6)  # batches enough for two workers
    if kind == "text":
        records = [{"text": t} for t in texts]
    else:
        records = [
            {"q": t[: len(t) // 2 + 1], "a": t[len(t) // 2 + 1 :] or "w7", "g": i % 4} for i, t in enumerate(texts)
        ]
    path = write_jsonl(tmp_path / "in.jsonl", records)
    calls = bucket_reads(monkeypatch)
    common = ("--tokenizer", word_tokenizer, "--seq-len", 128, "--rows-per-shard", 30, "--format", "npy", *options)
    one = packed(path, *common, "--workers", 1)
    assert bool(calls) == ("concat" not in options)  # bin mode through the sorted spill
    two = packed(path, *common, "--workers", 2)
    assert _files(one) == _files(two)
    workers = json.loads((two / "report.json").read_text())["workers"]
    assert workers == {"kind": "threads" if kind == "text" else "processes", "count": 2}
