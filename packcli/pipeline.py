"""`packcli pack`: read -> tokenize -> pack -> write, streamed in bounded memory.

Everything is decided by the options and the input, never by batch sizes or thread
counts: bin mode packs windows of exactly `buffer_size` sequences, concat mode cuts
one token stream at multiples of `seq_len`, and the writer's bytes do not depend on
how rows arrive. So the same input and options always give byte-identical shards.
"""

from __future__ import annotations

import itertools
import json
import os
import time
from contextlib import ExitStack, closing, contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from packcli import __version__
from packcli.errors import PackcliError

FORMAT_VERSION = 1
BAD_RECORD_POLICIES = ("fail", "skip")
MAX_SEQ_LEN = 1 << 20
DEFAULT_BUFFER_SIZE = 100_000
SHARD_TOKENS = 1 << 25
READ_BATCH = 1024
SAMPLE_CHARS = 1 << 18  # of the input's first batch, encoded both ways before --tokenizer-backend auto picks tiktoken
OWNED_PREFIXES = ("shard-", ".shard-", "manifest.json", ".manifest.json", "report.json", ".report.json", ".packcli-run.json")


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
    buffer_size: int = DEFAULT_BUFFER_SIZE
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
        from packcli.kernels import ALGORITHMS
        from packcli.packing import MODES, OVERLONG_POLICIES, REMAINDER_POLICIES
        from packcli.sequences import ROLES
        from packcli.shards import FORMATS

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
        choice("tokenizer-backend", self.tokenizer_backend, ("auto", "hf", "tiktoken"))
        if self.tokenizer_backend == "tiktoken" and self.input_kind in ("chat", "ids"):
            raise usage(
                "--tokenizer-backend tiktoken does not apply to "
                + ("--messages-field (chat templates are tokenized by transformers)" if self.input_kind == "chat" else "--ids-field")
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
        for flag, value in (("--text-field", self.text_field), ("--messages-field", self.messages_field), ("--ids-field", self.ids_field)):
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

    def settings(self, pad_id: int):
        from packcli.packing import PackSettings

        return PackSettings(
            seq_len=self.seq_len, pad_id=pad_id, mode=self.mode, algorithm=self.algorithm,
            overlong=self.resolved_overlong, remainder=self.remainder, buffer_size=self.buffer_size,
            shuffle=self.shuffle, seed=self.seed,
        )


class Timer:
    """Busy time per stage, so the report shows where a run spends it. Reading, tokenizing
    and packing + writing run at the same time, so the stages add up to more than the total."""

    def __init__(self):
        self.seconds = {"read": 0.0, "tokenize": 0.0, "pack": 0.0, "write": 0.0}

    @contextmanager
    def stage(self, name: str):
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] += time.perf_counter() - start

    def timed_iter(self, name: str, iterator):
        iterator = iter(iterator)
        while True:
            with self.stage(name):
                item = next(iterator, None)
            if item is None:
                return
            yield item


def prepare_output(path: Path, overwrite: bool) -> None:
    """An empty (or new) directory we can write, or one of our own outputs to replace."""
    if path.exists() and not path.is_dir():
        raise PackcliError(f"output {path} exists and is not a directory")
    if path.is_dir():
        entries = sorted(p.name for p in path.iterdir())
        if entries and not overwrite:
            raise PackcliError(
                f"output directory {path} is not empty; pass --overwrite to replace it, or --resume to continue an interrupted run"
            )
        foreign = [name for name in entries if not name.startswith(OWNED_PREFIXES)]
        if foreign:
            raise PackcliError(
                f"output directory {path} holds files packcli did not write ({', '.join(foreign[:3])}); "
                "refusing to overwrite"
            )
        from packcli.shards import remove_path

        # The manifest goes first, so a half-replaced directory never looks complete.
        for name in sorted(entries, key=lambda n: n != "manifest.json"):
            remove_path(path / name)
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".packcli-write-test"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise PackcliError(f"cannot write to output directory {path}: {exc.strerror or exc}") from exc


