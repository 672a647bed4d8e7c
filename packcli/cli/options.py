"""The options `pack` and `stats` share, each defined once, and the panels `--help` shows.

Both commands take every input option of `pack` through these aliases, and
`pack_options` turns them into the one `PackOptions`, so the two cannot drift.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

import typer
from typer.core import TyperCommand, TyperGroup

from packcli.core.choices import (
    BAD_RECORD_POLICIES,
    OVERLONG_POLICIES,
    ROLES,
    TOKENIZER_BACKENDS,
    TRUNCATION_SIDES,
)

INPUT, TOKENIZATION, PACKING, OUTPUT, RUN = "Input", "Tokenization", "Packing", "Output", "Run"
MIXTURE = "Mixture"
GROUPS = "Groups and limits"  # its own panel: its long option names would squeeze Packing's columns


def one_of(names: tuple[str, ...]) -> str:
    """The metavar of a choice option: its values, as --help shows them."""
    return "<" + "|".join(names) + ">"


def option(*decls: str, panel: str, help: str, **kwargs):
    kwargs.setdefault("show_default", False)
    return typer.Option(*decls, help=help, rich_help_panel=panel, **kwargs)


_DECIMAL = re.compile(r"-?[0-9]+")

# typer's coercion module, which `import typer` loads; None for a typer without one (one
# that does not coerce through pydantic, or keeps it elsewhere): its own coercion throughout.
_coercion: Any = getattr(typer, "_coercion", None)


class _PlainParam(_coercion.RuntimeParam if _coercion else object):  # type: ignore[misc]
    """Coerces the plain str, int and bool values of a command line without pydantic.

    Typer builds a pydantic TypeAdapter for every parameter it coerces, which imports
    pydantic (0.2-0.4 s of every run). The common values (any str, a decimal int) need
    none of it; anything else goes to typer's own coercion, so results and error
    messages stay typer's."""

    def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
        if isinstance(value, (list, tuple)) and self.annotation in (list[str], list[int]):
            item = str if self.annotation == list[str] else int
            if all(_plain(entry, item) for entry in value):
                return [_converted(entry, item) for entry in value]
        elif self.annotation in (str, int, bool) and _plain(value, self.annotation):
            return _converted(value, self.annotation)
        return _coercion.build_runtime_param(param.type_descriptor)._coerce_value(value, param=param, ctx=ctx)


def _plain(value: Any, kind: type) -> bool:
    if type(value) is kind:
        return True
    return kind is int and type(value) is str and _DECIMAL.fullmatch(value) is not None


def _converted(value: Any, kind: type) -> Any:
    return value if type(value) is kind else int(value)


def _has_plain_values(param: Any) -> bool:
    descriptor = getattr(param, "type_descriptor", None)
    if descriptor is None or _coercion is None:
        return False  # a typer without these internals: its own coercion, unchanged
    info = descriptor.parameter_info
    special = descriptor.is_choice or descriptor.is_path or descriptor.is_file or descriptor.is_ranged
    return not special and info.parser is None and descriptor.annotation in (str, int, bool, list[str], list[int])


class _PlainParams:
    """Gives each plain str, int, bool or list parameter (--help too) a _PlainParam."""

    def get_params(self, ctx: Any) -> list[Any]:
        params = super().get_params(ctx)  # type: ignore[misc]
        for param in params:
            if getattr(param, "_runtime_param", False) is None and _has_plain_values(param):
                descriptor = param.type_descriptor
                param._runtime_param = _PlainParam(
                    parameter_info=descriptor.parameter_info, annotation=descriptor.annotation
                )
        return params


