"""The tokenizer side of a run: special ids, the sequence builder and the encoder backend.

`setup_tokens` loads what the input kind needs; `choose_backend` then picks tiktoken
where it is provably identical to the HF tokenizer on the run's own first batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from packcli.core.errors import PackcliError
from packcli.core.options import PackOptions
from packcli.tokenize import sequences
from packcli.tokenize import tokenizer as tokenizing
from packcli.tokenize.cache import Store
from packcli.tokenize.chat import ChatSequences
from packcli.tokenize.pairs import PairSequences
from packcli.tokenize.weights import WeightedSequences

if TYPE_CHECKING:
    from packcli.read.records import RecordBatch
    from packcli.tokenize.fastbpe import Encoder

SAMPLE_CHARS = 1 << 18  # of the input's first batch, encoded both ways before --tokenizer-backend auto picks tiktoken
# An input of one read batch with at most this many characters is tokenized by tiktoken even
# where gigatoken applies: gigatoken's encoder takes about 0.2 s longer to make (151k Qwen
# vocabulary, warm cache, 2 cores: five documents packed in 0.71 s against 0.92 s, medians of
# 6; one batch of 1.2M characters took 1.40 s either way; docs/benchmarks/startup-2026-11-26.md)
SMALL_INPUT_CHARS = 1 << 19


@dataclass
class TokenSetup:
    builder: sequences.SequenceBuilder
    vocab_size: int | None
    eos_id: int | None
    bos_id: int | None
    pad_id: int
    add_bos: bool
    fingerprint: str | None
    backend: str
    tokenizer: Any = None  # a tokenizers or transformers tokenizer; None for token ids without one
    encoder: Encoder | None = None
    backend_reason: str | None = None
    store: Store = field(default_factory=lambda: Store(None))  # the start-up cache (None: off)

    def close(self) -> None:
        """The tiktoken encoder's thread pool (the HF encoder has nothing to close)."""
        getattr(self.encoder, "close", lambda: None)()


def choose_backend(
    opts: PackOptions,
    setup: TokenSetup,
    first_batch: RecordBatch | None,
    threads: int | None,
    whole_input: bool = False,
    shared: Encoder | None = None,
) -> None:
    """tiktoken where it is provably identical to the HF tokenizer (checked on the first batch
    of the actual input), else HF; plain text and prompt/completion only. `whole_input`: the
    first batch is all the input (a small one skips gigatoken, SMALL_INPUT_CHARS). A
    preference pair of strings is encoded as prompt/completion is; one of messages is
    rendered by transformers whatever the backend. `shared`: an encoder another source of
    the same run chose, taken where it serves this input too (fastbpe.fits_sample): one
    encoder, one vocabulary in memory, for a mixture."""
    if opts.input_kind not in ("text", "prompt", "pairs"):
        if opts.input_kind == "chat":
            setup.backend_reason = "chat templates are tokenized by transformers"
        return
    from packcli.tokenize import fastbpe  # lazy: tiktoken and the BPE conversion, for text input only

    builder = setup.builder.inner if isinstance(setup.builder, WeightedSequences) else setup.builder
    assert isinstance(builder, (sequences.TextSequences, sequences.PromptCompletionSequences, PairSequences))
    sample: list[str] = []
    small = False
    if first_batch is not None:
        if isinstance(builder, PairSequences):
            texts = builder.texts(first_batch)
        else:
            texts = [text for name in builder.fields for text in first_batch.columns[name]]
        small = whole_input and sum(map(len, texts)) <= SMALL_INPUT_CHARS
        size = 0
        for text in texts:  # whole texts, up to SAMPLE_CHARS: the check runs before any worker starts
            if size >= SAMPLE_CHARS:
                break
            sample.append(text)
            size += len(text)
    if shared is not None and setup.fingerprint is not None:
        fits = fastbpe.fits_sample(
            shared,
            setup.tokenizer,
            sample,
            fingerprint=setup.fingerprint,
            store=setup.store,
            parse_special_tokens=opts.parse_special_tokens,
        )
        if fits:
            setup.encoder, builder.encode = Borrowed(shared), shared.encode_batch
            setup.backend, setup.backend_reason = shared.backend, shared.reason
            return
    encoder = fastbpe.make_encoder(
        setup.tokenizer,
        opts.tokenizer_backend,
        sample,
        threads=threads,
        fingerprint=setup.fingerprint,
        parse_special_tokens=opts.parse_special_tokens,
        store=setup.store,
        small_input=small,
    )
    setup.encoder, builder.encode = encoder, encoder.encode_batch
    setup.backend, setup.backend_reason = encoder.backend, encoder.reason


