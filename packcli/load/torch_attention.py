"""Attention that keeps a packed batch's segments apart: `varlen_attention` over the
flattened tokens (flash-attn's varlen function when it is installed and the tensors are on
a GPU, else SDPA per segment) and `block_causal_mask`, an additive mask for eager or sdpa
attention.
"""

from __future__ import annotations

from packcli.core.errors import PackcliError, needs_extra

with needs_extra("torch", "packcli.load.torch needs PyTorch"):
    import torch

from packcli.load.torch_batch import PackedBatch

__all__ = ["block_causal_mask", "varlen_attention"]


def block_causal_mask(batch: PackedBatch, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Additive [rows, 1, seq_len, seq_len] mask (0 = attend, dtype min = blocked): causal
    inside every segment, nothing across. For eager/sdpa attention where neither
    flash-attention nor transformers' own packed-sequence detection applies."""
    rows, seq_len = batch.input_ids.shape
    segment = torch.zeros(rows, seq_len, dtype=torch.int64, device=batch.input_ids.device)
    for r, cu in enumerate(batch.row_cu_seqlens):
        segment[r] = torch.repeat_interleave(torch.arange(cu.numel() - 1, device=segment.device), cu.diff().long())
    same = segment[:, :, None] == segment[:, None, :]
    causal = torch.ones(seq_len, seq_len, dtype=torch.bool, device=segment.device).tril()
    allowed = same & causal
    mask = torch.zeros(rows, 1, seq_len, seq_len, dtype=dtype, device=segment.device)
    return mask.masked_fill(~allowed[:, None], torch.finfo(dtype).min)


def varlen_attention(
    q, k, v, cu_seqlens, max_seqlen: int, *, causal: bool = True, softmax_scale=None, backend: str = "auto"
):
    """Attention over packed tokens: q [tokens, heads, dim], k/v [tokens, kv_heads, dim].

    `backend="auto"` calls `flash_attn.flash_attn_varlen_func` when flash-attn is
    installed and q is on a GPU, else a plain PyTorch path (SDPA per segment: slow,
    for CPU and checking); "flash" and "torch" force one of them.
    """
    if backend not in ("auto", "flash", "torch"):
        raise PackcliError(f"backend must be auto, flash or torch, not {backend!r}")
    flash = _flash_varlen() if backend != "torch" else None
    if backend == "flash" and flash is None:
        raise PackcliError("backend='flash' needs flash-attn: pip install flash-attn")
    if flash is not None and (backend == "flash" or q.is_cuda):
        return flash(
            q,
            k,
            v,
            cu_seqlens_q=cu_seqlens,
            cu_seqlens_k=cu_seqlens,
            max_seqlen_q=max_seqlen,
            max_seqlen_k=max_seqlen,
            dropout_p=0.0,
            softmax_scale=softmax_scale,
            causal=causal,
        )
    if k.shape[1] != q.shape[1]:  # grouped-query attention
        k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
        v = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1)
    out = torch.empty_like(q)
    bounds = cu_seqlens.tolist()
    for s, e in zip(bounds[:-1], bounds[1:]):
        qs, ks, vs = (x[s:e].transpose(0, 1) for x in (q, k, v))
        attended = torch.nn.functional.scaled_dot_product_attention(qs, ks, vs, is_causal=causal, scale=softmax_scale)
        out[s:e] = attended.transpose(0, 1)
    return out


def _flash_varlen():
    try:  # lazy: flash-attn is optional, used when installed
        from flash_attn import flash_attn_varlen_func
    except ImportError:
        return None
    return flash_attn_varlen_func
