"""Preference pairs to token sequences: each record becomes two sequences, prompt + chosen
then prompt + rejected, the prompt masked as SFT masks it (see `PairSequences`).

Two forms, told apart record by record:

- strings (`--prompt-field P --chosen-field C --rejected-field R`): each side is
  `[BOS] + prompt + completion + [EOS]` by SFT's rule (sequences.join_prompt_completion),
  with the prompt encoded once, so both sides hold the very same prompt tokens;
- message lists (the conversational form): `chosen` and `rejected` are whole
  conversations whose last turn, an assistant's, is the completion and whose earlier
  turns (the prompt) must be equal; or, with `--prompt-field` naming a message list, they
  are the completions and the prompt turns come first. Each side is rendered with the
  chat template (chat.ChatSequences); the assistant turns of the completion are learned.

A record the builder cannot use is refused here (`SequenceBatch.problems`, reported as a
bad record by the engine, with its location); a pair whose two sides are equal is
skipped and counted (`SequenceBatch.identical`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from packcli.tokenize.chat import ChatSequences, Conversation
from packcli.tokenize.sequences import Boundaries, SequenceBatch, TextEncoder, from_lists, join_prompt_completion
from packcli.tokenize.tokenizer import SpecialTokenFinder

if TYPE_CHECKING:
    from packcli.read.checks import FieldKind
    from packcli.read.records import RecordBatch

CHOSEN, REJECTED = 1, 0  # segment_chosen's values


class PairProblem(Exception):
    """A record that is no usable pair: `reason` is the count key, `problem` the detail."""

    def __init__(self, reason: str, problem: str):
        super().__init__(problem)
        self.reason, self.problem = reason, problem


class PairSequences:
    """Preference pairs: two sequences per record, chosen then rejected (see the module
    docstring). `chat`: makes the chat builder on the first pair in messages (the
    tokenizer through transformers, loaded then); `mask_reasoning`: the chat builder
    leaves reasoning blocks out, which a pair of strings has no render to find in."""

    def __init__(
        self,
        prompt_field: str | None,
        chosen_field: str,
        rejected_field: str,
        encode: TextEncoder,
        bounds: Boundaries,
        chat: Callable[[], ChatSequences],
        *,
        specials: SpecialTokenFinder | None = None,
        mask_reasoning: bool = False,
    ):
        self.prompt_field, self.chosen_field, self.rejected_field = prompt_field, chosen_field, rejected_field
        self.encode, self.bounds, self.specials = encode, bounds, specials
        self._make_chat: Callable[[], ChatSequences] = chat
        self._chat: ChatSequences | None = None
        self.mask_reasoning = mask_reasoning
        either: FieldKind = "text_or_messages" if prompt_field is not None else "messages"
        self.fields: dict[str, FieldKind] = {}
        if prompt_field is not None:
            self.fields[prompt_field] = either
        self.fields.update({chosen_field: either, rejected_field: either})
        self.labels = "masked"

    @property
    def chat(self) -> ChatSequences:
        if self._chat is None:
            self._chat = self._make_chat()
        return self._chat

    def texts(self, batch: RecordBatch) -> list[str]:
        """The strings of a batch's fields (a sample for the encoder's check)."""
        return [value for name in self.fields for value in batch.columns[name] if isinstance(value, str)]

    def build(self, batch: RecordBatch) -> SequenceBatch:
        prompts = batch.columns[self.prompt_field] if self.prompt_field is not None else [None] * len(batch)
        chosen, rejected = batch.columns[self.chosen_field], batch.columns[self.rejected_field]
        strings: list[int] = []
        chats: list[tuple[int, Conversation, Conversation, int]] = []  # record, two sides, first completion turn
        problems: list[tuple[int, str, str]] = []
        identical: list[int] = []
        for i, (prompt, good, bad) in enumerate(zip(prompts, chosen, rejected)):
            try:
                form = self._form(prompt, good, bad)
                if good == bad:
                    identical.append(i)
                elif form == "strings":
                    strings.append(i)
                else:
                    chats.append((i, *self._conversations(prompt, good, bad)))
            except PairProblem as refused:
                problems.append((i, refused.reason, refused.problem))
        parts = []
        if strings:
            parts.append(self._string_pairs(strings, prompts, chosen, rejected))
        if chats:
            with self.chat.template_errors(batch.source):
                parts.append(self._chat_pairs(chats, batch))
        result = _joined(parts)
        result.problems, result.identical = problems, identical
        if self.specials is not None:
            result.special_token_records = self._holding(prompts, chosen, rejected)
        return result

    def _form(self, prompt: Any, chosen: Any, rejected: Any) -> str:
        """ "strings" or "messages": every field of the pair in one form."""
        values = [v for v in (prompt, chosen, rejected) if v is not None]
        kinds = {isinstance(v, str) for v in values}
        if len(kinds) > 1:
            names = [n for n in (self.prompt_field, self.chosen_field, self.rejected_field) if n is not None]
            said = ", ".join(
                f"{n!r} is {'a string' if isinstance(v, str) else 'a list of messages'}" for n, v in zip(names, values)
            )
            raise PairProblem("mixed pair", f"{said}: give a pair's fields all as strings or all as message lists")
        if kinds == {True}:
            if self.mask_reasoning:
                raise PairProblem(
                    "reasoning in text",
                    "--mask-reasoning finds reasoning blocks in a chat template's render: give this pair as message lists",
                )
            return "strings"
        return "messages"

    def _conversations(
        self, prompt: Conversation | None, chosen: Conversation, rejected: Conversation
    ) -> tuple[Conversation, Conversation, int]:
        """The two sides as whole conversations and the index of their first completion turn."""
        if prompt is not None:
            for name, side in ((self.chosen_field, chosen), (self.rejected_field, rejected)):
                _check_completion(name, side)
            return prompt + chosen, prompt + rejected, len(prompt)
        for name, side in ((self.chosen_field, chosen), (self.rejected_field, rejected)):
            _check_completion(name, side[-1:])
        if chosen[:-1] != rejected[:-1]:
            turn = next(
                (k for k, (a, b) in enumerate(zip(chosen[:-1], rejected[:-1])) if a != b),
                min(len(chosen), len(rejected)) - 1,
            )
            raise PairProblem(
                "prompts differ",
                f"the prompt turns of {self.chosen_field!r} and {self.rejected_field!r} differ (turn {turn}): "
                "a pair's two sides share everything but their last turn",
            )
        return chosen, rejected, len(chosen) - 1

    def _string_pairs(
        self, records: list[int], prompts: list[Any], chosen: list[Any], rejected: list[Any]
    ) -> SequenceBatch:
        """Pairs of strings: the prompt encoded once, both sides joined by SFT's rule."""
        p_ids, p_lengths = self.encode([prompts[i] for i in records])
        c_ids, c_lengths = self.encode([chosen[i] for i in records])
        r_ids, r_lengths = self.encode([rejected[i] for i in records])
        both_p, both_p_lengths = interleave(p_ids, p_lengths, p_ids, p_lengths)
        sides, side_lengths = interleave(c_ids, c_lengths, r_ids, r_lengths)
        joined = join_prompt_completion(both_p, both_p_lengths, sides, side_lengths, self.bounds)
        joined.records = np.repeat(np.asarray(records, dtype=np.int64), 2)
        return joined

    def _chat_pairs(
        self, pairs: list[tuple[int, Conversation, Conversation, int]], batch: RecordBatch
    ) -> SequenceBatch:
        """Pairs of conversations, rendered side by side; the completion's assistant turns learned."""
        tokens: list[list[int]] = []
        labels: list[list[int] | None] = []
        for record, good, bad, first in pairs:
            for side in (good, bad):
                ids, labs = self.chat.encode(side, batch.location(record), learned_from=first)
                tokens.append(ids)
                labels.append(labs)
        joined = from_lists(tokens, labels, self.bounds)
        joined.records = np.repeat(np.asarray([p[0] for p in pairs], dtype=np.int64), 2)
        return joined

    def _holding(self, prompts: list[Any], chosen: list[Any], rejected: list[Any]) -> int:
        """Records whose text held a special-token string (the report's count)."""
        assert self.specials is not None

        def texts(value: Any) -> list[str]:
            if value is None:
                return []
            return [value] if isinstance(value, str) else [m["content"] for m in value]

        return sum(
            1
            for values in zip(prompts, chosen, rejected)
            if any(self.specials.found(t) for v in values for t in texts(v))
        )


