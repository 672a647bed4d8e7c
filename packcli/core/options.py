"""The options of `pack`, checked in one place before any work is done."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from packcli.core.choices import (
    ALGORITHMS,
    BAD_RECORD_POLICIES,
    ENGINES,
    FORMATS,
    MODES,
    OVERLONG_POLICIES,
    REASONING_DELIMITERS,
    REMAINDER_POLICIES,
    ROLES,
    TOKENIZER_BACKENDS,
    TRAIN_ON_TURNS,
    TRUNCATION_SIDES,
)
from packcli.core.errors import PackcliError
from packcli.core.mixture import MixSpec, SourceSpec

MAX_SEQ_LEN = 1 << 20
STDIN = "-"


@dataclass
class PackOptions:
    inputs: list[str]
    output: str
    tokenizer: str | None
    seq_len: int
    text_field: str | None = None
    prompt_field: str | None = None
    completion_field: str | None = None
    messages_field: str | None = None
    chat_template: str | None = None
    train_on: str = "assistant"  # roles, comma-separated, or "last" or "all" (TRAIN_ON_TURNS)
    mask_reasoning: bool = False  # chat: an assistant turn's reasoning block is left out of the loss
    reasoning_open: str = REASONING_DELIMITERS[0]
    reasoning_close: str = REASONING_DELIMITERS[1]
    chosen_field: str | None = None  # preference pairs: the chosen completion (a string or messages)
    rejected_field: str | None = None  # preference pairs: the rejected completion
    weight_field: str | None = None  # a non-negative loss weight per record
    default_weight: float | None = None  # the weight of a record without --weight-field (None: a bad record)
    ids_field: str | None = None
    labels_field: str | None = None
    mode: str = "bin"
    algorithm: str = "bfd"
    remainder: str = "pad"
    buffer_size: int | None = None  # None: one plan over the whole corpus
    overlong: str | None = None
    truncation_side: str | None = None  # None: left where labels are masked, right for plain text
    keep_unlearned: bool = False
    pad_to_multiple_of: int | None = None  # bin mode: each segment padded to a multiple of it
    bos: bool | None = None
    eos: bool = True
    eos_token: str | None = None
    pad_id: int | None = None
    format: str = "parquet"
    rows_per_shard: int | None = None
    shuffle: bool = True  # rows in a seeded random order: the plan's order is a hidden curriculum
    seed: int = 0
    workers: int | None = None
    tokenizer_backend: str = "auto"
    on_bad_record: str = "fail"
    parse_special_tokens: bool = False
    overwrite: bool = False
    resume: bool = False
    tmp_dir: str | None = None
    group_by: str | None = None  # a record field: rows never mix its values
    max_sequences_per_row: int | None = None
    no_cache: bool = False  # the start-up cache of what is derived from the tokenizer
    engine: str = "local"
    ray_address: str | None = None  # --engine ray: a running cluster; None starts one on this machine
    mix: MixSpec | None = None  # --mix FILE or --source NAME=PATH: the sources, in place of INPUT
    holdout: float | None = None  # --holdout: the fraction of each source's documents held out for validation
    holdout_key: str | None = None  # --holdout-key: the field hashed to choose a document's side (default: its content)
    split: str | None = None  # with --holdout, the side an output holds: "train" or "validation" (set by the engine)

    @property
    def input_kind(self) -> str:
        """text, prompt (prompt/completion), chat, ids or pairs (preference pairs);
        validate() makes it unambiguous."""
        if self.chosen_field or self.rejected_field:
            return "pairs"
        if self.prompt_field or self.completion_field:
            return "prompt"
        if self.messages_field:
            return "chat"
        if self.ids_field:
            return "ids"
        return "text"

    @property
    def resolved_overlong(self) -> str:
        """split for plain text; truncate where labels are masked (SFT, chat, ids with labels)."""
        if self.overlong:
            return self.overlong
        return "truncate" if self.masked else "split"

    @property
    def masked(self) -> bool:
        """Whether some tokens are not learned (SFT, chat, ids with labels)."""
        return self.input_kind in ("prompt", "chat", "pairs") or bool(self.labels_field)

    @property
    def resolved_truncation_side(self) -> str:
        """left (keep the completion, cut the prompt's start) where labels are masked; right
        (keep the start) for plain text."""
        return self.truncation_side or ("left" if self.masked else "right")

    @property
    def pairs(self) -> bool:
        """Whether records are preference pairs (--chosen-field/--rejected-field): each is
        two segments placed together."""
        return self.input_kind == "pairs"

    @property
    def per_segment_values(self) -> bool:
        """Whether segments carry values of their own beside their tokens (preference
        pairs, --weight-field): the run plans per piece, each segment found by its place
        in a spill in input order (engine/pairs.py)."""
        return self.pairs or self.weight_field is not None

    @property
    def mixed(self) -> bool:
        """Whether the run is a mixture: sources from --mix or --source, or --holdout (one
        source, the input, split in two)."""
        return self.mix is not None or self.holdout is not None

    def sources(self) -> MixSpec:
        """The run's mixture: --mix's, or the inputs as one source named "input"."""
        if self.mix is not None:
            return self.mix
        return MixSpec((SourceSpec("input", tuple(self.inputs)),), origin="INPUT")

    def source_options(self, index: int) -> PackOptions:
        """The options one source of the mixture is read and tokenized with: its own input
        fields where it names any (the run's cleared), else the run's; a chat source
        without its own template or --train-on takes the run's."""
        source = self.sources().sources[index]
        fields: dict[str, Any] = {}
        if any(key in source.fields for key in KIND_FIELDS):
            fields = dict.fromkeys(KIND_FIELDS)
            fields.update({key: source.fields[key] for key in KIND_FIELDS if key in source.fields})
            chat = fields["messages_field"] is not None
            fields["chat_template"] = self.chat_template if chat else None
            fields["train_on"] = self.train_on if chat else "assistant"
        fields.update({key: source.fields[key] for key in ("chat_template", "train_on") if key in source.fields})
        return replace(
            self,
            inputs=list(source.paths),
            mix=None,
            holdout_key=source.fields.get("holdout_key", self.holdout_key),
            **fields,
        )

    def validate(self) -> None:
        """Usage errors, found before any work is done (exit code 2)."""
        if self.mix is not None and self.inputs:
            raise _usage(f"INPUT and {_mix_flag(self.mix)} exclude each other: a mixture names its sources' paths")
        if not self.inputs and self.mix is None:
            raise _usage("no INPUT given")
        self._check_mixture()
        self._check_values()
        self._check_input_kind()
        self._check_pairs_and_weights()
        if self.resume and self.overwrite:
            raise _usage("--resume and --overwrite exclude each other")
        self._check_engine()
        if self.tokenizer is None and self.input_kind != "ids":
            raise _usage("--tokenizer is required (only --ids-field input can do without)")

    def _check_values(self) -> None:
        check_seq_len(self.seq_len, "--seq-len")
        check_choice("--mode", self.mode, MODES)
        check_algorithm(self.algorithm)
        check_choice("--remainder", self.remainder, REMAINDER_POLICIES)
        check_choice("--format", self.format, FORMATS)
        check_choice("--on-bad-record", self.on_bad_record, BAD_RECORD_POLICIES)
        check_choice("--tokenizer-backend", self.tokenizer_backend, TOKENIZER_BACKENDS)
        if self.overlong is not None:
            check_choice("--overlong", self.overlong, OVERLONG_POLICIES)
        if self.truncation_side is not None:
            check_choice("--truncation-side", self.truncation_side, TRUNCATION_SIDES)
        for flag, value in (
            ("--buffer-size", self.buffer_size),
            ("--rows-per-shard", self.rows_per_shard),
            ("--workers", self.workers),
            ("--max-sequences-per-row", self.max_sequences_per_row),
        ):
            check_positive(flag, value)
        self._check_packing_extras()
        if self.pad_id is not None and self.pad_id < 0:
            raise _usage(f"--pad-id must be a token id (>= 0), not {self.pad_id}")
        check_pad_multiple(self.pad_to_multiple_of, self.seq_len, self.mode, "--pad-to-multiple-of", "--seq-len")

    def _check_mixture(self) -> None:
        """--mix / --source, --holdout and --holdout-key, and each source's own input fields."""
        if self.holdout is not None and not 0 < self.holdout < 1:
            raise _usage(f"--holdout must be a fraction between 0 and 1 (exclusive), not {self.holdout:g}")
        if self.holdout_key is not None and (self.holdout is None or not self.holdout_key):
            raise _usage("--holdout-key goes with --holdout (and names a field)")
        if not self.mixed:
            return
        if self.buffer_size is not None:
            raise _usage("--buffer-size does not apply to a mixture (it is planned over its whole output): drop it")
        spec = self.sources()
        if spec.target_tokens is not None and all(s.weight is None for s in spec.sources):
            raise _usage(f"{spec.origin}: target_tokens needs a source with a weight (the others take fixed epochs)")
        if spec.max_epochs is not None:
            for source in spec.sources:
                epochs = source.fixed_epochs
                if epochs is not None and epochs > spec.max_epochs:
                    raise _usage(
                        f"{spec.origin}: source {source.name!r} asks for {epochs:g} epochs, more than max_epochs {spec.max_epochs:g}"
                    )
        if self.mix is None:
            return
        for index, source in enumerate(spec.sources):
            try:
                own = self.source_options(index)
                own._check_input_kind()
                own._check_packing_extras()
            except PackcliError as exc:
                raise _usage(f"source {source.name!r}: {exc}") from None

    def _check_packing_extras(self) -> None:
        """--group-by, --max-sequences-per-row and a user strategy, where they apply."""
        if self.mode == "concat" and self.max_sequences_per_row is not None:
            raise _usage("--max-sequences-per-row applies to bin mode (concat rows hold parts of documents)")
        if self.mode == "concat" and ":" in self.algorithm:
            raise _usage("--algorithm module:function applies to bin mode")
        if self.group_by is None:
            return
        if not self.group_by:
            raise _usage("--group-by must name a field")
        if self.mode == "concat" and self.buffer_size is not None:
            raise _usage(
                "--group-by with --mode concat plans one stream per group over the whole input: drop --buffer-size"
            )
        if self.group_by in self._tokenized_fields():
            raise _usage(f"--group-by {self.group_by}: that field is the one tokenized; group by another field")

    def _check_input_kind(self) -> None:
        """Exactly one kind of input, and the options that go with it."""
        pairs = bool(self.chosen_field or self.rejected_field)
        given = {
            "--text-field": self.text_field is not None,
            "--prompt-field/--completion-field": bool(self.completion_field or (self.prompt_field and not pairs)),
            "--messages-field": self.messages_field is not None,
            "--ids-field": self.ids_field is not None,
            "--chosen-field/--rejected-field": pairs,
        }
        kinds = [flag for flag, present in given.items() if present]
        if len(kinds) > 1:
            raise _usage(f"conflicting field options: {' and '.join(kinds)} (give exactly one kind of input)")
        for flag, value in (
            ("--text-field", self.text_field),
            ("--messages-field", self.messages_field),
            ("--ids-field", self.ids_field),
        ):
            if value == "":
                raise _usage(f"{flag} must name a field")
        if pairs:
            self._check_pair_fields()
        elif bool(self.prompt_field) != bool(self.completion_field):
            raise _usage("--prompt-field and --completion-field go together")
        if self.prompt_field and self.prompt_field == self.completion_field:
            raise _usage("--prompt-field and --completion-field must name different fields")
        if self.tokenizer_backend == "tiktoken" and self.input_kind in ("chat", "ids"):
            chat = self.input_kind == "chat"
            why = "--messages-field (chat templates are tokenized by transformers)" if chat else "--ids-field"
            raise _usage("--tokenizer-backend tiktoken does not apply to " + why)
        self._check_companions()

    def _check_engine(self) -> None:
        check_choice("--engine", self.engine, ENGINES)
        if self.ray_address is not None and self.engine != "ray":
            raise _usage("--ray-address goes with --engine ray")
        if self.engine == "ray" and self.buffer_size is not None:
            raise _usage("--buffer-size runs on --engine local only (windows are planned one after another)")
        if self.engine == "ray" and STDIN in self.inputs:
            raise _usage("--engine ray reads files, not stdin")
        if self.tmp_dir is not None and "://" in self.tmp_dir and not self.tmp_dir.startswith("file://"):
            raise _usage(
                "--tmp-dir must be a directory on a mounted filesystem (the spill is read with positioned reads)"
            )

    def _check_companions(self) -> None:
        if self.labels_field and not self.ids_field:
            raise _usage("--labels-field goes with --ids-field")
        if self.chat_template and not self.messages_field and self.input_kind != "pairs":
            raise _usage("--chat-template goes with --messages-field (or preference pairs in messages)")
        if self.train_on not in TRAIN_ON_TURNS:
            roles = tuple(r.strip() for r in self.train_on.split(",") if r.strip())
            if not roles or any(r not in ROLES for r in roles):
                raise _usage(
                    f"--train-on takes {' or '.join(TRAIN_ON_TURNS)}, or roles from {', '.join(ROLES)} "
                    f"(comma-separated), not {self.train_on!r}"
                )
        if self.train_on != "assistant" and not self.messages_field:
            why = " (a pair learns its two completions)" if self.input_kind == "pairs" else ""
            raise _usage(f"--train-on goes with --messages-field{why}")
        delimiters = (self.reasoning_open, self.reasoning_close) != REASONING_DELIMITERS
        if (self.mask_reasoning or delimiters) and self.input_kind not in ("chat", "pairs"):
            flag = "--mask-reasoning" if self.mask_reasoning else "--reasoning-open/--reasoning-close"
            raise _usage(f"{flag} goes with --messages-field or preference pairs (chat turns)")
        if delimiters and not self.mask_reasoning:
            raise _usage("--reasoning-open/--reasoning-close go with --mask-reasoning")
        if self.mask_reasoning and (not self.reasoning_open or not self.reasoning_close):
            raise _usage("--reasoning-open and --reasoning-close must not be empty")

    def _check_pair_fields(self) -> None:
        """--chosen-field and --rejected-field, with or without --prompt-field."""
        if not self.chosen_field or not self.rejected_field:
            raise _usage("--chosen-field and --rejected-field go together (and each names a field)")
        names = [name for name in (self.prompt_field, self.chosen_field, self.rejected_field) if name]
        if len(set(names)) != len(names):
            raise _usage("--prompt-field, --chosen-field and --rejected-field must name different fields")

    def _check_pairs_and_weights(self) -> None:
        """What preference pairs and --weight-field allow (each is planned per piece over the
        whole input, from a spill in input order)."""
        if self.default_weight is not None:
            if self.weight_field is None:
                raise _usage("--default-weight goes with --weight-field")
            if not (self.default_weight >= 0 and self.default_weight != float("inf")):
                raise _usage(f"--default-weight must be a non-negative number, not {self.default_weight:g}")
        if self.weight_field is not None:
            if not self.weight_field:
                raise _usage("--weight-field must name a field")
            if self.weight_field in self._tokenized_fields():
                raise _usage(f"--weight-field {self.weight_field}: that field is the one tokenized; name another field")
        for wanted, flag in ((self.pairs, "preference pairs"), (self.weight_field is not None, "--weight-field")):
            if not wanted:
                continue
            if self.mixed:
                raise _usage(
                    f"{flag} do not apply to a mixture (--mix, --source, --holdout): pack each input on its own"
                )
            if self.buffer_size is not None:
                raise _usage(f"{flag} are planned over the whole input: drop --buffer-size")
        if not self.pairs:
            return
        if self.overlong == "split":
            raise _usage("--overlong split cuts sequences, and a pair is never cut: use truncate, drop or error")
        if self.truncation_side == "right":
            raise _usage(
                "--truncation-side right would cut a pair's completions: a pair is truncated from its prompt's start"
            )
        if self.max_sequences_per_row is not None and self.max_sequences_per_row < 2:
            raise _usage("--max-sequences-per-row must be at least 2 with preference pairs (a pair is two sequences)")

    def _tokenized_fields(self) -> tuple[str | None, ...]:
        """The fields whose text or ids become tokens."""
        return (
            self.text_field or ("text" if self.input_kind == "text" else None),
            self.prompt_field,
            self.completion_field,
            self.messages_field,
            self.ids_field,
            self.labels_field,
            self.chosen_field,
            self.rejected_field,
        )

    @property
    def pad_multiple(self) -> int:
        """--pad-to-multiple-of as the multiple every length rounds up to (1: no rounding)."""
        return self.pad_to_multiple_of or 1


# the fields that say what a source's records are: a source naming any replaces all of the run's
KIND_FIELDS = ("text_field", "prompt_field", "completion_field", "messages_field", "ids_field", "labels_field")


def _mix_flag(spec: MixSpec) -> str:
    return "--source" if spec.origin == "--source" else "--mix"


def _usage(message: str) -> PackcliError:
    return PackcliError(message, usage=True)


def check_choice(name: str, value: object, allowed: tuple[str, ...]) -> None:
    """One rule for every choice, named as the caller names it (`--mode` or `mode`)."""
    if value not in allowed:
        raise _usage(f"{name} must be one of {', '.join(allowed)}, not {value!r}")


def check_algorithm(value: str, name: str = "--algorithm") -> None:
    """A built-in packer, or module:function (a user strategy, imported when the plan is made)."""
    if ":" in value:
        check_spec(value)
    else:
        check_choice(name, value, ALGORITHMS)


def check_positive(name: str, value: int | None) -> None:
    if value is not None and value < 1:
        raise _usage(f"{name} must be at least 1, not {value}")


def check_pad_multiple(multiple: int | None, seq_len: int, mode: str, name: str, seq_len_name: str) -> None:
    """Padding to a multiple is for bin mode (concat rows have no room to pad), and rows
    must hold whole padded segments."""
    if multiple is None:
        return
    check_positive(name, multiple)
    if mode != "bin":
        raise _usage(f"{name} applies to bin mode only (concat rows are cut at exactly {seq_len_name})")
    if seq_len % multiple:
        raise _usage(f"{seq_len_name} {seq_len} is not a multiple of {name} {multiple}")


def check_seq_len(value: int, name: str = "seq_len") -> None:
    if not 1 <= value <= MAX_SEQ_LEN:
        raise _usage(f"{name} must be between 1 and {MAX_SEQ_LEN:,}, not {value}")


def check_spec(spec: str) -> None:
    """`module:function` with both parts dotted Python names (a usage error otherwise)."""
    module, _, attribute = spec.partition(":")
    names = [*module.split("."), *attribute.split(".")]
    if not module or not attribute or not all(name.isidentifier() for name in names):
        raise PackcliError(
            f"--algorithm {spec!r}: a built-in name or module:function (e.g. my_packing:pack)", usage=True
        )
