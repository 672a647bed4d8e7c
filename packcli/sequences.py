"""Records to token sequences with labels: plain text, prompt/completion, chat, or ids.

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

import bisect
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, cast

import numpy as np

from packcli.errors import PackcliError

if TYPE_CHECKING:
    from packcli.reading import FieldKind, IdLists, RecordBatch
    from packcli.tokenizing import SpecialTokenFinder

IGNORE_INDEX = -100
GENERATION_MARKER = re.compile(r"\{%-?\s*generation\s*-?%\}")


Conversation = list[dict[str, str]]  # turns with "role" and "content"
PrefixTokens = Callable[[Conversation, bool], list[int]]  # (turns, add_generation_prompt) -> their tokens
TextEncoder = Callable[[list[str]], tuple[np.ndarray, np.ndarray]]  # texts -> (flat ids, lengths)


@dataclass
class SequenceBatch:
    tokens: np.ndarray  # int32, flat
    lengths: np.ndarray  # int64 [n]
    labels: np.ndarray | None  # int32, flat, aligned with tokens; None: every token is learned
    special_token_records: int = 0  # records whose text held a special-token string


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
    `specials` (a `packcli.tokenizing.SpecialTokenFinder`) counts the records holding one."""

    def __init__(self, field: str, encode: TextEncoder, bounds: Boundaries, specials: SpecialTokenFinder | None = None):
        self.field, self.encode, self.bounds, self.specials = field, encode, bounds, specials
        self.fields: dict[str, FieldKind] = {field: "text"}
        self.labels = "text"

    def build(self, batch: RecordBatch) -> SequenceBatch:
        from packcli.tokenizing import add_boundary_tokens

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


