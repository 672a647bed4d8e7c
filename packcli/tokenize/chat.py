"""Chat records to token sequences: conversations rendered with the chat template, only
the turns `--train-on` names learned (see `ChatSequences`), and with `--mask-reasoning`
every reasoning block of the render left out of the loss."""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, cast

from packcli.core.errors import PackcliError
from packcli.tokenize.sequences import IGNORE_INDEX, Boundaries, SequenceBatch, from_lists
from packcli.tokenize.tokenizer import SpecialTokenFinder, literal_alternation, special_tokens_split

if TYPE_CHECKING:
    from packcli.read.checks import FieldKind
    from packcli.read.records import RecordBatch

GENERATION_MARKER = re.compile(r"\{%-?\s*generation\s*-?%\}")

Conversation = list[dict[str, str]]  # turns with "role" and "content"
PrefixTokens = Callable[[Conversation, bool], list[int]]  # (turns, add_generation_prompt) -> their tokens
LAST, ALL = "last", "all"  # --train-on's turn choices (core.choices.TRAIN_ON_TURNS), beside lists of roles


class ChatSequences:
    """Conversations rendered with the chat template; the turns `train_on` names learned:
    those of a tuple of roles, or ("last",) the last assistant turn, or ("all",) what the
    assistant turns learn plus the content of every turn (never the template's markup
    around a content: role headers, end-of-turn tokens, separators).

    With `{% generation %}` markers in the template (and every assistant turn trained,
    none of the other roles'), transformers' own assistant mask is used. Otherwise each
    trained turn is found by rendering the conversation up to it: the tokens of the render
    before the turn (with the generation prompt, for assistant turns) and of the render
    through it must be prefixes of the whole conversation's tokens, and the turn is what
    lies between. Contents are located in the render by rendering once more with a
    placeholder for each (`_content_spans`).

    `reasoning` (open, close): every block of the render from an opening delimiter through
    the next closing one (to the end of the render when there is none) is matched as text
    in the render, and the tokens holding any of its characters are not learned.

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
        reasoning: tuple[str, str] | None = None,
    ):
        self.field, self.tokenizer, self.bounds = field, tokenizer, bounds
        self.template = template or tokenizer.chat_template
        if not self.template:
            raise PackcliError("the tokenizer has no chat template; give one with --chat-template FILE (a Jinja file)")
        self.train_on = train_on
        self.turns = train_on[0] if train_on in ((LAST,), (ALL,)) else None  # None: train_on is roles
        self.reasoning = reasoning
        every_assistant_turn = train_on in (("assistant",), (ALL,))
        self.use_markers = bool(GENERATION_MARKER.search(self.template)) and every_assistant_turn
        self.batched = self.turns is None and reasoning is None  # the roles alone: one transformers call a batch
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
        holding = [self.holds_special(conv) for conv in conversations]
        careful = [] if self.parse_special_tokens else [i for i, held in enumerate(holding) if held]
        plain = sorted(set(range(len(conversations))) - set(careful))
        token_lists: list[list[int]] = [[] for _ in conversations]
        label_lists: list[list[int] | None] = [None] * len(conversations)
        with self.template_errors(batch.source):
            if not self.batched:
                for i, conversation in enumerate(conversations):
                    token_lists[i], label_lists[i] = self.encode(conversation, batch.location(i))
            elif plain:
                tokens, labels = self._plain([conversations[i] for i in plain], [batch.location(i) for i in plain])
                for i, ids, labs in zip(plain, tokens, labels):
                    token_lists[i], label_lists[i] = ids, labs
            if self.batched:
                for i in careful:
                    token_lists[i], label_lists[i] = self._careful(conversations[i], batch.location(i))
        result = from_lists(token_lists, label_lists, self.bounds)
        result.special_token_records = sum(holding)
        return result

    def holds_special(self, conversation: Conversation) -> bool:
        """Whether a content holds a special-token string (then it takes the careful path)."""
        return any(self.specials.found(m["content"]) for m in conversation)

    @contextmanager
    def template_errors(self, source: str) -> Iterator[None]:
        """Errors of the template itself (jinja raises its own types) as one line naming `source`."""
        try:
            yield
        except PackcliError:
            raise
        except Exception as exc:
            raise PackcliError(
                f"{source}: the chat template failed: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
            ) from exc

    def encode(
        self, conversation: Conversation, location: str, learned_from: int | None = None
    ) -> tuple[list[int], list[int]]:
        """(ids, labels) of one conversation (no BOS or EOS added): the turns `train_on`
        names learned, or with `learned_from`, the assistant turns from that index on (a
        preference pair's completion); then the reasoning blocks left out."""
        careful = not self.parse_special_tokens and self.holds_special(conversation)
        located = careful or self.turns == ALL or self.reasoning is not None  # what needs the render's text
        rendered = self._render(conversation, False) if located else ""  # else transformers renders it once
        if careful:
            ids, found = self._encode_rendered(rendered, conversation, False, location)
            locator: _TokenLocator | None = found

            def prefix(messages: Conversation, add_generation_prompt: bool) -> list[int]:
                if not messages and not add_generation_prompt:
                    return []
                return self._encode_rendered(
                    self._render(messages, add_generation_prompt), messages, add_generation_prompt, location
                )[0]

        else:
            ids, locator, prefix = list(self._tokens([conversation])["input_ids"][0]), None, self._prefix
        if learned_from is None and self.use_markers:
            if careful and locator is not None:
                labels = _assistant_labels(ids, self._generation_spans(conversation, rendered, location), locator)
            else:
                masks = self._tokens([conversation], assistant_mask=True)["assistant_masks"][0]
                labels = [t if m else IGNORE_INDEX for t, m in zip(ids, masks)]
        else:
            learn = self._learned_turns(conversation, learned_from)
            labels = self._labels_by_prefix(conversation, ids, location, prefix, learn)
        if self.turns == ALL or self.reasoning is not None:
            if locator is None:
                locator = self._locate_plain(rendered, ids, location)
            if self.turns == ALL and learned_from is None:
                for start, end in self._every_content(rendered, conversation, location):
                    _learn_chars(ids, labels, locator, start, end)
            if self.reasoning is not None:
                for start, end in reasoning_blocks(rendered, *self.reasoning):
                    _mask_chars(labels, locator, start, end)
        return ids, labels

    def _learned_turns(self, conversation: Conversation, learned_from: int | None) -> set[int]:
        """The turns learned by prefix rendering: of `train_on`'s roles, the last assistant
        turn, every assistant turn (ALL: the contents of the others come on top), or with
        `learned_from` the assistant turns from there on."""
        assistant = [i for i, m in enumerate(conversation) if m["role"] == "assistant"]
        if learned_from is not None:
            return {i for i in assistant if i >= learned_from}
        if self.turns == LAST:
            return set(assistant[-1:])
        if self.turns == ALL:
            return set(assistant)
        return {i for i, m in enumerate(conversation) if m["role"] in self.train_on}

    def _locate_plain(self, rendered: str, ids: list[int], location: str) -> _TokenLocator:
        """The token holding each character of a render transformers tokenized (markup
        special, no special-token string in a content): the render encoded once more with
        offsets, which must give the same ids."""
        backend = self.tokenizer.backend_tokenizer
        with special_tokens_split(backend, False):
            encoding = backend.encode(rendered, add_special_tokens=False)
        if list(encoding.ids) != list(ids):
            raise PackcliError(
                f"{location}: the chat template's render encodes to other tokens than transformers gave, "
                "so its characters cannot be mapped to tokens"
            )
        return _TokenLocator([(0, 0, encoding)])

    def _every_content(self, rendered: str, messages: Conversation, location: str) -> list[tuple[int, int]]:
        """Where every message's content lies in the render (--train-on all)."""
        spans = self._placeholder_spans(rendered, messages, False)
        if spans is not None:
            return spans
        spans, at = [], 0
        for i, message in enumerate(messages):
            start = rendered.find(message["content"], at)
            if start < 0:
                raise PackcliError(
                    f"{location}: the chat template does not write message {i}'s content as it is, so "
                    "--train-on all cannot tell it from the template's markup"
                )
            spans.append((start, start + len(message["content"])))
            at = start + len(message["content"])
        return spans

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
        self,
        conversation: Conversation,
        ids: list[int],
        location: str,
        prefix: PrefixTokens,
        learn: set[int] | None = None,
    ) -> list[int]:
        """Labels of the turns `learn` (default: those of train_on's roles), each found as
        what lies between the tokens of the render before it and through it."""
        labels = [IGNORE_INDEX] * len(ids)
        for i, message in enumerate(conversation):
            if (message["role"] not in self.train_on) if learn is None else (i not in learn):
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
        placed = self._placeholder_spans(rendered, messages, add_generation_prompt)
        if placed is not None:
            return placed
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

    def _placeholder_spans(
        self, rendered: str, messages: Conversation, add_generation_prompt: bool
    ) -> list[tuple[int, int]] | None:
        """Where each content lies in the render, exactly: from a render with a placeholder
        for each content that gives the render back when they are put in (None when it
        does not: a template that changes or checks contents)."""
        marks = [f"\ue000{i}\ue001" for i in range(len(messages))]
        try:
            layout = self._render([{**m, "content": mark} for m, mark in zip(messages, marks)], add_generation_prompt)
        except Exception:  # a template that checks its contents
            return None
        spans, rebuilt, at = [], [], 0
        for k, part in enumerate(re.split("\ue000([0-9]+)\ue001", layout)):
            if k % 2:
                part = messages[int(part)]["content"] if int(part) < len(messages) else "\ufffd"
                spans.append((at, at + len(part)))
            rebuilt.append(part)
            at += len(part)
        if layout and "".join(rebuilt) == rendered and len(spans) == len(messages):
            return spans
        return None

    def _generation_spans(self, messages: Conversation, rendered: str, location: str) -> list[tuple[int, int]]:
        """The characters of the `{% generation %}` blocks, from transformers' own renderer."""
        try:  # here, not at the top: older transformers lack it, and only this path needs it
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


