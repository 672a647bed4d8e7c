"""The library shares the CLI's code path: same rows for the same input and settings."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import load_rows, write_jsonl
from hypothesis import given, settings
from hypothesis import strategies as st

import packcli
from packcli.core.errors import PackcliError
from packcli.inspect.verify import check_rows


def test_library_equals_cli(tmp_path, packed):
    rng = np.random.default_rng(0)
    sequences = [rng.integers(4, 300, size=int(n)).tolist() for n in rng.integers(1, 90, size=120)]
    path = write_jsonl(tmp_path / "ids.jsonl", [{"ids": s} for s in sequences])
    cases = [
        (a, m, sh, b)
        for a, m in (("bfd", "bin"), ("nf", "bin"), ("bfd", "concat"))
        for sh in (False, True)
        for b in (50, None)
    ]
    for algorithm, mode, shuffle, buffer_size in cases:
        window = ("--buffer-size", buffer_size) if buffer_size else ()
        out = packed(
            path,
            "--ids-field",
            "ids",
            "--no-eos",
            "--pad-id",
            0,
            "--seq-len",
            64,
            "--algorithm",
            algorithm,
            "--mode",
            mode,
            "--shuffle" if shuffle else "--no-shuffle",
            *window,
        )
        cli_rows, _ = load_rows(out)
        lib = packcli.pack_sequences(
            sequences, 64, algorithm=algorithm, mode=mode, pad_id=0, buffer_size=buffer_size, shuffle=shuffle
        )
        for name in ("input_ids", "labels", "position_ids", "cu_seqlens", "cu_offsets", "num_segments"):
            np.testing.assert_array_equal(
                getattr(lib.rows, name),
                getattr(cli_rows, name),
                err_msg=f"{algorithm} {mode} {shuffle} {buffer_size} {name}",
            )


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Rank correlation, ties given their average rank."""

    def ranks(a: np.ndarray) -> np.ndarray:
        _, inverse = np.unique(a, return_inverse=True)
        order = np.argsort(a, kind="stable")
        position = np.empty(len(a))
        position[order] = np.arange(len(a))
        return (np.bincount(inverse, weights=position) / np.bincount(inverse))[inverse]

    return float(np.corrcoef(ranks(x), ranks(y))[0, 1])


def test_rows_are_shuffled_by_default_in_cli_and_library(tmp_path, packed):
    rng = np.random.default_rng(1)
    sizes = np.concatenate([rng.integers(40, 64, size=300), rng.integers(1, 12, size=900)])
    sequences = [rng.integers(4, 300, size=int(n)).tolist() for n in sizes]
    path = write_jsonl(tmp_path / "ids.jsonl", [{"ids": s} for s in sequences])
    cli_rows, _ = load_rows(packed(path, "--ids-field", "ids", "--no-eos", "--pad-id", 0, "--seq-len", 64))
    lib = packcli.pack_sequences(sequences, 64, pad_id=0)
    np.testing.assert_array_equal(lib.rows.input_ids, cli_rows.input_ids)
    plan = packcli.pack_sequences(sequences, 64, pad_id=0, shuffle=False)
    assert sorted(lib.input_ids.tolist()) == sorted(plan.input_ids.tolist())
    # the plan's order is a curriculum (one long sequence per row first); the default order is not
    index = np.arange(plan.num_rows)
    assert abs(spearman(index, plan.rows.num_segments)) > 0.5
    assert abs(spearman(index, lib.rows.num_segments)) < 0.1