class _PlainHelp:
    """Help as packcli.cli.help lays it out; usage errors as one line (exit 2)."""

    def format_help(self, ctx: Any, formatter: Any) -> None:
        from packcli.cli.help import render_help

        formatter.write(render_help(self, ctx))

    def main(
        self,
        args: Any = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        from packcli.cli.help import run_main

        extra["windows_expand_args"] = windows_expand_args
        return run_main(super().main, args, prog_name, complete_var, standalone_mode, **extra)  # type: ignore[misc]


class PlainCommand(_PlainHelp, _PlainParams, TyperCommand):
    """A typer command whose options are coerced without pydantic where they can be."""


class PlainGroup(_PlainHelp, _PlainParams, TyperGroup):
    """A typer group (the root's --version and --help) coerced like PlainCommand."""


Debug = Annotated[bool, option("--debug", panel=RUN, help="Show the full traceback on errors.")]
Json = Annotated[bool, option("--json", panel=OUTPUT, help="Print the report as JSON on stdout.")]

# pack's input options: how records are read and tokenized. `stats` on raw input takes every
# one of them, with these very definitions, so the two commands see the same sequences.
# Values are checked by PackOptions.validate, which names the option (exit 2).
Tokenizer = Annotated[
    str | None,
    option(
        metavar="TOK",
        panel=TOKENIZATION,
        help="Tokenizer directory, tokenizer.json, Hub name, or packcli:demo (bundled). Required except with --ids-field.",
    ),
]
TextField = Annotated[
    str | None,
    option(metavar="FIELD", panel=INPUT, help="Field holding plain text; every token is learned. (default: text)"),
]
PromptField = Annotated[
    str | None,
    option(metavar="FIELD", panel=INPUT, help="SFT and pairs: field of the prompt (its tokens get label -100)."),
]
CompletionField = Annotated[
    str | None, option(metavar="FIELD", panel=INPUT, help="SFT: field of the completion (learned, with EOS).")
]
MessagesField = Annotated[
    str | None,
    option(
        metavar="FIELD",
        panel=INPUT,
        help="Chat: field with [{role, content}, ...] (or ShareGPT from/value), rendered with the chat template.",
    ),
]
ChatTemplate = Annotated[
    str | None,
    option(metavar="FILE", panel=INPUT, help="Chat: a Jinja template file to use instead of the tokenizer's."),
]
TrainOn = Annotated[
    str,
    option(
        metavar="TURNS",
        panel=INPUT,
        show_default=True,
        help=f"Chat: what is learned: roles' turns, comma-separated ({', '.join(ROLES)}); last (the last assistant "
        "turn); all (every turn's content, the template's markup around it not).",
    ),
]
MaskReasoning = Annotated[
    bool,
    option(
        "--mask-reasoning",
        panel=INPUT,
        help="Chat and pairs in messages: leave every reasoning block of the rendered conversation "
        "(<think>...</think>) out of the loss.",
    ),
]
ReasoningOpen = Annotated[
    str,
    option(metavar="TEXT", panel=INPUT, show_default=True, help="--mask-reasoning: the text that opens a block."),
]
ReasoningClose = Annotated[
    str,
    option(metavar="TEXT", panel=INPUT, show_default=True, help="--mask-reasoning: the text that closes a block."),
]
ChosenField = Annotated[
    str | None,
    option(
        metavar="FIELD",
        panel=INPUT,
        help="Preference pairs: the chosen completion (a string, with --prompt-field; or messages).",
    ),
]
RejectedField = Annotated[
    str | None,
    option(metavar="FIELD", panel=INPUT, help="Preference pairs: the rejected completion, as --chosen-field's."),
]
WeightField = Annotated[
    str | None,
    option(
        metavar="FIELD",
        panel=INPUT,
        help="A loss weight per record (a number, 0 or more; 0 drops the record): column segment_weight.",
    ),
]
DefaultWeight = Annotated[
    str | None,
    option(
        metavar="W",
        panel=INPUT,
        help="--weight-field: the weight of a record without the field. (default: such a record is bad)",
    ),
]
IdsField = Annotated[
    str | None, option(metavar="FIELD", panel=INPUT, help="Already tokenized input: field with a list of token ids.")
]
LabelsField = Annotated[
    str | None,
    option(metavar="FIELD", panel=INPUT, help="With --ids-field: field with the labels (-100 = not learned)."),
]
OnBadRecord = Annotated[
    str,
    option(
        panel=INPUT,
        show_default=True,
        metavar=one_of(BAD_RECORD_POLICIES),
        help="fail: stop at the first bad record; skip: count it and go on.",
    ),
]
TokenizerBackend = Annotated[
    str,
    option(
        panel=TOKENIZATION,
        show_default=True,
        metavar=one_of(TOKENIZER_BACKENDS),
        help="auto: tiktoken where provably identical to the HF tokenizer, else hf; or force hf / tiktoken.",
    ),
]
ParseSpecialTokens = Annotated[
    bool,
    option(
        "--parse-special-tokens",
        panel=TOKENIZATION,
        help="Special-token strings inside record text become special tokens. (default: record text is always ordinary text)",
    ),
]
Bos = Annotated[
    bool | None,
    option("--bos/--no-bos", panel=TOKENIZATION, help="Put BOS first. (default: as the tokenizer does)"),
]
Eos = Annotated[
    bool, option("--eos/--no-eos", panel=TOKENIZATION, show_default=True, help="Append EOS to every document.")
]
EosToken = Annotated[
    str | None,
    option(
        metavar="TOKEN",
        panel=TOKENIZATION,
        help="Token to use as EOS instead of the tokenizer's (an id number when there is no --tokenizer).",
    ),
]
PadId = Annotated[
    int | None, option(panel=TOKENIZATION, help="Padding token id. (default: the tokenizer's pad, else EOS)")
]
BufferSize = Annotated[
    int | None,
    option(
        panel=PACKING,
        help="Pack in windows of this many sequences instead of one plan over the whole corpus (bounds temporary disk). (default: one plan)",
    ),
]
GroupBy = Annotated[
    str | None,
    option(
        metavar="FIELD",
        panel=GROUPS,
        help="Rows never mix records with different values of this field (any JSON scalar; null is a group of its own, a missing field a bad record).",
    ),
]
MaxSequencesPerRow = Annotated[
    int | None,
    option(panel=GROUPS, help="bin mode: at most this many sequences in a row. (default: no cap)"),
]
Overlong = Annotated[
    str | None,
    option(
        panel=PACKING,
        metavar=one_of(OVERLONG_POLICIES),
        help="Sequences longer than --seq-len. (default: split for plain text, truncate for SFT/chat)",
    ),
]
NoCache = Annotated[
    bool,
    option(
        "--no-cache",
        panel=RUN,
        help="Neither read nor write the start-up cache of what is derived from the tokenizer ($PACKCLI_CACHE_DIR, else $XDG_CACHE_HOME/packcli).",
    ),
]
TruncationSide = Annotated[
    str | None,
    option(
        panel=PACKING,
        metavar=one_of(TRUNCATION_SIDES),
        help="Truncation: left keeps the completion, right the start. (default: left for SFT/chat)",
    ),
]
KeepUnlearned = Annotated[
    bool,
    option(
        "--keep-unlearned",
        panel=PACKING,
        help="Keep segments with no learned token. (default: drop and count them)",
    ),
]
Workers = Annotated[
    int | None,
    option(panel=RUN, help="Tokenizer processes. (default: all cores)"),
]

Mix = Annotated[
    str | None,
    option(
        metavar="FILE",
        panel=MIXTURE,
        help="A mixture (TOML): [[source]] tables with name, paths, input fields and weight or epochs; seed, target_tokens, max_epochs (docs/mixtures.md). In place of INPUT.",
    ),
]
Source = Annotated[
    list[str],
    option(
        "--source",
        metavar="NAME=PATH",
        panel=MIXTURE,
        help="A source of a mixture, repeated (a name given again adds a path); fields from the input options. In place of INPUT.",
    ),
]
Weight = Annotated[
    list[str],
    option(
        "--weight",
        metavar="NAME=W",
        panel=MIXTURE,
        help="A --source's share of the weighted sources' tokens (relative). (default: --epochs 1)",
    ),
]
Epochs = Annotated[
    list[str],
    option(
        "--epochs",
        metavar="NAME=E",
        panel=MIXTURE,
        help="How many times a --source's documents are taken (2.5: all twice, a seeded half once more).",
    ),
]
Holdout = Annotated[
    str | None,
    option(
        metavar="FRACTION",
        panel=MIXTURE,
        help="Hold out this fraction of each source's documents: writes DIR/train/ and DIR/validation/.",
    ),
]
HoldoutKey = Annotated[
    str | None,
    option(
        metavar="FIELD",
        panel=MIXTURE,
        help="The field whose value chooses a document's side. (default: the record's content; with --group-by its group)",
    ),
]


def mixture(mix_file: str | None, sources: list[str], weights: list[str], epochs: list[str]) -> Any:
    """The MixSpec of --mix or of --source/--weight/--epochs (None: neither), refused as a
    usage error when the two forms are mixed."""
    from packcli.core.errors import PackcliError
    from packcli.core.mixture import inline_mix, load_mix

    if mix_file is not None and (sources or weights or epochs):
        raise PackcliError("--mix and --source/--weight/--epochs exclude each other", usage=True)
    if mix_file is not None:
        return load_mix(mix_file)
    if sources:
        return inline_mix(sources, weights, epochs)
    if weights or epochs:
        raise PackcliError("--weight and --epochs go with --source NAME=PATH", usage=True)
    return None


def fraction(flag: str, value: str | None) -> float | None:
    """A number option kept a string on the command line (typer would coerce a float through pydantic)."""
    if value is None:
        return None
    from packcli.core.errors import PackcliError

    try:
        return float(value)
    except ValueError:
        raise PackcliError(f"{flag} must be a number, not {value!r}", usage=True) from None


INPUT_OPTIONS = (
    "tokenizer",
    "text_field",
    "prompt_field",
    "completion_field",
    "messages_field",
    "chat_template",
    "train_on",
    "mask_reasoning",
    "reasoning_open",
    "reasoning_close",
    "chosen_field",
    "rejected_field",
    "weight_field",
    "default_weight",
    "ids_field",
    "labels_field",
    "on_bad_record",
    "tokenizer_backend",
    "parse_special_tokens",
    "bos",
    "eos",
    "eos_token",
    "pad_id",
    "buffer_size",
    "group_by",
    "max_sequences_per_row",
    "overlong",
    "truncation_side",
    "keep_unlearned",
    "workers",
    "no_cache",
)


def pack_options(inputs: list[str], arguments: dict, **own):
    """PackOptions from a command's arguments (its input options, taken by name) and its own options."""
    from packcli.core.options import PackOptions

    taken = {name: arguments[name] for name in INPUT_OPTIONS}
    taken["default_weight"] = fraction("--default-weight", taken["default_weight"])
    return PackOptions(inputs=list(inputs), **taken, **own)
