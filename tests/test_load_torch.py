"""packcli.load.torch: the Dataset over a packed directory, collate functions, PackedBatch,
and the proof that packed rows keep sequences apart in a real causal LM."""

from __future__ import annotations

import subprocess
import sys
import types

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from helpers import load_rows, random_texts, write_jsonl
from mixed import mixed_output

import packcli
from packcli.core.errors import PackcliError
from packcli.inspect.verify import check_rows
from packcli.load import hf
from packcli.load.torch import (
    PackedBatch,
    PackedDataset,
    PackingCollator,
    block_causal_mask,
    collate_rows,
    varlen_attention,
)
from packcli.plan.rows import Rows


def batch_rows(batch: PackedBatch) -> Rows:
    cu = [c.numpy() for c in batch.row_cu_seqlens]
    offsets = np.concatenate([[0], np.cumsum([len(c) for c in cu])]).astype(np.int64)
    real = batch.attention_mask.sum(dim=1).numpy()
    num_segments = np.array([len(c) - 1 - (r < batch.input_ids.shape[1]) for c, r in zip(cu, real)], dtype=np.int32)
    return Rows(
        *(getattr(batch, n).numpy().astype(np.int32) for n in ("input_ids", "labels", "position_ids")),
        np.concatenate(cu),
        offsets,
        num_segments,
    )


def flat_cu(row_cu, seq_len):
    """The batch cu_seqlens written out the obvious way: every row's boundaries, shifted."""
    out = [0]
    for r, cu in enumerate(row_cu):
        out += [int(x) + r * seq_len for x in cu[1:]]
    return out


@pytest.fixture(scope="module")
def outputs(tmp_path_factory, word_tokenizer):
    """The same corpus packed to npy and to parquet, several shards each."""
    from typer.testing import CliRunner

    from packcli.cli.app import app

    tmp = tmp_path_factory.mktemp("torch")
    path = write_jsonl(tmp / "in.jsonl", [{"text": t} for t in random_texts(90, seed=7, max_words=45)])
    dirs = {}
    for fmt in ("npy", "parquet"):
        dirs[fmt] = tmp / fmt
        result = CliRunner().invoke(
            app,
            [
                "pack",
                str(path),
                "-o",
                str(dirs[fmt]),
                "--tokenizer",
                str(word_tokenizer),
                "--seq-len",
                "48",
                "--format",
                fmt,
                "--rows-per-shard",
                "10",
            ],
        )
        assert result.exit_code == 0, result.output
    return dirs


def test_dataset_over_npy_is_zero_copy_and_equals_the_shards(outputs):
    rows, _ = load_rows(outputs["npy"])
    ds = PackedDataset(outputs["npy"])
    assert len(ds) == len(rows) and len(ds.manifest["shards"]) > 1
    for i in (0, 9, 10, len(ds) - 1, -1):
        item = ds[i]
        r = i % len(rows)
        assert item["input_ids"].dtype == torch.uint16  # on-disk dtype: widened only by the collate
        assert item["input_ids"].tolist() == rows.input_ids[r].tolist()
        assert item["labels"].tolist() == rows.labels[r].tolist()
        assert item["position_ids"].tolist() == rows.position_ids[r].tolist()
        assert item["cu_seqlens"].tolist() == rows.cu_seqlens[rows.cu_offsets[r] : rows.cu_offsets[r + 1]].tolist()
        assert item["num_segments"] == rows.num_segments[r]
    shard = ds._shard(1)
    item = ds[12]
    assert item["labels"].data_ptr() == shard["labels"][2].ctypes.data  # a view of the memory map
    assert isinstance(shard["labels"], np.memmap)
    with pytest.raises(IndexError):
        ds[len(ds)]


def test_dataset_over_parquet_equals_npy_and_loads_in_a_dataloader(outputs):
    npy, parquet = PackedDataset(outputs["npy"]), PackedDataset(outputs["parquet"])
    assert len(npy) == len(parquet)
    loader = torch.utils.data.DataLoader(parquet, batch_size=4, collate_fn=collate_rows, num_workers=0)
    seen = 0
    for batch in loader:
        expected = collate_rows([npy[seen + i] for i in range(len(batch))])
        for name in ("input_ids", "labels", "position_ids", "attention_mask", "cu_seqlens"):
            assert torch.equal(getattr(batch, name), getattr(expected, name)), name
        seen += len(batch)
    assert seen == len(npy)