def test_padding_places_padded_lengths_and_counts_real_tokens(tmp_path, packed):
    from packcli.plan.kernels.pack import pack_lengths

    rng = np.random.default_rng(2)
    sequences = [rng.integers(4, 300, size=int(n)).tolist() for n in rng.integers(1, 65, size=150)]
    path = write_jsonl(tmp_path / "ids.jsonl", [{"ids": s} for s in sequences])
    options = ("--ids-field", "ids", "--no-eos", "--pad-id", 0, "--seq-len", 64, "--pad-to-multiple-of", 8)
    out = packed(path, *options)
    cli_rows, _ = load_rows(out)
    lib = packcli.pack_sequences(sequences, 64, pad_id=0, pad_to_multiple_of=8)
    for name in ("input_ids", "labels", "position_ids", "cu_seqlens", "cu_seqlens_unpadded", "max_seqlen"):
        np.testing.assert_array_equal(getattr(lib.rows, name), getattr(cli_rows, name), err_msg=name)
    lengths = np.array([len(s) for s in sequences])
    assert lib.num_rows == pack_lengths(-(-lengths // 8) * 8, 64, algorithm="bfd").n_rows
    assert lib.report["real_tokens"] == lengths.sum()
    assert lib.efficiency == pytest.approx(lengths.sum() / (lib.num_rows * 64))
    assert lib.report["sequence_length"]["max"] == lengths.max()
    check_rows(lib.rows, seq_len=64, pad_id=0, labels_follow_ids=False)
    with pytest.raises(PackcliError, match="pad_to_multiple_of applies to bin mode only"):
        packcli.pack_sequences(sequences, 64, mode="concat", pad_to_multiple_of=8)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.lists(st.integers(1, 50), min_size=1, max_size=40), min_size=1, max_size=30),
    st.integers(8, 48),
    st.sampled_from(["nf", "ff", "ffd", "bfd", "spfhp", "lpfhp"]),
    st.sampled_from(["split", "truncate", "drop"]),
)
def test_library_results_hold_the_invariants(sequences, seq_len, algorithm, overlong):
    packed = packcli.pack_sequences(sequences, seq_len, algorithm=algorithm, overlong=overlong, pad_id=0)
    check_rows(packed.rows, seq_len=seq_len, pad_id=0)
    placement = packed.placement
    # every piece sits where the placement says; a sequence's pieces, in order, rebuild it
    rebuilt = {}
    for seq, row, offset, length in zip(*(placement[k] for k in ("sequence", "row", "offset", "length"))):
        rebuilt.setdefault(int(seq), []).extend(packed.input_ids[row, offset : offset + length].tolist())
    for i, sequence in enumerate(sequences):
        if len(sequence) <= seq_len or overlong == "split":
            assert rebuilt[i] == sequence
        elif overlong == "truncate":
            assert rebuilt[i] == sequence[:seq_len]
        else:
            assert i not in rebuilt
    assert packed.report["rows"] == packed.num_rows >= packed.report["lower_bound_rows"]


def test_labels_are_kept_and_first_tokens_masked():
    packed = packcli.pack_sequences([[5, 6, 7], [8, 9]], 8, algorithm="nf", labels=[[-100, 6, 7], [-100, 9]], pad_id=1)
    assert packed.labels.tolist() == [[-100, 6, 7, -100, 9, -100, -100, -100]]
    assert packed.position_ids.tolist() == [[0, 1, 2, 0, 1, 0, 1, 2]]
    assert [c.tolist() for c in packed.cu_seqlens_per_row()] == [[0, 3, 5, 8]]
    assert packed.efficiency == pytest.approx(5 / 8)


def test_bad_arguments():
    with pytest.raises(PackcliError, match="algorithm must be one of"):
        packcli.pack_sequences([[1]], 4, algorithm="magic")
    with pytest.raises(PackcliError, match="one label per token"):
        packcli.pack_sequences([[1, 2]], 4, labels=[[1]])
    with pytest.raises(PackcliError, match="sequence 1 is empty"):
        packcli.pack_sequences([[1], []], 4)