def reasoning_blocks(rendered: str, open_text: str, close_text: str) -> list[tuple[int, int]]:
    """[start, end) of every reasoning block of a render: from an opening delimiter through
    the next closing one, both included; an opening delimiter with no closing one after it
    opens a block to the end of the render. Matched as text, left to right."""
    blocks: list[tuple[int, int]] = []
    at = 0
    while True:
        start = rendered.find(open_text, at)
        if start < 0:
            return blocks
        close = rendered.find(close_text, start + len(open_text))
        end = len(rendered) if close < 0 else close + len(close_text)
        blocks.append((start, end))
        at = end


def _token_range(locator: _TokenLocator, start: int, end: int) -> range:
    """The tokens holding characters [start, end) of the render (none for an empty span)."""
    if end <= start:
        return range(0)
    first = next((t for c in range(start, end) if (t := locator.token_at(c)) is not None), None)
    last = next((t for c in range(end - 1, start - 1, -1) if (t := locator.token_at(c)) is not None), None)
    return range(0) if first is None or last is None else range(first, last + 1)


def _learn_chars(ids: list[int], labels: list[int], locator: _TokenLocator, start: int, end: int) -> None:
    for t in _token_range(locator, start, end):
        labels[t] = ids[t]


def _mask_chars(labels: list[int], locator: _TokenLocator, start: int, end: int) -> None:
    for t in _token_range(locator, start, end):
        labels[t] = IGNORE_INDEX
