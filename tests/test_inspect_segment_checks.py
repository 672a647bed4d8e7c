"""The per-segment columns through check_rows: one entry per segment, sources in range,
preference pairs whole and matched, weights finite and 0 or more."""

from __future__ import annotations

import numpy as np
import pytest
from test_write_shards import make_rows

from packcli.core.errors import PackcliError
from packcli.inspect.row_checks import check_rows


def test_check_rows_knows_the_number_of_sources():
    rows = make_rows(6, seed=1, vocab=300)
    count = int(rows.num_segments.sum())
    rows.segment_columns = {"segment_source": np.full(count, 2, dtype=np.int32)}
    check_rows(rows, seq_len=16, pad_id=3, sources=3)
    with pytest.raises(PackcliError, match="segment_source 2 is not one of the manifest's 2 sources"):
        check_rows(rows, seq_len=16, pad_id=3, sources=2)
    rows.segment_columns = {"segment_source": np.zeros(count + 1, dtype=np.int32)}
    with pytest.raises(PackcliError, match="entries for"):
        check_rows(rows, seq_len=16, pad_id=3)


def pair_rows():
    import packcli

    rng = np.random.default_rng(2)
    chosen = [rng.integers(3, 90, size=int(rng.integers(2, 9))).tolist() for _ in range(12)]
    rejected = [c[:1] + rng.integers(3, 90, size=int(rng.integers(1, 6))).tolist() for c in chosen]
    packed = packcli.pack_pairs(chosen, rejected, 32, sample_weights=[1.0] * 12, pad_id=0, shuffle=False)
    return packed.rows


@pytest.mark.parametrize(
    ("tamper", "message"),
    [
        (lambda c: c["segment_chosen"].__setitem__(slice(0, 2), [0, 1]), "first segment has segment_chosen 0, not 1"),
        (lambda c: c["segment_pair"].__setitem__(1, 99), r"pair \d+ is followed by pair 99"),
        (lambda c: c["segment_weight"].__setitem__(1, 0.5), "two sides have weights 1.0 and 0.5"),
        (lambda c: c["segment_weight"].__setitem__(slice(0, 2), -1.0), "segment_weight -1.0 is not a finite number"),
        (lambda c: c.pop("segment_chosen"), "segment_pair without segment_chosen"),
    ],
)
def test_pairs_must_be_whole_and_matched(tamper, message):
    rows = pair_rows()
    check_rows(rows, seq_len=32, pad_id=0, labels_follow_ids=False)
    rows.segment_columns = {name: values.copy() for name, values in rows.segment_columns.items()}
    tamper(rows.segment_columns)
    with pytest.raises(PackcliError, match=message) as raised:
        check_rows(rows, seq_len=32, pad_id=0, labels_follow_ids=False)
    assert str(raised.value).startswith("row 0: ")