@settings(max_examples=40, deadline=None)
@given(
    algorithm=st.sampled_from(["nf", "ff", "ffd", "bfd", "spfhp", "lpfhp"]),
    cap=st.one_of(st.none(), st.integers(1, 4)),
    shuffle=st.booleans(),
    window=st.one_of(st.none(), st.integers(1, 20)),
    data=st.lists(st.tuples(st.integers(1, 20), st.sampled_from(["a", "b", None, 3])), min_size=1, max_size=50),
)
def test_groups_and_caps_keep_every_invariant(algorithm, cap, shuffle, window, data):
    """Random groups and caps: rows pass the verifier's checks, hold one group and at most
    `cap` sequences, and each group keeps exactly its sequences."""
    sequences = [[4 + i % 50] * n for i, (n, _) in enumerate(data)]
    groups = [g for _, g in data]
    packed = packcli.pack_sequences(
        sequences,
        16,
        algorithm=algorithm,
        groups=groups,
        max_sequences_per_row=cap,
        shuffle=shuffle,
        buffer_size=window,
        overlong="split",
    )
    check_rows(packed.rows, seq_len=16, pad_id=0)
    if cap is not None:
        assert packed.rows.num_segments.max() <= cap
    values = [e["value"] for e in packed.report["groups"]]
    placement = packed.placement
    for row in range(packed.num_rows):
        owners = placement["sequence"][placement["row"] == row]
        assert {repr(groups[i]) for i in owners} == {repr(values[packed.row_group[row]])}
    for g, value in enumerate(values):
        pieces = [-(-len(s) // 16) for s in sequences]  # split overlong sequences are several segments
        mine = sorted(i for i in range(len(sequences)) if repr(groups[i]) == repr(value) for _ in range(pieces[i]))
        rows = np.flatnonzero(packed.row_group == g)
        assert sorted(placement["sequence"][np.isin(placement["row"], rows)].tolist()) == mine


def test_cap_cost_is_measured_on_the_padded_lengths_the_plan_packs():
    """A cap that never binds costs nothing, also with --pad-to-multiple-of: the uncapped
    plan it is compared with packs the same padded lengths."""
    rng = np.random.default_rng(11)
    sequences = [rng.integers(3, 50, size=int(n)).tolist() for n in rng.integers(1, 30, size=300)]
    packed = packcli.pack_sequences(sequences, 64, pad_to_multiple_of=8, max_sequences_per_row=64)
    cap = packed.report["max_sequences_per_row"]
    assert cap["extra_rows"] == 0 and cap["uncapped_rows"] == packed.num_rows


# ----------------------------------------------------------------------------- mixtures


def test_a_mixture_in_memory_gives_the_rows_pack_gives(cli, tmp_path):
    """pack_sequences of sources by name, with weights, makes the rows `packcli pack --mix`
    makes of the same token ids, each segment tagged with its source."""
    import json

    from helpers import load_rows, write_jsonl

    from packcli import pack_sequences

    rng = np.random.default_rng(3)
    sources = {
        "web": [rng.integers(100, 199, size=int(rng.integers(3, 40))).tolist() for _ in range(600)],
        "code": [rng.integers(200, 299, size=int(rng.integers(3, 40))).tolist() for _ in range(50)],
    }
    for name, sequences in sources.items():
        write_jsonl(tmp_path / f"{name}.jsonl", [{"ids": s} for s in sequences])
    mix = tmp_path / "mix.toml"
    mix.write_text(
        'seed = 4\ntarget_tokens = 20000\n[[source]]\nname = "web"\npaths = ["web.jsonl"]\nweight = 0.6\n'
        '[[source]]\nname = "code"\npaths = ["code.jsonl"]\nweight = 0.4\n'
    )
    out = tmp_path / "out"
    args = ("--ids-field", "ids", "--no-eos", "--pad-id", "0", "--seq-len", "128", "--seed", "4")
    assert cli("pack", "--mix", mix, "-o", out, *args).exit_code == 0
    rows, _ = load_rows(out)
    packed = pack_sequences(
        sources, seq_len=128, pad_id=0, weights={"web": 0.6, "code": 0.4}, target_tokens=20000, seed=4
    )
    assert np.array_equal(packed.input_ids, rows.input_ids)
    assert np.array_equal(packed.labels, rows.labels)
    assert np.array_equal(packed.segment_source, rows.segment_columns["segment_source"])
    report = json.loads((out / "report.json").read_text())
    assert [s["tokens"]["out"] for s in packed.report["sources"]] == [s["tokens"]["out"] for s in report["sources"]]
    assert [s["documents"]["taken"] for s in packed.report["sources"]] == [
        s["documents"]["taken"] for s in report["sources"]
    ]
    placement = packed.placement
    first_ids = packed.input_ids[placement["row"], placement["offset"]]
    for source, sequence, first in zip(placement["source"].tolist(), placement["sequence"].tolist(), first_ids):
        assert sources[("web", "code")[source]][sequence][0] == first


def test_mixture_arguments_are_checked():
    from packcli import pack_sequences

    with pytest.raises(PackcliError, match="go with a mixture"):
        pack_sequences([[1, 2]], seq_len=8, weights={"a": 1})
    with pytest.raises(PackcliError, match="'b', which is not a source"):
        pack_sequences({"a": [[1, 2]]}, seq_len=8, weights={"b": 1})
    with pytest.raises(PackcliError, match="weight must be a number at least 0"):
        pack_sequences({"a": [[1, 2]]}, seq_len=8, weights={"a": -1})
    with pytest.raises(PackcliError, match="exclude each other"):
        pack_sequences({"a": [[1, 2]]}, seq_len=8, weights={"a": 1}, epochs={"a": 2})