class ChatSequences:
    """Conversations rendered with the chat template; only turns of `train_on` roles learned.

    With `{% generation %}` markers in the template (and only assistant turns trained),
    transformers' own assistant mask is used. Otherwise each trained turn is found by
    rendering the conversation up to it: the tokens of the render before the turn (with
    the generation prompt, for assistant turns) and of the render through it must be
    prefixes of the whole conversation's tokens, and the turn is what lies between.

    Message contents are record text. A conversation whose contents hold no special-token
    string (nearly all) is tokenized by transformers as is. One that holds some takes the
    careful path (`_encode_rendered`), unless `parse_special_tokens`: there the template's
    markup is special tokens and the contents are text, and labels follow the same rules.
    """

    def __init__(
        self,
        field: str,
        tokenizer: Any,  # a transformers tokenizer
        template: str | None,
        train_on: tuple[str, ...],
        bounds: Boundaries,
        *,
        parse_special_tokens: bool = False,
        specials: SpecialTokenFinder | None = None,
    ):
        from packcli.tokenizing import SpecialTokenFinder, literal_alternation

        self.field, self.tokenizer, self.bounds = field, tokenizer, bounds
        self.template = template or tokenizer.chat_template
        if not self.template:
            raise PackcliError("the tokenizer has no chat template; give one with --chat-template FILE (a Jinja file)")
        self.train_on = train_on
        self.use_markers = bool(GENERATION_MARKER.search(self.template)) and train_on == ("assistant",)
        self.fields: dict[str, FieldKind] = {field: "messages"}
        self.labels = "masked"
        self.parse_special_tokens = parse_special_tokens
        self.specials = specials if specials is not None else SpecialTokenFinder.of(tokenizer)
        added = tokenizer.backend_tokenizer.get_added_tokens_decoder()
        self._added_re = literal_alternation([t.content for t in added.values() if t.content])
        self._special_ids = {t.content: int(i) for i, t in added.items() if t.special and t.content}

    def _tokens(
        self, conversations: list[Conversation], add_generation_prompt: bool = False, assistant_mask: bool = False
    ) -> Any:
        out = self.tokenizer.apply_chat_template(
            conversations,
            chat_template=self.template,
            tokenize=True,
            return_dict=True,
            add_generation_prompt=add_generation_prompt,
            return_assistant_tokens_mask=assistant_mask,
        )
        return out

    def build(self, batch: RecordBatch) -> SequenceBatch:
        conversations = batch.columns[self.field]
        holding = [any(self.specials.found(m["content"]) for m in conv) for conv in conversations]
        careful = [] if self.parse_special_tokens else [i for i, held in enumerate(holding) if held]
        plain = sorted(set(range(len(conversations))) - set(careful))
        token_lists: list[list[int]] = [[] for _ in conversations]
        label_lists: list[list[int] | None] = [None] * len(conversations)
        try:
            if plain:
                tokens, labels = self._plain([conversations[i] for i in plain], [batch.location(i) for i in plain])
                for i, ids, labs in zip(plain, tokens, labels):
                    token_lists[i], label_lists[i] = ids, labs
            for i in careful:
                token_lists[i], label_lists[i] = self._careful(conversations[i], batch.location(i))
        except PackcliError:
            raise
        except Exception as exc:  # jinja raises its own errors for templates that reject a conversation
            raise PackcliError(
                f"{batch.source}: the chat template failed: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
            ) from exc
        result = from_lists(token_lists, label_lists, self.bounds)
        result.special_token_records = sum(holding)
        return result

    def _plain(
        self, conversations: list[Conversation], locations: list[str]
    ) -> tuple[list[list[int]], list[list[int]]]:
        """Tokens and labels of conversations tokenized by transformers, in one call."""
        if self.use_markers:
            out = self._tokens(conversations, assistant_mask=True)
            token_lists = out["input_ids"]
            label_lists = [
                [t if m else IGNORE_INDEX for t, m in zip(ids, mask)]
                for ids, mask in zip(token_lists, out["assistant_masks"])
            ]
        else:
            token_lists = self._tokens(conversations)["input_ids"]
            label_lists = [
                self._labels_by_prefix(conv, ids, location, self._prefix)
                for conv, ids, location in zip(conversations, token_lists, locations)
            ]
        return token_lists, label_lists

    def _careful(self, conversation: Conversation, location: str) -> tuple[list[int], list[int]]:
        """Tokens and labels of a conversation whose contents hold special-token strings."""
        if self.use_markers:
            rendered = self._render(conversation, False)
            ids, locator = self._encode_rendered(rendered, conversation, False, location)
            spans = self._generation_spans(conversation, rendered, location)
            return ids, _assistant_labels(ids, spans, locator)

        def prefix(messages: Conversation, add_generation_prompt: bool) -> list[int]:
            if not messages and not add_generation_prompt:
                return []
            return self._encode_rendered(
                self._render(messages, add_generation_prompt), messages, add_generation_prompt, location
            )[0]

        ids = prefix(conversation, False)
        return ids, self._labels_by_prefix(conversation, ids, location, prefix)

    def _labels_by_prefix(
        self, conversation: Conversation, ids: list[int], location: str, prefix: PrefixTokens
    ) -> list[int]:
        labels = [IGNORE_INDEX] * len(ids)
        for i, message in enumerate(conversation):
            if message["role"] not in self.train_on:
                continue
            is_assistant = message["role"] == "assistant"
            before = prefix(conversation[:i], is_assistant)
            through = prefix(conversation[: i + 1], False)
            if ids[: len(before)] != before or ids[: len(through)] != through or len(through) < len(before):
                raise PackcliError(
                    f"{location}: the chat template does not render turn {i} as a prefix of the conversation, "
                    "so its tokens cannot be found; use a template with {% generation %} markers (--chat-template)"
                )
            labels[len(before) : len(through)] = ids[len(before) : len(through)]
        return labels

    def _prefix(self, messages: Conversation, add_generation_prompt: bool) -> list[int]:
        if not messages and not add_generation_prompt:
            return []
        return list(self._tokens([messages], add_generation_prompt=add_generation_prompt)["input_ids"][0])

    def _render(self, messages: Conversation, add_generation_prompt: bool) -> str:
        return self.tokenizer.apply_chat_template(
            [messages], chat_template=self.template, tokenize=False, add_generation_prompt=add_generation_prompt
        )[0]

    def _encode_rendered(
        self, rendered: str, messages: Conversation, add_generation_prompt: bool, location: str
    ) -> tuple[list[int], _TokenLocator]:
        """(ids, locator) of a render: special-token matches inside a message's content are
        text, the others (the template's markup) are the special tokens, and the text
        between them is encoded with no special token matched (added tokens that are not
        special still match, as in plain text)."""
        from packcli.tokenizing import special_tokens_split

        spans = self._content_spans(rendered, messages, add_generation_prompt, location)
        cuts = []  # (start, end, id) of the template's special tokens
        for match in self._added_re.finditer(rendered) if self._added_re is not None else ():
            token_id = self._special_ids.get(match.group())
            if token_id is not None and not any(a < match.end() and match.start() < b for a, b in spans):
                cuts.append((match.start(), match.end(), token_id))
        texts, at = [], 0
        for start, end, _ in cuts:
            texts.append(rendered[at:start])
            at = end
        texts.append(rendered[at:])
        backend = self.tokenizer.backend_tokenizer
        with special_tokens_split(backend, True):
            encodings = backend.encode_batch(texts, add_special_tokens=False)
        ids: list[int] = []
        pieces = []  # (first character, first token, encoding; None for a special token)
        at = 0
        for k, encoding in enumerate(encodings):
            pieces.append((at, len(ids), encoding))
            ids.extend(encoding.ids)
            if k < len(cuts):
                start, at, token_id = cuts[k]
                pieces.append((start, len(ids), None))
                ids.append(token_id)
        return ids, _TokenLocator(pieces)

    def _content_spans(
        self, rendered: str, messages: Conversation, add_generation_prompt: bool, location: str
    ) -> list[tuple[int, int]]:
        """Where the contents lie in the render: exactly, from a render with a placeholder
        for each content that gives the render back when they are put in; else (a template
        that changes content) by finding, in order, each content that holds a special token."""
        marks = [f"\ue000{i}\ue001" for i in range(len(messages))]
        try:
            layout = self._render([{**m, "content": mark} for m, mark in zip(messages, marks)], add_generation_prompt)
        except Exception:  # a template that checks its contents; the search below still works
            layout = ""
        spans, rebuilt, at = [], [], 0
        for k, part in enumerate(re.split("\ue000([0-9]+)\ue001", layout)):
            if k % 2:
                part = messages[int(part)]["content"] if int(part) < len(messages) else "\ufffd"
                spans.append((at, at + len(part)))
            rebuilt.append(part)
            at += len(part)
        if layout and "".join(rebuilt) == rendered:
            return spans
        spans, at = [], 0
        for i, message in enumerate(messages):
            content = message["content"]
            if not self.specials.found(content):
                continue
            start = rendered.find(content, at)
            if start < 0:
                raise PackcliError(
                    f"{location}: message {i} holds a special-token string and the chat template does not write its "
                    "content as it is, so its text cannot be told from the template's markup (--parse-special-tokens "
                    "would tokenize it as the markup)"
                )
            spans.append((start, start + len(content)))
            at = start + len(content)
        return spans

    def _generation_spans(self, messages: Conversation, rendered: str, location: str) -> list[tuple[int, int]]:
        """The characters of the `{% generation %}` blocks, from transformers' own renderer."""
        try:
            from transformers.utils.chat_template_utils import render_jinja_template
        except ImportError:
            raise PackcliError(
                f"{location}: a message holds a special-token string; finding its assistant tokens by the template's "
                "{% generation %} markers needs a newer transformers (or pass --parse-special-tokens)"
            ) from None
        rendered_again = render_jinja_template(
            conversations=[messages],
            chat_template=self.template,
            return_assistant_tokens_mask=True,
            **self.tokenizer.special_tokens_map,
        )  # annotated `-> str`, but returns (renders, generation spans) when asked for the mask
        again, indices = cast("tuple[list[str], list[list[tuple[int, int]]]]", rendered_again)
        if again[0] != rendered:
            raise PackcliError(f"{location}: the chat template renders this conversation differently twice")
        return [(int(start), int(end)) for start, end in indices[0]]


