"""Records to token sequences with labels: plain text, prompt/completion, or ids (chat is
`packcli.tokenize.chat`, on the same batch and boundary rule).

Every kind yields a `SequenceBatch`: one flat int32 token array, per-sequence lengths,
and (except plain text, where every token is learned) a flat labels array aligned with
the tokens, -100 where nothing is learned. Boundary tokens are added here, once, by
one rule: BOS first (if asked for, and not already there), EOS last (if asked for, and
not already there); an appended EOS is learned exactly when the token before it is.

Text taken from records is tokenized as text: a special-token string in it (`<|endoftext|>`,
`<|im_start|>`) does not become that token unless `parse_special_tokens`. Only BOS/EOS
added here and the markup a chat template writes are special tokens. Every batch counts
the records that held such a string, either way.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from packcli.core.errors import PackcliError
from packcli.core.flow import pooled_empty
from packcli.core.jit import njit
from packcli.tokenize.tokenizer import SpecialTokenFinder, add_boundary_tokens

if TYPE_CHECKING:
    from packcli.read.checks import FieldKind
    from packcli.read.records import IdLists, RecordBatch

IGNORE_INDEX = -100


TextEncoder = Callable[[list[str]], tuple[np.ndarray, np.ndarray]]  # texts -> (flat ids, lengths)


@dataclass
class SequenceBatch:
    """The sequences of a batch of records, in record order. Most builders make one
    sequence per record; a preference pair makes two (chosen, then rejected), and a
    builder may refuse a record (`problems`) or skip it (`identical`): `records` then says
    which record each sequence came from."""

    tokens: np.ndarray  # int32, flat
    lengths: np.ndarray  # int64 [n]
    labels: np.ndarray | None  # int32, flat, aligned with tokens; None: every token is learned
    special_token_records: int = 0  # records whose text held a special-token string
    records: np.ndarray | None = None  # int64 [n]: each sequence's record in the batch (None: sequence i is record i)
    weights: np.ndarray | None = None  # float64 [n]: each sequence's record's --weight-field value
    problems: list[tuple[int, str, str]] = field(default_factory=list)  # (record, reason, problem): refused here
    identical: list[int] = field(default_factory=list)  # records of preference pairs whose sides are equal: skipped

    def record_of(self, sequence: int) -> int:
        """The record of the batch a sequence came from."""
        return sequence if self.records is None else int(self.records[sequence])


@dataclass(frozen=True)
class Boundaries:
    bos_id: int | None  # put first, unless the sequence already starts with it
    eos_id: int | None  # put last, unless the sequence already ends with it


class SequenceBuilder(Protocol):
    """What a run asks of an input kind: the record fields to read (and their kinds), how
    labels come out ("text": every token learned, "masked"), and records to sequences."""

    fields: dict[str, FieldKind]
    labels: str

    def build(self, batch: RecordBatch) -> SequenceBatch: ...


def from_lists(
    token_lists: Sequence[Sequence[int]], label_lists: Sequence[Sequence[int] | None], bounds: Boundaries
) -> SequenceBatch:
    """Assemble sequences (lists or arrays) into a batch, adding BOS/EOS by the one rule."""
    tokens: list[list[int]] = []
    labels: list[list[int]] = []
    for ids, labs in zip(token_lists, label_lists):
        ids = list(ids)
        labs = list(labs) if labs is not None else list(ids)
        if bounds.bos_id is not None and (not ids or ids[0] != bounds.bos_id):
            ids.insert(0, bounds.bos_id)
            labs.insert(0, IGNORE_INDEX)
        if bounds.eos_id is not None and (not ids or ids[-1] != bounds.eos_id):
            learned = bool(labs) and labs[-1] != IGNORE_INDEX
            ids.append(bounds.eos_id)
            labs.append(bounds.eos_id if learned else IGNORE_INDEX)
        tokens.append(ids)
        labels.append(labs)
    lengths = np.array([len(t) for t in tokens], dtype=np.int64)
    flat = np.fromiter((t for seq in tokens for t in seq), dtype=np.int64, count=int(lengths.sum()))
    flat_labels = np.fromiter((t for seq in labels for t in seq), dtype=np.int64, count=int(lengths.sum()))
    return SequenceBatch(_as_int32(flat), lengths, flat_labels.astype(np.int32))


def _as_int32(ids: np.ndarray) -> np.ndarray:
    if len(ids) and (ids.min() < 0 or ids.max() > np.iinfo(np.int32).max):
        raise PackcliError(f"token id {int(ids.min() if ids.min() < 0 else ids.max())} is not a valid id (0 to 2^31-1)")
    return ids.astype(np.int32)


class TextSequences:
    """Plain text: every token is learned; BOS/EOS added around each document.

    `encode` (texts -> flat ids, lengths) decides how special-token strings are tokenized;
    `specials` (a `packcli.tokenize.tokenizer.SpecialTokenFinder`) counts the records holding one."""

    def __init__(self, field: str, encode: TextEncoder, bounds: Boundaries, specials: SpecialTokenFinder | None = None):
        self.field, self.encode, self.bounds, self.specials = field, encode, bounds, specials
        self.fields: dict[str, FieldKind] = {field: "text"}
        self.labels = "text"

    def build(self, batch: RecordBatch) -> SequenceBatch:
        texts = batch.columns[self.field]
        flat, lengths = self.encode(texts)
        flat, lengths = add_boundary_tokens(flat, lengths, self.bounds.bos_id, self.bounds.eos_id)
        counted = self.specials.records_with(texts) if self.specials is not None else 0
        return SequenceBatch(flat, lengths, None, counted)


class PromptCompletionSequences:
    """Prompt and completion are tokenized apart and joined: the prompt's tokens are what
    the model is given at inference and the completion's are what it must generate, so no
    token may straddle the seam. Only completion tokens (and EOS) are learned."""

    def __init__(
        self,
        prompt_field: str,
        completion_field: str,
        encode: TextEncoder,
        bounds: Boundaries,
        specials: SpecialTokenFinder | None = None,
    ):
        self.prompt_field, self.completion_field = prompt_field, completion_field
        self.encode, self.bounds, self.specials = encode, bounds, specials
        self.fields: dict[str, FieldKind] = {prompt_field: "text", completion_field: "text"}
        self.labels = "masked"

    def build(self, batch: RecordBatch) -> SequenceBatch:
        prompt_texts, completion_texts = batch.columns[self.prompt_field], batch.columns[self.completion_field]
        prompts, p_lengths = self.encode(prompt_texts)
        completions, c_lengths = self.encode(completion_texts)
        result = join_prompt_completion(prompts, p_lengths, completions, c_lengths, self.bounds)
        if self.specials is not None:
            result.special_token_records = self.specials.records_with(prompt_texts, completion_texts)
        return result


def join_prompt_completion(
    prompts: np.ndarray, p_lengths: np.ndarray, completions: np.ndarray, c_lengths: np.ndarray, bounds: Boundaries
) -> SequenceBatch:
    """[BOS] + prompt + completion + [EOS] for every pair, by the same rule as from_lists,
    assembled with array arithmetic instead of Python lists."""
    p_starts = np.cumsum(p_lengths) - p_lengths
    c_starts = np.cumsum(c_lengths) - c_lengths
    if bounds.bos_id is not None:
        first_p = prompts[np.minimum(p_starts, len(prompts) - 1)] if len(prompts) else np.full(len(p_lengths), -1)
        first_c = (
            completions[np.minimum(c_starts, len(completions) - 1)] if len(completions) else np.full(len(c_lengths), -1)
        )
        first = np.where(p_lengths > 0, first_p, np.where(c_lengths > 0, first_c, -1))
        has_bos = (first != bounds.bos_id).astype(np.int64)
    else:
        has_bos = np.zeros(len(p_lengths), dtype=np.int64)
    joined = p_lengths + c_lengths + has_bos
    if bounds.eos_id is not None:
        last_c = (
            completions[np.maximum(c_starts + c_lengths - 1, 0)] if len(completions) else np.full(len(c_lengths), -1)
        )
        last_p = prompts[np.maximum(p_starts + p_lengths - 1, 0)] if len(prompts) else np.full(len(p_lengths), -1)
        last = np.where(c_lengths > 0, last_c, np.where(p_lengths > 0, last_p, -1))
        has_eos = ((last != bounds.eos_id) | (joined == 0)).astype(np.int64)
    else:
        has_eos = np.zeros(len(p_lengths), dtype=np.int64)
    lengths = joined + has_eos
    starts = np.cumsum(lengths) - lengths
    tokens = np.empty(int(lengths.sum()), dtype=np.int32)
    labels = np.full(len(tokens), IGNORE_INDEX, dtype=np.int32)
    prompt_at = np.repeat(starts + has_bos - p_starts, p_lengths) + np.arange(len(prompts))
    completion_at = np.repeat(starts + has_bos + p_lengths - c_starts, c_lengths) + np.arange(len(completions))
    tokens[prompt_at] = prompts
    tokens[completion_at] = completions
    labels[completion_at] = completions
    if bounds.bos_id is not None:
        tokens[starts[has_bos == 1]] = bounds.bos_id
    if bounds.eos_id is not None:
        eos_at = (starts + lengths - 1)[has_eos == 1]
        tokens[eos_at] = bounds.eos_id
        learned_before = (c_lengths > 0)[has_eos == 1]
        labels[eos_at[learned_before]] = bounds.eos_id
    return SequenceBatch(tokens, lengths, labels)


class IdsSequences:
    """Already tokenized input; labels from `labels_field` when given, else every token.

    Assembled with array arithmetic from the reader's flat ids (an IdLists: values and
    offsets), never a Python int per token; the result is from_lists' rule exactly.
    """

    def __init__(self, field: str, labels_field: str | None, bounds: Boundaries):
        self.field, self.labels_field, self.bounds = field, labels_field, bounds
        self.fields: dict[str, FieldKind] = {field: "ids"}
        if labels_field:
            self.fields[labels_field] = "ids"
        self.labels = "masked" if labels_field else "text"

    def build(self, batch: RecordBatch) -> SequenceBatch:
        values, offsets = _flat_ids(batch.columns[self.field])
        lengths = np.diff(offsets)
        labels_field, label_values = self.labels_field, None
        if labels_field:
            label_values, label_offsets = _flat_ids(batch.columns[labels_field])
            label_lengths = np.diff(label_offsets)
            mismatched = np.flatnonzero(lengths != label_lengths)
            if len(mismatched):
                i = int(mismatched[0])
                raise PackcliError(
                    f"{batch.location(i)}: {labels_field!r} has {label_lengths[i]} labels for {lengths[i]} ids"
                )
        _check_ids(values, offsets, batch, self.field)
        if labels_field and label_values is not None:
            _check_labels(label_values, label_offsets, batch, labels_field)
        return add_bounds_to_ids(values, lengths, label_values, self.bounds)


def _flat_ids(column: IdLists | Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
    """(values, offsets from 0) of an IdLists, or of a list of per-record id arrays."""
    if hasattr(column, "values") and hasattr(column, "offsets"):
        offsets = np.asarray(column.offsets, dtype=np.int64)
        values = np.asarray(column.values)[offsets[0] : offsets[-1]]
        return values, offsets - offsets[0]  # in their own integer type: checked, then copied once
    arrays = [np.asarray(seq, dtype=np.int64).reshape(-1) for seq in column]
    offsets = np.zeros(len(arrays) + 1, dtype=np.int64)
    np.cumsum([len(a) for a in arrays], out=offsets[1:])
    return (np.concatenate(arrays) if arrays else np.zeros(0, np.int64)), offsets


def _first_record_outside(
    values: np.ndarray, offsets: np.ndarray, low: int, high: int
) -> tuple[int, np.ndarray] | None:
    if not len(values) or (low <= values.min() and values.max() <= high):
        return None  # two passes without a temporary: the common case
    outside = np.flatnonzero((values < low) | (values > high))
    if not len(outside):
        return None
    i = int(np.searchsorted(offsets, outside[0], side="right") - 1)
    return i, values[offsets[i] : offsets[i + 1]]


def _check_ids(values: np.ndarray, offsets: np.ndarray, batch: RecordBatch, field: str) -> None:
    found = _first_record_outside(values, offsets, 0, np.iinfo(np.int32).max)
    if found is not None:
        i, seq = found
        raise PackcliError(
            f"{batch.location(i)}: {field!r} holds {int(seq.min() if seq.min() < 0 else seq.max())}, not a token id"
        )


def _check_labels(values: np.ndarray, offsets: np.ndarray, batch: RecordBatch, field: str) -> None:
    """Labels are written as int32: a label beyond it would silently become another number."""
    int32 = np.iinfo(np.int32)
    found = _first_record_outside(values, offsets, int32.min, int32.max)
    if found is not None:
        i, seq = found
        raise PackcliError(
            f"{batch.location(i)}: {field!r} holds {int(seq.min() if seq.min() < int32.min else seq.max())}, not a label"
        )


def add_bounds_to_ids(
    values: np.ndarray, lengths: np.ndarray, label_values: np.ndarray | None, bounds: Boundaries
) -> SequenceBatch:
    """from_lists' BOS/EOS rule on flat ids of any integer type (and labels, or None: every
    token learned, labels left out): array arithmetic per sequence, one copy per token."""
    n = len(lengths)
    starts = np.cumsum(lengths) - lengths
    filled = lengths > 0
    if bounds.bos_id is not None:
        first = values[np.minimum(starts, len(values) - 1)] if len(values) else np.full(n, -1)
        has_bos = (~filled | (first != bounds.bos_id)).astype(np.int64)
    else:
        has_bos = np.zeros(n, dtype=np.int64)
    if bounds.eos_id is not None:
        last = values[np.maximum(starts + lengths - 1, 0)] if len(values) else np.full(n, -1)
        last = np.where(filled, last, np.where(has_bos == 1, bounds.bos_id if bounds.bos_id is not None else -1, -1))
        has_eos = (((lengths + has_bos) == 0) | (last != bounds.eos_id)).astype(np.int64)
    else:
        has_eos = np.zeros(n, dtype=np.int64)
    out_lengths = lengths + has_bos + has_eos
    out_starts = np.cumsum(out_lengths) - out_lengths
    bos_at = out_starts[has_bos == 1]
    eos_at = (out_starts + out_lengths - 1)[has_eos == 1]
    inserted = [b for b, at in ((bounds.bos_id, bos_at), (bounds.eos_id, eos_at)) if b is not None and len(at)]
    if any(not 0 <= b <= np.iinfo(np.int32).max for b in inserted):
        _as_int32(np.array([*inserted, *([values.min(), values.max()] if len(values) else [])], dtype=np.int64))
    tokens = pooled_empty(int(out_lengths.sum()), np.int32)
    body_at = out_starts + has_bos
    _copy_runs(values, starts, lengths, tokens, body_at)
    tokens[bos_at] = bounds.bos_id if bounds.bos_id is not None else 0
    tokens[eos_at] = bounds.eos_id if bounds.eos_id is not None else 0
    if label_values is None:
        return SequenceBatch(tokens, out_lengths, None)
    labels = np.full(len(tokens), IGNORE_INDEX, dtype=np.int32)
    _copy_runs(label_values, starts, lengths, labels, body_at)
    if bounds.eos_id is not None:
        last_label = (
            label_values[np.maximum(starts + lengths - 1, 0)] if len(label_values) else np.full(n, IGNORE_INDEX)
        )
        learned = (filled & (last_label != IGNORE_INDEX))[has_eos == 1]
        labels[eos_at[learned]] = bounds.eos_id
    return SequenceBatch(tokens, out_lengths, labels)


@njit(cache=True, nogil=True)  # on the tokenize thread, beside reading and spilling
def _copy_runs(source, starts, lengths, out, out_starts):
    """out[out_starts[i] : + lengths[i]] = source[starts[i] : + lengths[i]], as int32 (the
    values are checked to fit): one pass, no index array per token."""
    for i in range(len(starts)):
        s = starts[i]
        o = out_starts[i]
        for j in range(lengths[i]):
            out[o + j] = np.int32(source[s + j])