def test_collate_rows_layout(outputs):
    rows, manifest = load_rows(outputs["npy"])
    ds = PackedDataset(outputs["npy"])
    examples = [ds[i] for i in range(6)]
    batch = collate_rows(examples)
    assert batch.input_ids.dtype == batch.labels.dtype == batch.position_ids.dtype == torch.int64
    assert batch.input_ids.shape == (6, 48) and batch.cu_seqlens.dtype == torch.int32
    assert batch.cu_seqlens.tolist() == flat_cu([e["cu_seqlens"] for e in examples], 48)
    assert batch.max_seqlen == int(np.diff(batch.cu_seqlens.numpy()).max())
    assert batch.attention_mask.sum(dim=1).tolist() == rows.real_lengths()[:6].tolist()
    check_rows(batch_rows(batch), seq_len=48, pad_id=manifest["tokenizer"]["pad_id"], vocab_size=300)
    # rows from packcli.load.hf (no cu_seqlens column: boundaries come from position_ids)
    hf_rows = hf.load(outputs["npy"])
    from_hf = collate_rows([hf_rows[i] for i in range(6)])
    assert torch.equal(from_hf.cu_seqlens, batch.cu_seqlens) and torch.equal(from_hf.input_ids, batch.input_ids)
    inputs = hf.collator([hf_rows[i] for i in range(6)])
    assert "attention_mask" not in inputs and inputs["use_cache"] is False
    assert torch.equal(inputs["cu_seq_lens_q"], batch.cu_seqlens) and inputs["max_length_q"] == batch.max_seqlen
    moved = batch.to("cpu")
    assert torch.equal(moved.labels, batch.labels) and moved.max_seqlen == batch.max_seqlen
    with pytest.raises(PackcliError, match="every example needs 'labels'"):
        collate_rows([{"input_ids": [1, 2]}])


def test_packing_collator_packs_on_the_fly():
    rng = np.random.default_rng(1)
    sequences = [rng.integers(3, 300, size=int(n)).tolist() for n in rng.integers(1, 30, size=40)]
    collate = PackingCollator(32, pad_id=0, eos_id=1)
    batch = collate([{"input_ids": s} for s in sequences])
    expected = packcli.pack_sequences([s + [1] for s in sequences], 32, pad_id=0)
    assert batch.input_ids.tolist() == expected.input_ids.tolist()
    assert batch.cu_seqlens.tolist() == flat_cu(expected.cu_seqlens_per_row(), 32)
    check_rows(batch_rows(batch), seq_len=32, pad_id=0, vocab_size=300)
    # labels pass through, -100 stays -100; plain token lists work too
    batch = PackingCollator(8, algorithm="nf")([{"input_ids": [5, 6, 7], "labels": [-100, -100, 7]}, [8, 9]])
    assert batch.labels.tolist() == [[-100, -100, 7, -100, 9, -100, -100, -100]]
    loader = torch.utils.data.DataLoader(sequences, batch_size=16, collate_fn=PackingCollator(32))
    assert sum(int(b.attention_mask.sum()) for b in loader) == sum(map(len, sequences))