class _TokenLocator:
    """The token holding a character of a render encoded in pieces (Encoding.char_to_token
    of the piece holding it; a special token holds all of its characters)."""

    def __init__(self, pieces: list[tuple[int, int, Any]]):  # (first character, first token, Encoding or None)
        self.pieces = pieces
        self.starts = [p[0] for p in pieces]

    def token_at(self, char: int) -> int | None:
        k = bisect.bisect_right(self.starts, char) - 1
        if k < 0:
            return None
        start, first, encoding = self.pieces[k]
        if encoding is None:
            return first
        index = encoding.char_to_token(char - start)
        return None if index is None else first + index


def _assistant_labels(ids: list[int], spans: list[tuple[int, int]], locator: _TokenLocator) -> list[int]:
    """transformers' assistant mask: from the token holding a block's first character to the
    one holding its last (to the end when that is none); no further once a block's first
    character is in no token."""
    labels = [IGNORE_INDEX] * len(ids)
    for start, end in spans:
        first, last = locator.token_at(start), locator.token_at(end - 1)
        if first is None:
            break
        for t in range(first, last + 1 if last else len(ids)):
            labels[t] = ids[t]
    return labels


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
        return values.astype(np.int64, copy=False), offsets - offsets[0]
    arrays = [np.asarray(seq, dtype=np.int64).reshape(-1) for seq in column]
    offsets = np.zeros(len(arrays) + 1, dtype=np.int64)
    np.cumsum([len(a) for a in arrays], out=offsets[1:])
    return (np.concatenate(arrays) if arrays else np.zeros(0, np.int64)), offsets