def _check_completion(name: str, turns: Conversation) -> None:
    """A side's completion: at least one assistant turn, and some text in it."""
    if not any(turn["role"] == "assistant" for turn in turns):
        where = "its last turn is not an assistant's" if len(turns) == 1 else "it holds no assistant turn"
        raise PairProblem("no completion", f"field {name!r}: {where}, so the pair has nothing to compare")
    if not any(turn["content"] for turn in turns if turn["role"] == "assistant"):
        raise PairProblem("empty side", f"field {name!r}: the completion is empty")


def interleave(
    a: np.ndarray, a_lengths: np.ndarray, b: np.ndarray, b_lengths: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Two flat arrays of as many spans each, as one: span 0 of a, span 0 of b, span 1 of a, ..."""
    a_lengths, b_lengths = np.asarray(a_lengths, dtype=np.int64), np.asarray(b_lengths, dtype=np.int64)
    both = np.concatenate([a, b])
    starts = np.empty(2 * len(a_lengths), dtype=np.int64)
    starts[0::2] = np.cumsum(a_lengths) - a_lengths
    starts[1::2] = len(a) + np.cumsum(b_lengths) - b_lengths
    lengths = np.empty(2 * len(a_lengths), dtype=np.int64)
    lengths[0::2], lengths[1::2] = a_lengths, b_lengths
    at = np.repeat(starts - (np.cumsum(lengths) - lengths), lengths) + np.arange(int(lengths.sum()))
    return both[at], lengths


def _joined(parts: list[SequenceBatch]) -> SequenceBatch:
    """Batches of pairs, each with its records, as one in record order (a record's two
    sequences stay chosen then rejected)."""
    if not parts:
        return SequenceBatch(
            np.zeros(0, np.int32), np.zeros(0, np.int64), np.zeros(0, np.int32), records=np.zeros(0, np.int64)
        )
    if len(parts) == 1:
        return parts[0]
    records = np.concatenate([p.records for p in parts if p.records is not None])
    lengths = np.concatenate([p.lengths for p in parts])
    tokens = np.concatenate([p.tokens for p in parts])
    labels = np.concatenate([p.labels for p in parts if p.labels is not None])
    order = np.argsort(records, kind="stable")
    starts = np.cumsum(lengths) - lengths
    moved = lengths[order]
    at = np.repeat(starts[order] - (np.cumsum(moved) - moved), moved) + np.arange(int(moved.sum()))
    return SequenceBatch(tokens[at], moved, labels[at], records=records[order])