def test_varlen_attention_keeps_sequences_apart(monkeypatch):
    torch.manual_seed(0)
    lengths = [5, 1, 9, 3]
    batch = PackingCollator(10, algorithm="nf")([list(range(3, 3 + n)) for n in lengths])
    tokens, heads, dim = batch.input_ids.numel(), 4, 8
    q, k, v = (torch.randn(tokens, heads, dim, dtype=torch.float64) for _ in range(3))
    out = varlen_attention(q, k, v, batch.cu_seqlens, batch.max_seqlen, backend="torch")
    bounds = batch.cu_seqlens.tolist()
    for s, e in zip(bounds[:-1], bounds[1:]):  # each segment alone, causal
        scores = (q[s:e].transpose(0, 1) @ k[s:e].transpose(0, 1).transpose(1, 2)) / dim**0.5
        scores = scores.masked_fill(torch.ones(e - s, e - s, dtype=torch.bool).triu(1), float("-inf"))
        alone = (scores.softmax(-1) @ v[s:e].transpose(0, 1)).transpose(0, 1)
        torch.testing.assert_close(out[s:e], alone)
    # with flash-attn installed, its varlen function gets exactly these arguments
    calls = []

    def fake_flash(q, k, v, **kwargs):
        calls.append(kwargs)
        return varlen_attention(q, k, v, kwargs["cu_seqlens_q"], kwargs["max_seqlen_q"], backend="torch")

    monkeypatch.setitem(sys.modules, "flash_attn", types.SimpleNamespace(flash_attn_varlen_func=fake_flash))
    torch.testing.assert_close(varlen_attention(q, k, v, batch.cu_seqlens, batch.max_seqlen, backend="flash"), out)
    assert calls[0]["cu_seqlens_q"] is batch.cu_seqlens and calls[0]["max_seqlen_k"] == batch.max_seqlen
    assert calls[0]["causal"] is True and batch.cu_seqlens.dtype == torch.int32