def _first_record_outside(
    values: np.ndarray, offsets: np.ndarray, low: int, high: int
) -> tuple[int, np.ndarray] | None:
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
    """from_lists' BOS/EOS rule on flat int64 ids (and labels, or None: every token learned,
    labels left out), with array arithmetic only."""
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
    body_at = np.repeat(out_starts + has_bos - starts, lengths) + np.arange(len(values))
    bos_at = out_starts[has_bos == 1]
    eos_at = (out_starts + out_lengths - 1)[has_eos == 1]
    inserted = [b for b, at in ((bounds.bos_id, bos_at), (bounds.eos_id, eos_at)) if b is not None and len(at)]
    if any(not 0 <= b <= np.iinfo(np.int32).max for b in inserted):
        _as_int32(np.array([*inserted, *([values.min(), values.max()] if len(values) else [])], dtype=np.int64))
    tokens = np.empty(int(out_lengths.sum()), dtype=np.int32)
    tokens[body_at] = values
    tokens[bos_at] = bounds.bos_id if bounds.bos_id is not None else 0
    tokens[eos_at] = bounds.eos_id if bounds.eos_id is not None else 0
    if label_values is None:
        return SequenceBatch(tokens, out_lengths, None)
    labels = np.full(len(tokens), IGNORE_INDEX, dtype=np.int32)
    labels[body_at] = label_values
    if bounds.eos_id is not None:
        last_label = (
            label_values[np.maximum(starts + lengths - 1, 0)] if len(label_values) else np.full(n, IGNORE_INDEX)
        )
        learned = (filled & (last_label != IGNORE_INDEX))[has_eos == 1]
        labels[eos_at[learned]] = bounds.eos_id
    return SequenceBatch(tokens, out_lengths, labels)
