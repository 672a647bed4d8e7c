"""PyTorch data loading for packed rows: a Dataset over a packed directory, collate
functions and a `PackedBatch` ready for `flash_attn_varlen_func`.

    loader = DataLoader(PackedDataset("out/"), batch_size=8, shuffle=True, collate_fn=collate_rows)
    for batch in loader:
        loss = model(**batch.to("cuda").model_inputs()).loss

LABELS ARE NOT SHIFTED. `labels[i]` belongs to `input_ids[i]`, as Hugging Face models
expect (they shift inside the loss). In your own loop, predict `labels[:, 1:]` from
`logits[:, :-1]`. Labels are -100 on the first token of every segment and on padding, so
after the shift nothing is ever predicted across a boundary.

Boundaries live in `position_ids` (restarting at 0 in every segment) and `cu_seqlens`,
never in `attention_mask`, which only marks padding. Requires PyTorch (the `torch`
extra); flash-attn is used when installed and the tensors are on a GPU.

A mixture's rows (`packcli pack --mix`) carry `segment_source`, one entry per real segment;
`batch.token_source` gives each token its source (-1 on padding) for a loss per source.
Preference pairs carry `segment_pair` and `segment_chosen`: `pair_logps` gives each pair's
summed log-probabilities from the model's logits, and `dpo_loss` the DPO loss; weights
(`segment_weight`) spread over the tokens as `batch.token_weight`.

The names are defined in torch_batch (PackedBatch), torch_dataset (PackedDataset),
torch_collate (collate_rows, PackingCollator), torch_attention (varlen_attention,
block_causal_mask) and torch_pairs (preference pairs and DPO); this module gathers them.
"""

from packcli.load.torch_attention import block_causal_mask, varlen_attention
from packcli.load.torch_batch import PackedBatch
from packcli.load.torch_collate import PackingCollator, collate_rows
from packcli.load.torch_dataset import PackedDataset
from packcli.load.torch_pairs import PairLogps, dpo_loss, pair_logps, pairs_of, segment_logps

__all__ = [
    "PackedBatch",
    "PackedDataset",
    "PackingCollator",
    "PairLogps",
    "block_causal_mask",
    "collate_rows",
    "dpo_loss",
    "pair_logps",
    "pairs_of",
    "segment_logps",
    "varlen_attention",
]