def tiny_llama(attn: str, seed: int = 0, dtype=None):
    """A two-layer Llama of random weights (float64 unless `dtype` says), the same for a seed."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=300,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        attn_implementation=attn,
    )
    torch.manual_seed(seed)
    return LlamaForCausalLM(config).to(dtype or torch.float64).eval()


def per_token_loss(logits, labels):
    """Loss of predicting labels[:, i + 1] from position i (labels are unshifted)."""
    return torch.nn.functional.cross_entropy(
        logits[:, :-1].transpose(1, 2), labels[:, 1:], reduction="none", ignore_index=-100
    )


def test_packed_rows_give_each_sequence_the_loss_it_has_alone():
    """Boundaries hold: a causal LM scores every token of a packed row as it scores it
    in its sequence run alone, and a mask that lets tokens see across boundaries does not."""
    rng = np.random.default_rng(3)
    sequences = [rng.integers(3, 300, size=int(n)).tolist() for n in (7, 12, 1, 5, 9, 16, 2)]
    packed = packcli.pack_sequences(sequences, 24, pad_id=0)
    assert packed.num_rows >= 2 and (packed.rows.num_segments >= 2).any()
    batch = PackedBatch.from_rows(packed.rows)
    sdpa, eager = tiny_llama("sdpa"), tiny_llama("eager")
    with torch.no_grad():
        expected = torch.full(batch.labels[:, 1:].shape, float("nan"), dtype=torch.float64)
        for seq, row, offset, length in zip(*(packed.placement[k] for k in ("sequence", "row", "offset", "length"))):
            ids = torch.tensor([sequences[seq]])
            expected[row, offset : offset + length - 1] = per_token_loss(sdpa(input_ids=ids).logits, ids)[0]
        learned = batch.labels[:, 1:] != -100
        assert int(learned.sum()) == sum(len(s) - 1 for s in sequences)
        assert not expected[learned].isnan().any()

        def losses(model, **inputs):
            return per_token_loss(model(**inputs).logits, batch.labels)[learned]

        # 1. what the collators feed a transformers model (packed mask from position_ids)
        out = sdpa(**batch.model_inputs())
        torch.testing.assert_close(
            per_token_loss(out.logits, batch.labels)[learned], expected[learned], rtol=0, atol=1e-10
        )
        assert abs(out.loss.item() - expected[learned].mean().item()) < 1e-6  # HF's loss runs in float32
        # 2. an explicit block-diagonal causal mask built from cu_seqlens (eager softmax is float32)
        mask = block_causal_mask(batch, torch.float64)
        got = losses(
            eager, input_ids=batch.input_ids, position_ids=batch.position_ids, attention_mask=mask, use_cache=False
        )
        torch.testing.assert_close(got, expected[learned], rtol=0, atol=1e-6)
        # 3. leaks are caught: a plain causal mask over the whole row changes the losses
        causal = torch.zeros_like(mask).masked_fill(
            ~torch.ones(24, 24, dtype=torch.bool).tril(), torch.finfo(torch.float64).min
        )
        leaky = losses(
            eager, input_ids=batch.input_ids, position_ids=batch.position_ids, attention_mask=causal, use_cache=False
        )
        assert (leaky - expected[learned]).abs().max() > 1e-3
        # ... which is what transformers does when given an attention_mask of ones (why
        # packcli.load.hf leaves that column out by default)
        leaky = losses(
            sdpa,
            input_ids=batch.input_ids,
            position_ids=batch.position_ids,
            attention_mask=torch.ones_like(batch.input_ids),
            use_cache=False,
        )
        assert (leaky - expected[learned]).abs().max() > 1e-3


def test_trainer_runs_on_a_loaded_output(outputs, tmp_path):
    pytest.importorskip("accelerate", reason="transformers' Trainer needs accelerate")
    from transformers import Trainer, TrainingArguments

    args = TrainingArguments(
        output_dir=str(tmp_path / "run"),
        per_device_train_batch_size=4,
        max_steps=2,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        logging_strategy="no",
    )
    model = tiny_llama("sdpa").float().train()
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=hf.load(outputs["parquet"], cache_dir=str(tmp_path / "c")),
        data_collator=hf.collator,
    )
    result = trainer.train()
    assert result.global_step == 2 and np.isfinite(result.training_loss)


def test_the_module_gives_every_public_name_of_the_modules_that_define_them():
    """packcli.load.torch is where users import from: each name a torch_* module declares
    public (its __all__) is in the gathered __all__, as the very object its module defines;
    what a module defines without an underscore but leaves out of __all__ (the tensor
    builders the collate functions share) is package-internal."""
    import importlib
    import inspect

    import packcli.load.torch as gathered

    declared, internal = {}, set()
    for name in ("torch_attention", "torch_batch", "torch_collate", "torch_dataset", "torch_pairs"):
        module = importlib.import_module(f"packcli.load.{name}")
        for key, value in vars(module).items():
            defined_here = inspect.isclass(value) or inspect.isfunction(value)
            if defined_here and value.__module__ == module.__name__ and not key.startswith("_"):
                if key in module.__all__:
                    declared[key] = value
                else:
                    internal.add(key)
        assert all(vars(module)[key].__module__ == module.__name__ for key in module.__all__)
    assert sorted(declared) == sorted(gathered.__all__)
    assert all(getattr(gathered, key) is value for key, value in declared.items())
    assert {"PackedBatch", "PackedDataset", "collate_rows", "pair_logps", "dpo_loss"} <= set(declared)
    assert internal == {"build_batch", "long_tensor", "segment_tensor"}


def test_clear_error_without_torch():
    code = "import sys; sys.modules['torch'] = None\nimport packcli.load.torch"
    result = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True)
    assert result.returncode != 0 and "packcli.load.torch needs PyTorch" in result.stderr


def losses_by_sequence(packed, model):
    """Per sequence, the losses of its learned tokens as a packed batch's model inputs give them."""
    batch = PackedBatch.from_rows(packed.rows)
    with torch.no_grad():
        losses = per_token_loss(model(**batch.model_inputs()).logits, batch.labels)
    by_sequence = {}
    for seq, row, offset, length in zip(*(packed.placement[k] for k in ("sequence", "row", "offset", "length"))):
        by_sequence[int(seq)] = losses[row, offset : offset + length - 1]
    return by_sequence, batch


def test_padding_to_a_multiple_leaves_every_loss_as_it_was():
    rng = np.random.default_rng(4)
    sequences = [rng.integers(3, 300, size=int(n)).tolist() for n in (7, 12, 1, 5, 9, 16, 2, 3)]
    model = tiny_llama("sdpa")
    plain, plain_batch = losses_by_sequence(packcli.pack_sequences(sequences, 32, pad_id=0), model)
    packed = packcli.pack_sequences(sequences, 32, pad_id=0, pad_to_multiple_of=8)
    padded, batch = losses_by_sequence(packed, model)
    assert (np.diff(packed.rows.cu_seqlens) % 8 == 0)[np.diff(packed.rows.cu_seqlens) > 0].all()
    assert set(plain) == set(padded) == set(range(len(sequences)))
    for seq in plain:
        torch.testing.assert_close(padded[seq], plain[seq], rtol=0, atol=1e-10)
    with torch.no_grad():
        loss_plain = model(**plain_batch.model_inputs()).loss
        loss_padded = model(**batch.model_inputs()).loss
    assert abs(loss_plain.item() - loss_padded.item()) < 1e-6
    assert int(batch.attention_mask.sum()) == sum(len(s) for s in sequences)


