"""The options of `pack`, checked in one place before any work is done."""

from __future__ import annotations

from dataclasses import dataclass

from packcli.choices import (
    ALGORITHMS,
    BAD_RECORD_POLICIES,
    FORMATS,
    MODES,
    OVERLONG_POLICIES,
    REMAINDER_POLICIES,
    ROLES,
    TOKENIZER_BACKENDS,
)
from packcli.errors import PackcliError

MAX_SEQ_LEN = 1 << 20


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
    train_on: str = "assistant"
    ids_field: str | None = None
    labels_field: str | None = None
    mode: str = "bin"
    algorithm: str = "bfd"
    remainder: str = "pad"
    buffer_size: int | None = None  # None: one plan over the whole corpus
    overlong: str | None = None
    bos: bool | None = None
    eos: bool = True
    eos_token: str | None = None
    pad_id: int | None = None
    format: str = "parquet"
    rows_per_shard: int | None = None
    shuffle: bool = False
    seed: int = 0
    workers: int | None = None
    tokenizer_backend: str = "auto"
    on_bad_record: str = "fail"
    parse_special_tokens: bool = False
    overwrite: bool = False
    resume: bool = False
    tmp_dir: str | None = None

    @property
    def input_kind(self) -> str:
        """text, prompt (prompt/completion), chat or ids; validate() makes it unambiguous."""
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
        masked = self.input_kind in ("prompt", "chat") or bool(self.labels_field)
        return "truncate" if masked else "split"

    def validate(self) -> None:
        """Usage errors, found before any work is done (exit code 2)."""

        def usage(message: str):
            return PackcliError(message, usage=True)

        def choice(name: str, value, allowed) -> None:
            if value not in allowed:
                raise usage(f"--{name} must be one of {', '.join(allowed)}, not {value!r}")

        if not self.inputs:
            raise usage("no INPUT given")
        if not 1 <= self.seq_len <= MAX_SEQ_LEN:
            raise usage(f"--seq-len must be between 1 and {MAX_SEQ_LEN:,}, not {self.seq_len}")
        choice("mode", self.mode, MODES)
        choice("algorithm", self.algorithm, ALGORITHMS)
        choice("remainder", self.remainder, REMAINDER_POLICIES)
        choice("format", self.format, FORMATS)
        choice("on-bad-record", self.on_bad_record, BAD_RECORD_POLICIES)
        choice("tokenizer-backend", self.tokenizer_backend, TOKENIZER_BACKENDS)
        if self.tokenizer_backend == "tiktoken" and self.input_kind in ("chat", "ids"):
            raise usage(
                "--tokenizer-backend tiktoken does not apply to "
                + (
                    "--messages-field (chat templates are tokenized by transformers)"
                    if self.input_kind == "chat"
                    else "--ids-field"
                )
            )
        if self.overlong is not None:
            choice("overlong", self.overlong, OVERLONG_POLICIES)
        for name in ("buffer_size", "rows_per_shard", "workers"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise usage(f"--{name.replace('_', '-')} must be at least 1, not {value}")
        if self.pad_id is not None and self.pad_id < 0:
            raise usage(f"--pad-id must be a token id (>= 0), not {self.pad_id}")
        if self.resume and self.overwrite:
            raise usage("--resume and --overwrite exclude each other")
        kinds = [
            flag
            for flag, given in (
                ("--text-field", self.text_field is not None),
                ("--prompt-field/--completion-field", bool(self.prompt_field or self.completion_field)),
                ("--messages-field", self.messages_field is not None),
                ("--ids-field", self.ids_field is not None),
            )
            if given
        ]
        if len(kinds) > 1:
            raise usage(f"conflicting field options: {' and '.join(kinds)} (give exactly one kind of input)")
        for flag, value in (
            ("--text-field", self.text_field),
            ("--messages-field", self.messages_field),
            ("--ids-field", self.ids_field),
        ):
            if value == "":
                raise usage(f"{flag} must name a field")
        if bool(self.prompt_field) != bool(self.completion_field):
            raise usage("--prompt-field and --completion-field go together")
        if self.prompt_field and self.prompt_field == self.completion_field:
            raise usage("--prompt-field and --completion-field must name different fields")
        if self.labels_field and not self.ids_field:
            raise usage("--labels-field goes with --ids-field")
        if self.chat_template and not self.messages_field:
            raise usage("--chat-template goes with --messages-field")
        roles = tuple(r.strip() for r in self.train_on.split(",") if r.strip())
        if not roles or any(r not in ROLES for r in roles):
            raise usage(f"--train-on takes roles from {', '.join(ROLES)}, not {self.train_on!r}")
        if self.train_on != "assistant" and not self.messages_field:
            raise usage("--train-on goes with --messages-field")
        if self.tokenizer is None and self.input_kind != "ids":
            raise usage("--tokenizer is required (only --ids-field input can do without)")

    def plan_settings(self):
        from packcli.plan import PlanSettings

        return PlanSettings(
            seq_len=self.seq_len,
            mode=self.mode,
            algorithm=self.algorithm,
            remainder=self.remainder,
            window=self.buffer_size,
            shuffle=self.shuffle,
            seed=self.seed,
        )
