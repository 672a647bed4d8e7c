"""packcli.load.torch_pairs: preference pairs in a packed batch, each pair's summed
log-probabilities and the DPO loss, held against each pair run alone in a real causal LM."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from test_load_torch import tiny_llama

import packcli
from packcli.core.errors import PackcliError
from packcli.inspect.verify import check_rows
from packcli.load.torch_batch import PackedBatch
from packcli.load.torch_pairs import PairLogps, dpo_loss, pair_logps, pairs_of, segment_logps


def preference_pairs(n: int, seed: int):
    """Pairs of token lists sharing a prompt, with labels (-100 on the prompt) and weights."""
    rng = np.random.default_rng(seed)
    chosen, rejected, chosen_labels, rejected_labels = [], [], [], []
    for _ in range(n):
        prompt = rng.integers(3, 300, size=int(rng.integers(2, 9))).tolist()
        for sides, labels in ((chosen, chosen_labels), (rejected, rejected_labels)):
            answer = rng.integers(3, 300, size=int(rng.integers(1, 8))).tolist()
            sides.append(prompt + answer)
            labels.append([-100] * len(prompt) + answer)
    weights = rng.choice([0.5, 1.0, 2.0], size=n).tolist()
    return chosen, rejected, chosen_labels, rejected_labels, weights


def float32_llama(seed: int):
    return tiny_llama("sdpa", seed, torch.float32)


def logp_alone(model, ids: list[int], labels: list[int]) -> float:
    """The summed log-probability of a sequence's learned tokens, the sequence run alone."""
    tokens = torch.tensor([ids])
    logits = model(input_ids=tokens, use_cache=False).logits[0, :-1].float()
    target = torch.tensor(labels[1:])
    picked = torch.log_softmax(logits, -1).gather(-1, target.clamp(min=0)[:, None])[:, 0]
    return float(picked[target != -100].sum())


def test_packed_pairs_give_each_pair_its_log_probabilities_and_dpo_loss_alone():
    """DPO on packed rows equals DPO on each pair run alone: a tiny Llama (float32, sdpa,
    the packed mask from position_ids) scores every pair's two sides as it scores them
    alone, so the per-pair summed log-probabilities, the DPO loss and the weighted loss
    agree to float32 tolerance."""
    chosen, rejected, chosen_labels, rejected_labels, weights = preference_pairs(14, seed=5)
    packed = packcli.pack_pairs(
        chosen, rejected, 40, chosen_labels=chosen_labels, rejected_labels=rejected_labels,
        sample_weights=weights, pad_id=0, seed=1,
    )  # fmt: skip
    assert packed.report["pairs"]["pairs"] == 14 and (packed.rows.num_segments >= 4).any()
    check_rows(packed.rows, seq_len=40, pad_id=0, labels_follow_ids=False)
    batch = PackedBatch.from_rows(packed.rows)
    policy, reference = float32_llama(0), float32_llama(1)
    with torch.no_grad():
        got = pair_logps(batch, policy(**batch.model_inputs()).logits)
        ref = pair_logps(batch, reference(**batch.model_inputs()).logits)
        alone = {
            name: torch.tensor([[logp_alone(model, s, lab) for s, lab in zip(sides, labels)]
                                for sides, labels in ((chosen, chosen_labels), (rejected, rejected_labels))])
            for name, model in (("policy", policy), ("reference", reference))
        }  # fmt: skip
    pair = got.pair
    assert sorted(pair.tolist()) == list(range(14)) and torch.equal(ref.pair, pair)
    for values, name in ((got, "policy"), (ref, "reference")):
        torch.testing.assert_close(values.chosen, alone[name][0][pair], rtol=1e-5, atol=1e-4)
        torch.testing.assert_close(values.rejected, alone[name][1][pair], rtol=1e-5, atol=1e-4)
    assert got.weight is not None and got.weight.tolist() == [weights[i] for i in pair.tolist()]
    beta = 0.1
    margins = (alone["policy"][0] - alone["reference"][0]) - (alone["policy"][1] - alone["reference"][1])
    losses = -torch.nn.functional.logsigmoid(beta * margins)
    w = torch.tensor(weights)
    torch.testing.assert_close(dpo_loss(got, ref, beta), (w * losses).sum() / w.sum(), rtol=1e-5, atol=1e-6)
    unweighted = PairLogps(got.chosen, got.rejected, pair, None)
    torch.testing.assert_close(dpo_loss(unweighted, ref, beta), losses.mean(), rtol=1e-5, atol=1e-6)
    with pytest.raises(PackcliError, match="do not hold whole pairs"):  # sides not next to each other
        pairs_of(torch.zeros(4), torch.tensor([0, 1, 0, 1]), torch.tensor([1, 1, 0, 0]))


def test_segment_logps_from_rows_flattened_by_transformers():
    """The same log-probabilities from the one row transformers' DataCollatorWithFlattening
    makes of a batch of sequences, segments found from its position_ids."""
    from transformers import DataCollatorWithFlattening

    chosen, rejected, chosen_labels, rejected_labels, _ = preference_pairs(3, seed=8)
    examples = [
        {"input_ids": ids, "labels": labels}
        for pair in zip(zip(chosen, chosen_labels), zip(rejected, rejected_labels))
        for ids, labels in pair
    ]
    flat = DataCollatorWithFlattening()(examples)
    model = float32_llama(0)
    with torch.no_grad():
        logits = model(input_ids=flat["input_ids"], position_ids=flat["position_ids"], use_cache=False).logits
        logps = segment_logps(logits, flat["labels"], flat["position_ids"].eq(0).cumsum(-1) - 1)
        pairs = pairs_of(logps, torch.arange(6) // 2, torch.tensor([1, 0] * 3))
        expected = [logp_alone(model, e["input_ids"], e["labels"]) for e in examples]
    torch.testing.assert_close(pairs.chosen, torch.tensor(expected[0::2]), rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(pairs.rejected, torch.tensor(expected[1::2]), rtol=1e-5, atol=1e-4)