def test_batch_boundaries_for_thd_mamba_and_flex():
    from megatron.core.packed_seq_params import PackedSeqParams

    packed = packcli.pack_sequences(
        [[5, 6, 7], [8, 9], [10, 11, 12, 13, 14]], 16, pad_id=0, pad_to_multiple_of=4, shuffle=False
    )
    batch = PackedBatch.from_rows(packed.rows)
    params = batch.packed_seq_params()
    assert type(params) is PackedSeqParams and params.qkv_format == "thd"
    cu, real = batch.cu_seqlens.tolist(), batch.cu_seqlens_unpadded.tolist()
    assert params.cu_seqlens_q_padded.tolist() == params.cu_seqlens_kv_padded.tolist() == cu
    assert params.cu_seqlens_q.tolist() == params.cu_seqlens_kv.tolist() == real
    assert len(cu) == len(real) and all(b - a <= d - c for a, b, c, d in zip(real, real[1:], cu, cu[1:]))
    assert params.max_seqlen_q == params.max_seqlen_kv == batch.max_seqlen == int(packed.rows.max_seqlen.max())
    assert batch.seq_idx.tolist() == [[0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2]]
    assert batch.segment_ids.tolist() == [[0, 0, 0, 0, 0, -1, -1, -1, 1, 1, 1, -1, 2, 2, -1, -1]]
    assert sorted(batch.input_ids[batch.segment_ids >= 0].tolist()) == list(range(5, 15))


def test_fixed_length_cu_seqlens_pad_with_minus_one(tmp_path, packed, word_tokenizer):
    path = write_jsonl(tmp_path / "d.jsonl", [{"text": t} for t in random_texts(40, seed=6)])
    out = packed(path, "--tokenizer", word_tokenizer, "--seq-len", 64, "--pad-to-multiple-of", 8, "--format", "npy")
    plain, fixed = PackedDataset(out), PackedDataset(out, cu_seqlens_len=16)
    item = fixed[0]
    n = item["cu_seqlens_argmin"]
    assert item["cu_seqlens"].shape == (16,) and (item["cu_seqlens"][n:] == -1).all()
    assert item["cu_seqlens"][:n].tolist() == plain[0]["cu_seqlens"].tolist()
    assert (
        item["cu_seqlens_unpadded"][: item["cu_seqlens_unpadded_argmin"]].tolist()
        == plain[0]["cu_seqlens_unpadded"].tolist()
    )
    assert item["max_seqlen"] == int(np.diff(plain[0]["cu_seqlens"].numpy()).max())
    a, b = collate_rows([fixed[i] for i in range(4)]), collate_rows([plain[i] for i in range(4)])
    assert (
        a.cu_seqlens.tolist() == b.cu_seqlens.tolist()
        and a.cu_seqlens_unpadded.tolist() == b.cu_seqlens_unpadded.tolist()
    )
    with pytest.raises(PackcliError, match="more than cu_seqlens_len 2"):
        PackedDataset(out, cu_seqlens_len=2)[0]


# ----------------------------------------------------------------------------- a mixture's sources


def naive_token_source(rows: Rows) -> np.ndarray:
    """Each token's segment_source, -1 on the padding segment and the pads after a segment."""
    out = np.full(rows.input_ids.shape, -1, dtype=np.int64)
    unpadded = rows.cu_seqlens if rows.cu_seqlens_unpadded is None else rows.cu_seqlens_unpadded
    source = rows.segment_columns["segment_source"].tolist()
    k = 0
    for r in range(len(rows)):
        cu = rows.cu_seqlens[rows.cu_offsets[r] : rows.cu_offsets[r + 1]]
        real = np.diff(unpadded[rows.cu_offsets[r] : rows.cu_offsets[r + 1]])
        for j in range(int(rows.num_segments[r])):
            out[r, cu[j] : cu[j] + real[j]] = source[k]
            k += 1
    return out


