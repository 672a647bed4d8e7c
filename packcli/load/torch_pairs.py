"""Preference pairs in a packed batch (`segment_pair`, `segment_chosen`, `segment_weight`):
each pair's summed log-probabilities from the model's logits (`pair_logps`; for rows packed
elsewhere `segment_logps`, then `pairs_of`) and the DPO loss (`dpo_loss`).
"""

from __future__ import annotations

from dataclasses import dataclass

from packcli.core.errors import PackcliError, needs_extra

with needs_extra("torch", "packcli.load.torch needs PyTorch"):
    import torch

from packcli.load.torch_batch import PackedBatch
from packcli.plan.rows import IGNORE_INDEX
from packcli.write.values import CHOSEN_COLUMN, PAIR_COLUMN, WEIGHT_COLUMN

__all__ = ["PairLogps", "dpo_loss", "pair_logps", "pairs_of", "segment_logps"]


@dataclass
class PairLogps:
    """The summed log-probabilities of the learned tokens of each preference pair's two
    segments, pair by pair in the batch's order: `chosen` and `rejected` ([pairs]), the
    pairs' indices in the output (`pair`) and their weights (`weight`, None without
    --weight-field)."""

    chosen: torch.Tensor
    rejected: torch.Tensor
    pair: torch.Tensor
    weight: torch.Tensor | None = None


def segment_logps(logits: torch.Tensor, labels: torch.Tensor, segment_ids: torch.Tensor) -> torch.Tensor:
    """The summed log-probability of the learned tokens of every real segment, rows in
    order and each row's segments in order ([segments], float32, differentiable).

    `labels` are unshifted: token i (label not -100) is predicted by `logits[:, i - 1]`.
    `segment_ids` [rows, seq_len] gives each token's segment in its row, -1 on padding
    (`PackedBatch.segment_ids`; for rows flattened by transformers'
    `DataCollatorWithFlattening`, `position_ids.eq(0).cumsum(-1) - 1`)."""
    targets = labels[:, 1:]
    learned = targets != IGNORE_INDEX
    logp = torch.log_softmax(logits[:, :-1].float(), dim=-1)
    picked = logp.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1) * learned
    segment = segment_ids[:, 1:].long()
    counts = (segment_ids.max(dim=1).values + 1).clamp(min=0).long()  # real segments per row
    first = torch.cumsum(counts, 0) - counts
    index = (segment + first[:, None]).masked_fill(segment < 0, 0)
    sums = torch.zeros(int(counts.sum()), dtype=picked.dtype, device=picked.device)
    return sums.index_add(0, index[learned], picked[learned])


def pairs_of(
    logps: torch.Tensor, pair: torch.Tensor, chosen: torch.Tensor, weight: torch.Tensor | None = None
) -> PairLogps:
    """Per-segment values (`segment_logps`) matched into pairs: each chosen segment and the
    rejected one right after it, as packcli places them (`segment_pair`,
    `segment_chosen` and `segment_weight` of the same segments)."""
    pair, chosen = pair.to(logps.device).long(), chosen.to(logps.device).long()
    first = torch.nonzero(chosen == 1).flatten()
    second = first + 1
    if (
        len(first) * 2 != len(chosen)
        or (second >= len(chosen)).any()
        or (pair[second] != pair[first]).any()
        or (chosen[second] != 0).any()
    ):
        raise PackcliError("segment_pair and segment_chosen do not hold whole pairs, chosen then rejected")
    found = None if weight is None else weight.to(logps.device)[first].float()
    return PairLogps(logps[first], logps[second], pair[first], found)


def pair_logps(batch: PackedBatch, logits: torch.Tensor) -> PairLogps:
    """The pairs of a batch of packed preference pairs and the summed log-probabilities of
    their learned tokens, from the model's `logits` [rows, seq_len, vocab] (see
    docs/training.md for the DPO loss in a few lines)."""
    columns = batch.segment_columns
    if PAIR_COLUMN not in columns or CHOSEN_COLUMN not in columns:
        raise PackcliError("this batch has no preference pairs (no segment_pair and segment_chosen columns)")
    logps = segment_logps(logits, batch.labels.to(logits.device), batch.segment_ids.to(logits.device))
    return pairs_of(logps, columns[PAIR_COLUMN], columns[CHOSEN_COLUMN], columns.get(WEIGHT_COLUMN))


def dpo_loss(policy: PairLogps, reference: PairLogps, beta: float = 0.1) -> torch.Tensor:
    """The DPO loss (sigmoid) of a batch's pairs: the mean over pairs of
    -log sigmoid(beta * (chosen margin - rejected margin)), weighted by the pairs' weights
    (sum of weight x loss over sum of weights) when they have one."""
    margin = (policy.chosen - reference.chosen) - (policy.rejected - reference.rejected)
    losses = -torch.nn.functional.logsigmoid(beta * margin)
    if policy.weight is None:
        return losses.mean()
    return (policy.weight * losses).sum() / policy.weight.sum()
