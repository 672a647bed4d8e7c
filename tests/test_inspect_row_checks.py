"""check_rows names the first bad row and what is wrong with it, for each kind of damage,
on rows in memory (tests/test_inspect_verify.py damages them on disk)."""

from __future__ import annotations

import numpy as np
import pytest
from test_write_shards import make_rows

from packcli.core.errors import PackcliError
from packcli.inspect.row_checks import check_rows


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda r: r.labels.__setitem__((1, 0), 5), "the first token of a segment"),
        (lambda r: r.num_segments.__setitem__(0, r.num_segments[0] + 2), "num_segments"),
        (lambda r: r.cu_seqlens.__setitem__(1, 0), "strictly increasing"),
    ],
)
def test_check_rows_names_each_kind_of_damage(damage, message):
    rows = make_rows(6, vocab=300)
    check_rows(rows, seq_len=16, pad_id=3, vocab_size=300)
    damage(rows)
    with pytest.raises(PackcliError, match=message):
        check_rows(rows, seq_len=16, pad_id=3, vocab_size=300)


def test_padding_must_hold_the_pad_id():
    rows = make_rows(50, vocab=300)
    padded = np.flatnonzero(rows.real_lengths() < 16)
    row = int(padded[0])
    rows.input_ids[row, -1] = 4
    with pytest.raises(PackcliError, match=f"row {row}: padding holds token 4"):
        check_rows(rows, seq_len=16, pad_id=3)


def test_token_outside_vocabulary():
    rows = make_rows(4, vocab=300)
    rows.input_ids[1, 0] = 300
    rows.labels[1, 0] = -100
    with pytest.raises(PackcliError, match="row 1: token id 300 outside the vocabulary"):
        check_rows(rows, seq_len=16, pad_id=3, vocab_size=300)


def test_first_bad_row_wins_whatever_the_kind():
    rows = make_rows(40, vocab=300)
    row = int(np.flatnonzero(rows.num_segments[10:] > 0)[0]) + 10
    rows.position_ids[row + 5, 0] = 1  # a later row, a check that comes first
    rows.labels[row, 0] = 9  # first token of a segment must be -100
    with pytest.raises(PackcliError, match=f"^row {row}: label at position 0 .the first token of a segment."):
        check_rows(rows, seq_len=16, pad_id=3, vocab_size=300)


def test_row_numbers_across_check_blocks(monkeypatch):
    import packcli.inspect.row_checks as row_checks

    monkeypatch.setattr(row_checks, "CHECK_BLOCK_ROWS", 7)
    rows = make_rows(50, vocab=300)
    check_rows(rows, seq_len=16, pad_id=3, vocab_size=300)
    rows.position_ids[23, 15] += 5
    with pytest.raises(PackcliError, match="^s row 123: position_ids do not restart"):
        check_rows(rows, seq_len=16, pad_id=3, vocab_size=300, where="s row", first_row=100)


def test_any_damaged_label_or_position_is_named_with_its_row():
    """Random single-cell damage: the kernel flags the row and the message names the damage."""
    rng = np.random.default_rng(0)
    clean = make_rows(60, seq_len=24, vocab=300, seed=4)
    for trial in range(150):
        rows = make_rows(60, seq_len=24, vocab=300, seed=4)
        row, col = int(rng.integers(60)), int(rng.integers(24))
        column = rows.labels if trial % 2 else rows.position_ids
        column[row, col] += int(rng.choice([-1, 1, 7, 1000]))
        with pytest.raises(PackcliError) as info:
            check_rows(rows, seq_len=24, pad_id=3, vocab_size=300)
        message = str(info.value)
        assert message.startswith(f"row {row}: "), message
        assert f"position {col}" in message and "could not name" not in message, message
    check_rows(clean, seq_len=24, pad_id=3, vocab_size=300)


def test_sft_labels_may_be_masked_inside_a_segment():
    rows = make_rows(20, vocab=300)
    first_lengths = rows.cu_seqlens[rows.cu_offsets[:-1] + 1]
    r = int(np.flatnonzero((rows.num_segments > 0) & (first_lengths > 1))[0])
    rows.labels[r, 1] = -100  # a prompt token
    check_rows(rows, seq_len=16, pad_id=3, labels_follow_ids=False)
    with pytest.raises(PackcliError, match=f"row {r}: label at position 1 is -100"):
        check_rows(rows, seq_len=16, pad_id=3, labels_follow_ids=True)
    rows.labels[r, 1] = 299 if rows.input_ids[r, 1] != 299 else 298
    with pytest.raises(PackcliError, match=f"row {r}: label at position 1"):
        check_rows(rows, seq_len=16, pad_id=3, labels_follow_ids=False)


def test_check_rows_takes_the_multiple_and_checks_padded_segments():
    import packcli

    sequences = [[5, 6, 7], [8, 9], [10, 11, 12, 13, 14], [15]]
    rows = packcli.pack_sequences(sequences, 16, pad_id=0, pad_to_multiple_of=4, shuffle=False).rows
    check_rows(rows, seq_len=16, pad_id=0, vocab_size=300, pad_to_multiple_of=4)  # plain-text labels hold
    with pytest.raises(PackcliError, match="cu_seqlens_unpadded does not fit --pad-to-multiple-of 8"):
        check_rows(rows, seq_len=16, pad_id=0, pad_to_multiple_of=8)
    row, position = first_inner_pad(rows)
    rows.input_ids[row, position] = 7
    check_rows(rows, seq_len=16, pad_id=0, labels_follow_ids=False)  # without the multiple a pad is a masked token
    with pytest.raises(PackcliError, match=rf"^row {row}: the pad at position {position} is not pad id 0"):
        check_rows(rows, seq_len=16, pad_id=0, pad_to_multiple_of=4)
    bare = packcli.pack_sequences(sequences, 16, pad_id=0).rows
    with pytest.raises(PackcliError, match="cu_seqlens_unpadded is missing"):
        check_rows(bare, seq_len=16, pad_id=0, pad_to_multiple_of=4)


def first_inner_pad(rows) -> tuple[int, int]:
    for r in range(len(rows)):
        lo, hi = rows.cu_offsets[r], rows.cu_offsets[r + 1]
        cu, real = rows.cu_seqlens[lo:hi], rows.cu_seqlens_unpadded[lo:hi]
        for k in range(int(rows.num_segments[r])):
            if real[k + 1] - real[k] < cu[k + 1] - cu[k]:
                return r, int(cu[k] + real[k + 1] - real[k])
    raise AssertionError("no inner pad")