@pytest.mark.parametrize("fmt", ["parquet", "npy"])
def test_items_and_batches_carry_each_segments_source(tmp_path, fmt):
    out = mixed_output(tmp_path / "o", fmt, multiple=4, seq_len=32).out
    rows, manifest = load_rows(out)
    offsets = rows.seg_offsets
    dataset = PackedDataset(out)
    for r in range(len(rows)):
        item = dataset[r]
        want = rows.segment_columns["segment_source"][offsets[r] : offsets[r + 1]]
        assert item["segment_source"].dtype == torch.int32 and item["segment_source"].tolist() == want.tolist()
    loader = torch.utils.data.DataLoader(dataset, batch_size=5, collate_fn=collate_rows)
    batches = list(loader)
    token_source = torch.cat([batch.token_source for batch in batches]).numpy()
    assert (token_source == naive_token_source(rows)).all()
    assert torch.cat([b.segment_source for b in batches]).tolist() == rows.segment_columns["segment_source"].tolist()
    assert ((token_source >= 0) == (torch.cat([b.attention_mask for b in batches]).numpy() == 1)).all()
    from_rows = PackedBatch.from_rows(rows)
    assert (from_rows.token_source.numpy() == naive_token_source(rows)).all()
    learned = rows.labels != -100  # every learned token belongs to a source: a loss per source sums to the whole
    per_source = np.bincount(token_source[learned], minlength=len(manifest["sources"]))
    assert per_source.tolist() == [s["tokens"]["learned"] for s in manifest["sources"]]
    moved = batches[0].to("cpu")
    assert moved.segment_source.tolist() == batches[0].segment_source.tolist()
    assert moved.num_segments.tolist() == batches[0].num_segments.tolist()


def test_fixed_shapes_pad_per_segment_columns_and_collate_strips_them(tmp_path):
    out = mixed_output(tmp_path / "o", "npy").out
    plain, fixed = PackedDataset(out), PackedDataset(out, cu_seqlens_len=6)
    for i in range(len(plain)):
        n = plain[i]["num_segments"]
        assert fixed[i]["segment_source"].shape == (5,) and (fixed[i]["segment_source"][n:] == -1).all()
        assert fixed[i]["segment_source"][:n].tolist() == plain[i]["segment_source"].tolist()
    a, b = collate_rows([fixed[i] for i in range(6)]), collate_rows([plain[i] for i in range(6)])
    assert a.segment_source.tolist() == b.segment_source.tolist()
    assert a.token_source.tolist() == b.token_source.tolist()


def test_per_token_of_a_batch_without_the_column_is_refused(outputs):
    batch = collate_rows([PackedDataset(outputs["npy"])[0]])
    assert batch.segment_source is None and batch.segment_columns == {}
    with pytest.raises(PackcliError, match="no 'segment_source' in this batch"):
        batch.per_token("segment_source")


def test_a_row_with_fewer_source_entries_than_segments_is_refused():
    row = {"input_ids": [5, 6, 7, 8], "labels": [-100, 6, -100, 8], "position_ids": [0, 1, 0, 1]}
    with pytest.raises(PackcliError, match="row 0: segment_source has 1 entries for 2 segments"):
        collate_rows([{**row, "num_segments": 2, "segment_source": [1]}])
    batch = collate_rows([{**row, "segment_source": [1, 0]}])  # the column's length gives the count
    assert batch.token_source.tolist() == [[1, 1, 0, 0]] and batch.num_segments.tolist() == [2]


def test_token_weight_spreads_each_segments_weight():
    packed = packcli.pack_sequences(
        [[5, 6, 7], [8, 9], [10, 11, 12, 13]], 8, sample_weights=[0.5, 2.0, 0.0], shuffle=False
    )
    batch = PackedBatch.from_rows(packed.rows)
    assert packed.report["zero_weight"] == 1
    weights = batch.token_weight
    assert weights.dtype == torch.float32 and weights.shape == batch.input_ids.shape
    learned = batch.labels != -100
    assert set(weights[learned].tolist()) == {0.5, 2.0} and (weights[batch.attention_mask == 0] == 0).all()