class Borrowed:
    """An encoder another setup owns: used here, closed by its owner (TokenSetup.close)."""

    def __init__(self, encoder: Encoder):
        self.owner = encoder
        self.backend, self.reason = encoder.backend, encoder.reason
        self.parse_special_tokens = encoder.parse_special_tokens
        self.threads = getattr(encoder, "threads", None)

    def encode_batch(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        encoded: tuple[np.ndarray, np.ndarray] = self.owner.encode_batch(texts)
        return encoded

    def close(self) -> None:
        """Nothing: the owner closes it."""


def setup_tokens(opts: PackOptions) -> TokenSetup:
    """The tokenizer, special ids and the sequence builder for the input kind."""
    return setup_sources([opts])[0]


def setup_sources(sources: list[PackOptions]) -> list[TokenSetup]:
    """One setup per source of a mixture (each its own input kind and builder), over one
    tokenizer loaded once: through transformers if any source is chat."""
    if not sources:
        return []
    opts = sources[0]
    if opts.tokenizer is None:
        return [_ids_without_tokenizer(o) for o in sources]
    store = Store.default(enabled=not opts.no_cache)
    # chat, and pairs that can only be messages (no --prompt-field); pairs that may be
    # strings load transformers when their first pair in messages comes
    chat = any(o.input_kind == "chat" or (o.input_kind == "pairs" and o.prompt_field is None) for o in sources)
    # The HF backend encodes with the tokenizer: loaded here, before any worker is forked.
    tokenizer, facts = tokenizing.load_with_facts(
        opts.tokenizer, store, via_transformers=chat, eager=opts.tokenizer_backend == "hf"
    )
    return [_setup(o, tokenizer, facts, store) for o in sources]


def _setup(opts: PackOptions, tokenizer: Any, facts: tokenizing.TokenizerFacts, store: Store) -> TokenSetup:
    kind = opts.input_kind
    if kind == "chat" or (kind == "pairs" and opts.prompt_field is None):
        add_bos = bool(opts.bos)  # the chat template writes BOS itself where the model wants one
    else:
        add_bos = facts.adds_bos if opts.bos is None else opts.bos
    specials = tokenizing.resolve_special_ids(
        tokenizer, eos_token=opts.eos_token, pad_id=opts.pad_id, need_eos=opts.eos, need_bos=add_bos
    )
    bounds = sequences.Boundaries(specials.bos_id if add_bos else None, specials.eos_id if opts.eos else None)
    return TokenSetup(
        _builder(opts, tokenizer, bounds, tokenizing.SpecialTokenFinder(list(facts.special_strings))),
        facts.vocab_size,
        specials.eos_id,
        specials.bos_id,
        specials.pad_id,
        add_bos,
        facts.fingerprint,
        "hf" if kind != "ids" else "none",
        tokenizer,
        store=store,
    )


def _ids_without_tokenizer(opts: PackOptions) -> TokenSetup:
    """Token ids as input, with numbers for EOS and pad instead of a tokenizer's tokens."""
    eos_id = _int_option("--eos-token", opts.eos_token) if opts.eos_token is not None else None
    if opts.eos and eos_id is None:
        raise PackcliError("without --tokenizer, give the EOS id as --eos-token N (or pass --no-eos)")
    pad_id = opts.pad_id if opts.pad_id is not None else eos_id
    if pad_id is None:
        raise PackcliError("without --tokenizer, give --pad-id N")
    if opts.bos:
        raise PackcliError("--bos needs --tokenizer (without one there is no BOS id)")
    bounds = sequences.Boundaries(None, eos_id if opts.eos else None)
    builder = sequences.IdsSequences(_given(opts.ids_field), opts.labels_field, bounds)
    return TokenSetup(builder, None, eos_id, None, pad_id, False, None, "none")


def _builder(
    opts: PackOptions, tokenizer: Any, bounds: sequences.Boundaries, finder: tokenizing.SpecialTokenFinder
) -> sequences.SequenceBuilder:
    """The sequence builder of the input kind, over the tokenizer, with each record's
    weight beside its sequences under --weight-field; `finder` counts special tokens in
    records for the report, parsed or not."""
    builder = _kind_builder(opts, tokenizer, bounds, finder)
    if opts.weight_field is not None:
        return WeightedSequences(builder, opts.weight_field, opts.default_weight)
    return builder


def _kind_builder(
    opts: PackOptions, tokenizer: Any, bounds: sequences.Boundaries, finder: tokenizing.SpecialTokenFinder
) -> sequences.SequenceBuilder:
    def encode(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        return tokenizing.encode_texts(tokenizer, texts, opts.parse_special_tokens)

    kind = opts.input_kind
    if kind == "text":
        return sequences.TextSequences(opts.text_field or "text", encode, bounds, finder)
    if kind == "prompt":
        prompt, completion = _given(opts.prompt_field), _given(opts.completion_field)
        return sequences.PromptCompletionSequences(prompt, completion, encode, bounds, finder)
    if kind == "chat":
        return _chat_builder(
            opts, tokenizer, _given(opts.messages_field), bounds, finder, train_on_roles(opts.train_on)
        )
    if kind == "pairs":

        def chat() -> ChatSequences:
            # the chat template's tokenizer: this one if it came through transformers, else loaded so now
            loaded = tokenizer if hasattr(tokenizer, "apply_chat_template") else _via_transformers(opts)
            # the sides' BOS is the template's: packcli adds one only with --bos, as for chat
            chat_bounds = sequences.Boundaries(bounds.bos_id if opts.bos else None, bounds.eos_id)
            return _chat_builder(opts, loaded, "", chat_bounds, finder, ("assistant",))

        return PairSequences(
            opts.prompt_field,
            _given(opts.chosen_field),
            _given(opts.rejected_field),
            encode,
            bounds,
            chat,
            specials=finder,
            mask_reasoning=opts.mask_reasoning,
        )
    return sequences.IdsSequences(_given(opts.ids_field), opts.labels_field, bounds)


def train_on_roles(train_on: str) -> tuple[str, ...]:
    """--train-on as ChatSequences takes it: a tuple of roles, or ("last",) or ("all",)."""
    return tuple(r.strip() for r in train_on.split(",") if r.strip())


def _chat_builder(
    opts: PackOptions,
    tokenizer: Any,
    field: str,
    bounds: sequences.Boundaries,
    finder: tokenizing.SpecialTokenFinder,
    train_on: tuple[str, ...],
) -> ChatSequences:
    template = _read_template(opts.chat_template) if opts.chat_template else None
    return ChatSequences(
        field,
        tokenizer,
        template,
        train_on,
        bounds,
        parse_special_tokens=opts.parse_special_tokens,
        specials=finder,
        reasoning=(opts.reasoning_open, opts.reasoning_close) if opts.mask_reasoning else None,
    )


def _via_transformers(opts: PackOptions) -> Any:
    """The run's tokenizer through transformers (its chat template), for pairs in messages."""
    assert opts.tokenizer is not None  # pairs are tokenized
    return tokenizing.load_tokenizer(opts.tokenizer, via_transformers=True)


def _given(field: str | None) -> str:
    """A field option the input kind implies (PackOptions.input_kind is derived from which is given)."""
    assert field is not None
    return field


def _int_option(flag: str, value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise PackcliError(
            f"{flag} must be a token id (a number) when there is no --tokenizer, not {value!r}", usage=True
        ) from None
    if number < 0:
        raise PackcliError(f"{flag} must be a token id (>= 0), not {number}", usage=True)
    return number


def _read_template(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PackcliError(f"cannot read --chat-template {path}: {getattr(exc, 'strerror', None) or exc}") from exc
