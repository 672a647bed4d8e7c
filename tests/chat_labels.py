"""An independent checker of chat labels: what each `--train-on` choice (and
`--mask-reasoning`) must learn of a conversation, worked out from the templates' own
layout written here by hand, not through packcli's renderer or its prefix rule.

Two templates: ChatML and a Llama-3-style template (a header per turn between
`<|start_header_id|>` and `<|end_header_id|>`, `<|eot_id|>` ending every turn, BOS first),
each with a tokenizer built here (byte-level BPE, the markup special tokens). The
checker renders a conversation as text, marks the characters each choice learns, and
gives the learned text as runs: what decoding each run of learned tokens of a packed
segment must give.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

LLAMA3_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
LLAMA3_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}<|start_header_id|>{{ message['role'] }}<|end_header_id|>\n\n"
    "{{ message['content'] }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)


def write_llama3_tokenizer(path: Path) -> Path:
    """A byte-level BPE with Llama-3's chat markup as special tokens, BOS <|begin_of_text|>,
    EOS <|eot_id|> (a chat model's end of turn) and the template above."""
    from helpers import byte_level_bpe
    from transformers import PreTrainedTokenizerFast

    tok = byte_level_bpe(["user assistant system: hello world, think answer the question"] * 50, 600, LLAMA3_SPECIALS)
    PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<|begin_of_text|>", eos_token="<|eot_id|>", chat_template=LLAMA3_TEMPLATE
    ).save_pretrained(str(path))
    return path


@dataclass
class Turn:
    """One message as the template writes it: [start, content start) the header,
    [content start, content end) the content, [content end, end) what closes the turn."""

    role: str
    start: int
    content_start: int
    content_end: int
    end: int


def render(template: str, messages: list[dict[str, str]]) -> tuple[str, list[Turn]]:
    """The render of a conversation by the template's layout (no generation prompt)."""
    text, turns = "<|begin_of_text|>" if template == "llama3" else "", []
    for message in messages:
        start = len(text)
        if template == "chatml":
            head, tail = f"<|im_start|>{message['role']}\n", "<|im_end|>\n"
        else:
            head, tail = f"<|start_header_id|>{message['role']}<|end_header_id|>\n\n", "<|eot_id|>"
        text += head
        content_start = len(text)
        text += message["content"]
        content_end = len(text)
        text += tail
        turns.append(Turn(message["role"], start, content_start, content_end, len(text)))
    return text, turns


def learned_runs(
    template: str,
    messages: list[dict[str, str]],
    train_on: str,
    *,
    markers: bool = False,
    reasoning: tuple[str, str] | None = None,
    eos: str | None = None,
) -> list[str]:
    """The learned text of a conversation, run by run, as `--train-on train_on` must
    learn it: an assistant turn is its content and what closes it (`markers`: ChatML's
    `{% generation %}` block, which ends at <|im_end|>, without the newline); `last`
    only the last assistant turn; `all` adds every other turn's content; a role list
    learns those roles' turns from their header on (what lies between the render before
    the turn and through it). The segment's first token (the template's first special
    token) is never learned; reasoning blocks come out after. `eos`: the EOS packcli
    appends (None when the render already ends with it), learned when the last
    character is."""
    text, turns = render(template, messages)
    learned = [False] * len(text)

    def learn(a: int, b: int) -> None:
        learned[a:b] = [True] * (b - a)

    assistant = [t for t in turns if t.role == "assistant"]
    chosen = assistant[-1:] if train_on == "last" else assistant
    if train_on not in ("last", "all"):
        roles = train_on.split(",")
        chosen = [t for t in turns if t.role in roles]
    for turn in chosen:
        end = turn.end - 1 if markers and template == "chatml" else turn.end  # markers stop before the newline
        begin = turn.content_start if turn.role == "assistant" else turn.start
        learn(begin, end)
    if train_on == "all":
        for turn in turns:
            learn(turn.content_start, turn.content_end)
    first = "<|begin_of_text|>" if template == "llama3" else "<|im_start|>"
    learned[: len(first)] = [False] * len(first)  # a segment's first token is never learned
    if reasoning is not None:
        at = 0
        while (start := text.find(reasoning[0], at)) >= 0:
            close = text.find(reasoning[1], start + len(reasoning[0]))
            end = len(text) if close < 0 else close + len(reasoning[1])
            learned[start:end] = [False] * (end - start)
            at = end
    runs, current = [], ""
    for ch, on in zip(text, learned):
        if on:
            current += ch
        elif current:
            runs.append(current)
            current = ""
    if eos is not None:
        if current:
            current += eos
        text += eos
    if current:
        runs.append(current)
    return runs


def segment_runs(tokenizer, ids: list[int], labels: list[int]) -> list[str]:
    """Each run of learned tokens of a segment, decoded."""
    runs, current = [], []
    for token, label in zip(ids, labels):
        if label != -100:
            current.append(token)
        elif current:
            runs.append(current)
            current = []
    if current:
        runs.append(current)
    return [tokenizer.decode(run, skip_special_tokens=False) for run in runs]