def write_json_atomic(path: Path, data: dict) -> None:
    tmp = path.with_name("." + path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(json.dumps(data, indent=2) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def use_workers(workers: int | None) -> None:
    """Tokenizer threads: the Rust thread pool reads these once, when it starts."""
    if workers is not None:
        os.environ["RAYON_NUM_THREADS"] = str(workers)
        os.environ["RAYON_RS_NUM_CPUS"] = str(workers)


def _worker_count(opts: PackOptions) -> int:
    """--workers, or the cores this process may use."""
    from packcli.workers import available_cores

    return opts.workers if opts.workers is not None else available_cores()


def _workers_used(opts: PackOptions, processes: int) -> dict:
    """For the report: what tokenized (nothing does for token ids given as input)."""
    if processes:
        return {"kind": "processes", "count": processes}
    if opts.input_kind == "ids":
        return {"kind": "none", "count": 0}
    return {"kind": "threads", "count": _worker_count(opts)}


def _worker_processes(opts: PackOptions, backend: str) -> int:
    """How many tokenizer processes to fork, or 0 to tokenize in this process.

    Processes for the tiktoken backend and chat templates, which hold the GIL for much of
    their work (tiktoken: two threads 1.50x one, two processes 1.97x). The HF tokenizer
    encodes a batch on its own Rust threads (1.6x-1.8x on two in docs/benchmarks.md), and
    two one-thread processes of it were slower on the 50M-token benchmark (111 s) than
    one process on two threads (102 s, measured the session before)."""
    from packcli.workers import can_fork

    if opts.input_kind == "ids" or (backend == "hf" and opts.input_kind != "chat"):
        return 0
    count = _worker_count(opts)
    return count if count > 1 and can_fork() else 0


def run_pack(opts: PackOptions, progress=None) -> dict:
    """Pack the inputs into opts.output; returns the report. Raises PackcliError."""
    opts.validate()
    use_workers(opts.workers)
    started = time.perf_counter()
    timer = Timer()

    from packcli import reading, resume
    from packcli.packing import Counters, make_packer, one_window_bfd_rows
    from packcli.report import RowStats, no_packing_baseline
    from packcli.shards import ShardWriter, ids_dtype, shard_name

    paths = reading.expand_inputs(opts.inputs)
    setup = _setup_tokens(opts)
    cleanup = ExitStack()  # closed last-in first-out: the tokenizing, reading, workers, encoder
    cleanup.callback(setup.close)
    bad = reading.BadRecords()
    records = reading.read_batches(
        paths, setup.builder.fields, batch_size=READ_BATCH, on_bad_record=opts.on_bad_record, bad=bad
    )
    cleanup.callback(records.close)
    forking = _worker_processes(opts, "tiktoken") > 0  # if the backend turns out to be tiktoken
    try:
        with timer.stage("read"):
            first = next(records, None)
        with timer.stage("tokenize"):  # before the output is touched: a refusal leaves it as it was
            _choose_backend(opts, setup, first, threads=1 if forking else opts.workers)
        processes = _worker_processes(opts, setup.backend)
        rows_per_shard = opts.rows_per_shard or max(1, SHARD_TOKENS // opts.seq_len)
        out_dir = Path(opts.output)
        identity = resume.run_identity(_resolved_options(opts, setup, rows_per_shard), paths, setup.fingerprint, __version__)
        done_shards = 0
        if opts.resume and _has_entries(out_dir):
            resume.check_resumable(out_dir, identity)
            if (out_dir / "manifest.json").is_file():
                cleanup.close()
                return _finished_report(out_dir)
            done_shards = resume.completed_shards(out_dir, lambda i: shard_name(i, opts.format))
        else:
            prepare_output(out_dir, opts.overwrite)
            _write_output(out_dir, resume.save_run, out_dir, identity)

        settings = opts.settings(setup.pad_id)
        counters = Counters()
        stats = RowStats(opts.seq_len)
        packer = make_packer(settings, counters)
        writer = ShardWriter(out_dir, opts.format, opts.seq_len, rows_per_shard, setup.vocab_size, done_shards)
        builder = setup.builder
        check_pad = opts.pad_id is not None and opts.pad_id not in (setup.eos_id, setup.bos_id)

        pool = None
        if processes and first is not None:
            from packcli.workers import WorkerPool

            pool = WorkerPool(builder.build, processes)  # it forks: before any thread of ours starts
            cleanup.callback(pool.close)
        batches = prefetch(timer.timed_iter("read", records))
        cleanup.callback(batches.close)
        batches_with_first = itertools.chain([] if first is None else [first], batches)

        def tokenize_here():  # in a thread: the tokenizers release the GIL for most of their work
            try:
                for batch in batches_with_first:
                    with timer.stage("tokenize"):
                        sequences = builder.build(batch)
                    yield batch, sequences
            finally:
                batches.close()  # in the thread that iterates it

        def tokenize_in_workers():
            for batch, sequences, seconds in pool.map(batches_with_first, ahead=2 * pool.workers):
                timer.seconds["tokenize"] += seconds
                yield batch, sequences

        # Three stages at once: reading (a thread), tokenizing (a thread, or worker processes)
        # and packing + writing here, so batch k is written while the next ones are tokenized.
        tokenized = tokenize_in_workers() if pool is not None else prefetch(tokenize_here())
        cleanup.callback(tokenized.close)
    except BaseException:
        cleanup.close()
        raise

    def write(blocks):
        # Rows are built on a thread while the block before them is written here: the row
        # kernel and pyarrow's compression both run without the GIL. This matters most at
        # the end, when the last window is packed and written after all tokenizing is done.
        with closing(prefetch(timer.timed_iter("pack", blocks), depth=1)) as built:
            for rows in built:
                with timer.stage("write"):
                    stats.add(rows)
                    _write_output(out_dir, writer.add, rows)

    try:
        with _signals_raise():
            tracker = InputProgress(paths)
            special_token_records = 0
            for batch, sequences in tokenized:
                special_token_records += sequences.special_token_records
                if check_pad:
                    _refuse_pad_in_data(sequences, setup.pad_id, batch)
                write(packer.add(sequences, batch.location))
                if progress is not None:
                    progress(len(sequences.lengths), int(sequences.lengths.sum()), *tracker.update(batch))
            write(packer.finish())
            if counters.sequences_in == 0:
                skipped = f" ({bad.total:,} bad records skipped)" if bad.total else ""
                raise PackcliError(f"no documents to pack in the input{skipped}")
            with timer.stage("write"):
                shards = _write_output(out_dir, writer.close)
    except BaseException:
        writer.abort()
        raise
    finally:
        cleanup.close()

    summary = stats.summary()
    report = {
        "documents": {
            "read": bad.records_seen,
            "skipped": bad.total,
            "skipped_by_reason": dict(bad.counts),
            "skipped_examples": list(bad.examples),
            "special_token_records": special_token_records,
        },
        "input": opts.input_kind,
        "mode": opts.mode,
        "algorithm": opts.algorithm if opts.mode == "bin" else None,
        "tokenizer_backend": setup.backend,
        "tokenizer_backend_reason": setup.backend_reason,
        "workers": _workers_used(opts, processes),
        "overlong": {
            "policy": settings.overlong if opts.mode == "bin" else "none (concat mode crosses rows)",
            "count": counters.overlong,
            "tokens_lost": counters.overlong_tokens_lost,
            "dropped_without_labels": counters.no_labels_dropped,
        },
        **summary,
        "no_packing": no_packing_baseline(counters.unpacked_rows, summary["real_tokens"], opts.seq_len),
    }
    if opts.mode == "concat":
        report["remainder"] = {"policy": opts.remainder, "tokens": counters.remainder_tokens}
    else:
        unbounded = one_window_bfd_rows(counters, settings)
        report["buffer"] = {
            "size": opts.buffer_size,
            "windows": counters.windows,
            "bfd_rows_in_one_window": unbounded,
            "extra_rows": summary["rows"] - unbounded,
            "efficiency_in_one_window": summary["real_tokens"] / (unbounded * opts.seq_len) if unbounded else 0.0,
        }
    total = time.perf_counter() - started
    report["timings"] = {**{k: round(v, 4) for k, v in timer.seconds.items()}, "total": round(total, 4)}
    dropped_remainder = counters.remainder_tokens if opts.mode == "concat" and opts.remainder == "drop" else 0
    tokens_seen = summary["real_tokens"] + counters.overlong_tokens_lost + dropped_remainder
    report["tokens_per_second"] = tokens_seen / total if total > 0 else 0.0

    manifest = {
        "format_version": FORMAT_VERSION,
        "packcli_version": __version__,
        "mode": opts.mode,
        "algorithm": opts.algorithm if opts.mode == "bin" else None,
        "seq_len": opts.seq_len,
        "format": opts.format,
        "labels": builder.labels,
        "options": _resolved_options(opts, setup, rows_per_shard),
        "tokenizer": {
            "name_or_path": opts.tokenizer,
            "vocab_size": setup.vocab_size,
            "eos_id": setup.eos_id,
            "bos_id": setup.bos_id,
            "pad_id": setup.pad_id,
            "fingerprint": setup.fingerprint,
            "backend": setup.backend,
        },
        "columns": {
            "input_ids": "list<int32>" if opts.format == "parquet" else ids_dtype(setup.vocab_size).name,
            "labels": "int32",
            "position_ids": "int32",
            "cu_seqlens": "int32",
            "num_segments": "int32",
        },
        "totals": {
            "rows": summary["rows"],
            "sequences": summary["sequences_packed"],
            "real_tokens": summary["real_tokens"],
        },
        "shards": [s.to_dict() for s in shards],
    }
    _write_output(out_dir, write_json_atomic, out_dir / "report.json", report)
    _write_output(out_dir, write_json_atomic, out_dir / "manifest.json", manifest)
    return report


def prefetch(iterator, depth: int = 2):
    """Run an iterator in a thread, so reading the next batch overlaps tokenizing this one
    (the tokenizers release the GIL); items and the first error arrive in order.

    Closing the returned generator stops the thread and waits for it; the iterator is
    closed by the thread that runs it, never while another thread is inside it."""
    import queue
    import threading

    items: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()
    end = object()

    def put(item) -> bool:
        while not stop.is_set():
            try:
                items.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            try:
                for item in iterator:
                    if not put((item, None)):
                        return
                put((end, None))
            except BaseException as exc:  # handed to the consumer, raised there
                put((end, exc))
        finally:
            getattr(iterator, "close", lambda: None)()

    thread = threading.Thread(target=produce, name="packcli-prefetch", daemon=True)
    thread.start()
    try:
        while True:
            item, error = items.get()
            if item is end:
                if error is not None:
                    raise error
                return
            yield item
    finally:
        stop.set()
        thread.join()


class InputProgress:
    """Bytes of the input done so far, and in all, for the progress bar's ETA (None for stdin)."""

    def __init__(self, paths: list[str]):
        self.sizes = {p: os.path.getsize(p) for p in paths if p != "-"}
        self.total = sum(self.sizes.values()) if "-" not in paths else None
        self.finished: set[str] = set()
        self.current: str | None = None
        self.done_before = 0

    def update(self, batch) -> tuple[int, int | None]:
        source = batch.source
        if source != self.current:
            if self.current in self.sizes and self.current not in self.finished:
                self.finished.add(self.current)
                self.done_before += self.sizes[self.current]
            self.current = source
        return self.done_before + batch.source_bytes, self.total


def _finished_report(out_dir: Path) -> dict:
    """--resume on a run that had finished: nothing to do, the same report again."""
    import sys

    sys.stderr.write(f"{out_dir} is already complete; nothing to resume\n")
    return json.loads((out_dir / "report.json").read_text(encoding="utf-8"))


def _has_entries(path: Path) -> bool:
    return path.is_dir() and any(path.iterdir())


def _write_output(out_dir: Path, action, *args):
    """Writing errors (a full disk above all) as one line naming the directory."""
    try:
        return action(*args)
    except OSError as exc:
        raise PackcliError(f"writing to {out_dir} failed: {exc.strerror or exc}; no manifest was written") from exc


@contextmanager
def _signals_raise():
    """SIGTERM stops a run like Ctrl-C does: temporary files removed, no manifest."""
    import signal
    import threading

    from packcli.errors import Interrupted

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, frame):
        raise Interrupted(signal.Signals(signum).name, signum)

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _refuse_pad_in_data(sequences, pad_id: int, batch) -> None:
    """An explicit --pad-id promises padding can be told from data by its id alone."""
    import numpy as np

    hits = np.flatnonzero(sequences.tokens == pad_id)
    if len(hits):
        ends = np.cumsum(sequences.lengths)
        index = int(np.searchsorted(ends, hits[0], side="right"))
        raise PackcliError(
            f"{batch.location(index)}: --pad-id {pad_id} occurs in the data; choose an id that does not "
            "(or leave --pad-id out to pad with EOS)"
        )


@dataclass
class TokenSetup:
    builder: object
    vocab_size: int | None
    eos_id: int | None
    bos_id: int | None
    pad_id: int
    add_bos: bool
    fingerprint: str | None
    backend: str
    tokenizer: object = None
    encoder: object = None
    backend_reason: str | None = None

    def close(self) -> None:
        """The tiktoken encoder's thread pool (the HF encoder has nothing to close)."""
        getattr(self.encoder, "close", lambda: None)()


def _choose_backend(opts: PackOptions, setup: TokenSetup, first_batch, threads: int | None) -> None:
    """tiktoken where it is provably identical to the HF tokenizer (checked on the first batch
    of the actual input), else HF; plain text and prompt/completion only."""
    if opts.input_kind not in ("text", "prompt"):
        if opts.input_kind == "chat":
            setup.backend_reason = "chat templates are tokenized by transformers"
        return
    from packcli import fastbpe

    sample: list[str] = []
    if first_batch is not None:
        texts = [text for name in setup.builder.fields for text in first_batch.columns[name]]
        size = 0
        for text in texts:  # whole texts, up to SAMPLE_CHARS: the check runs before any worker starts
            if size >= SAMPLE_CHARS:
                break
            sample.append(text)
            size += len(text)
    setup.encoder = fastbpe.make_encoder(
        setup.tokenizer, opts.tokenizer_backend, sample, threads=threads, fingerprint=setup.fingerprint,
        parse_special_tokens=opts.parse_special_tokens,
    )
    setup.builder.encode = setup.encoder.encode_batch
    setup.backend, setup.backend_reason = setup.encoder.backend, setup.encoder.reason


def _setup_tokens(opts: PackOptions) -> TokenSetup:
    """The tokenizer, special ids and the sequence builder for the input kind."""
    from packcli import sequences, tokenizing

    kind = opts.input_kind
    if opts.tokenizer is None:  # ids input with numbers for EOS and pad
        eos_id = _int_option("--eos-token", opts.eos_token) if opts.eos_token is not None else None
        if opts.eos and eos_id is None:
            raise PackcliError("without --tokenizer, give the EOS id as --eos-token N (or pass --no-eos)")
        pad_id = opts.pad_id if opts.pad_id is not None else eos_id
        if pad_id is None:
            raise PackcliError("without --tokenizer, give --pad-id N")
        if opts.bos:
            raise PackcliError("--bos needs --tokenizer (without one there is no BOS id)")
        bounds = sequences.Boundaries(None, eos_id if opts.eos else None)
        builder = sequences.IdsSequences(opts.ids_field, opts.labels_field, bounds)
        return TokenSetup(builder, None, eos_id, None, pad_id, False, None, "none")

    tokenizer = tokenizing.load_tokenizer(opts.tokenizer, via_transformers=kind == "chat")
    if kind == "chat":
        add_bos = bool(opts.bos)  # the chat template writes BOS itself where the model wants one
    else:
        add_bos = tokenizing.adds_bos_by_default(tokenizer) if opts.bos is None else opts.bos
    specials = tokenizing.resolve_special_ids(
        tokenizer, eos_token=opts.eos_token, pad_id=opts.pad_id, need_eos=opts.eos, need_bos=add_bos
    )
    vocab_size = len(tokenizer)
    bounds = sequences.Boundaries(specials.bos_id if add_bos else None, specials.eos_id if opts.eos else None)

    def encode(texts):
        return tokenizing.encode_texts(tokenizer, texts, opts.parse_special_tokens)

    finder = tokenizing.SpecialTokenFinder.of(tokenizer)  # counted for the report, parsed or not
    if kind == "text":
        builder = sequences.TextSequences(opts.text_field or "text", encode, bounds, finder)
    elif kind == "prompt":
        builder = sequences.PromptCompletionSequences(opts.prompt_field, opts.completion_field, encode, bounds, finder)
    elif kind == "chat":
        template = _read_template(opts.chat_template) if opts.chat_template else None
        roles = tuple(r.strip() for r in opts.train_on.split(",") if r.strip())
        builder = sequences.ChatSequences(opts.messages_field, tokenizer, template, roles, bounds,
                                          parse_special_tokens=opts.parse_special_tokens, specials=finder)
    else:
        builder = sequences.IdsSequences(opts.ids_field, opts.labels_field, bounds)
    return TokenSetup(
        builder, vocab_size, specials.eos_id, specials.bos_id, specials.pad_id, add_bos,
        tokenizing.fingerprint(tokenizer), "hf" if kind != "ids" else "none", tokenizer,
    )


def _int_option(flag: str, value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise PackcliError(f"{flag} must be a token id (a number) when there is no --tokenizer, not {value!r}", usage=True) from None
    if number < 0:
        raise PackcliError(f"{flag} must be a token id (>= 0), not {number}", usage=True)
    return number


def _read_template(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PackcliError(f"cannot read --chat-template {path}: {getattr(exc, 'strerror', None) or exc}") from exc


def _resolved_options(opts: PackOptions, setup: TokenSetup, rows_per_shard: int) -> dict:
    resolved = asdict(opts)
    resolved.update(
        input=opts.input_kind,
        text_field=(opts.text_field or "text") if opts.input_kind == "text" else None,
        bos=setup.add_bos,
        overlong=opts.resolved_overlong if opts.mode == "bin" else None,
        pad_id=setup.pad_id,
        rows_per_shard=rows_per_shard,
    )
    for name in ("workers", "overwrite", "resume", "output"):  # none of them changes the shards
        resolved.pop(name)
    return resolved
