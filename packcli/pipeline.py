"""`packcli pack`: read -> tokenize -> pack -> write, streamed in bounded memory.

Everything is decided by the options and the input, never by batch sizes or thread
counts: bin mode packs windows of exactly `buffer_size` sequences, concat mode cuts
one token stream at multiples of `seq_len`, and the writer's bytes do not depend on
how rows arrive. So the same input and options always give byte-identical shards.
"""

from __future__ import annotations

import json
import os
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from packcli import __version__
from packcli.errors import PackcliError

FORMAT_VERSION = 1
MODES = ("bin", "concat")
OVERLONG_POLICIES = ("split", "truncate", "drop", "error")
REMAINDER_POLICIES = ("pad", "drop")
BAD_RECORD_POLICIES = ("fail", "skip")
MAX_SEQ_LEN = 1 << 20
DEFAULT_BUFFER_SIZE = 100_000
SHARD_TOKENS = 1 << 25
CONCAT_SHUFFLE_TOKENS = 1 << 24
READ_BATCH = 1024
OWNED_PREFIXES = ("shard-", ".shard-", "manifest.json", ".manifest.json", "report.json", ".report.json")


@dataclass
class PackOptions:
    inputs: list[str]
    output: str
    tokenizer: str
    seq_len: int
    text_field: str = "text"
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
    on_bad_record: str = "fail"
    overwrite: bool = False

    def validate(self) -> None:
        """Usage errors, found before any work is done (exit code 2)."""
        from packcli.kernels import ALGORITHMS
        from packcli.shards import FORMATS

        def choice(name: str, value, allowed) -> None:
            if value not in allowed:
                raise PackcliError(f"--{name} must be one of {', '.join(allowed)}, not {value!r}", usage=True)

        if not self.inputs:
            raise PackcliError("no INPUT given", usage=True)
        if not 1 <= self.seq_len <= MAX_SEQ_LEN:
            raise PackcliError(f"--seq-len must be between 1 and {MAX_SEQ_LEN:,}, not {self.seq_len}", usage=True)
        choice("mode", self.mode, MODES)
        choice("algorithm", self.algorithm, ALGORITHMS)
        choice("remainder", self.remainder, REMAINDER_POLICIES)
        choice("format", self.format, FORMATS)
        choice("on-bad-record", self.on_bad_record, BAD_RECORD_POLICIES)
        if self.overlong is not None:
            choice("overlong", self.overlong, OVERLONG_POLICIES)
        for name in ("buffer_size", "rows_per_shard", "workers"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise PackcliError(f"--{name.replace('_', '-')} must be at least 1, not {value}", usage=True)
        if self.pad_id is not None and self.pad_id < 0:
            raise PackcliError(f"--pad-id must be a token id (>= 0), not {self.pad_id}", usage=True)
        if not self.text_field:
            raise PackcliError("--text-field must name a field", usage=True)


class Timer:
    """Wall time per stage, so the report shows where a run spends it."""

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


@dataclass
class Counters:
    sequences_in: int = 0
    sequence_rows_unpacked: int = 0
    overlong: int = 0
    overlong_tokens_lost: int = 0
    remainder_tokens: int = 0
    windows: int = 0
    lengths: list = field(default_factory=list)


class BinPacker:
    """Packs windows of exactly `buffer_size` sequences with the chosen kernel."""

    def __init__(self, opts: PackOptions, pad_id: int, counters: Counters):
        self.opts, self.pad_id, self.counters = opts, pad_id, counters
        self.policy = opts.overlong or "split"
        self.chunks: list[tuple] = []  # (tokens, starts, lengths)
        self.buffered = 0

    def add(self, tokens, lengths, location):
        import numpy as np

        from packcli.rows import cut_pieces

        seq_len = self.opts.seq_len
        starts = np.cumsum(lengths) - lengths
        long = lengths > seq_len
        if long.any():
            self.counters.overlong += int(long.sum())
            excess = int((lengths[long] - seq_len).sum())
            if self.policy == "error":
                first = int(np.argmax(long))
                raise PackcliError(
                    f"{location(first)}: document has {int(lengths[first]):,} tokens, more than "
                    f"--seq-len {seq_len:,} (--overlong error; use split, truncate or drop)"
                )
            if self.policy == "split":
                starts, lengths, _ = cut_pieces(starts, lengths, seq_len, aligned=False)
            elif self.policy == "truncate":
                self.counters.overlong_tokens_lost += excess
                lengths = np.minimum(lengths, seq_len)
            else:
                self.counters.overlong_tokens_lost += int(lengths[long].sum())
                starts, lengths = starts[~long], lengths[~long]
        self.counters.sequence_rows_unpacked += len(lengths)
        yield from self._buffer(tokens, starts, lengths)

    def _buffer(self, tokens, starts, lengths):
        size = self.opts.buffer_size
        while len(lengths):
            take = min(len(lengths), size - self.buffered)
            self.chunks.append((tokens, starts[:take], lengths[:take]))
            self.buffered += take
            starts, lengths = starts[take:], lengths[take:]
            if self.buffered == size:
                yield self._pack_window()

    def finish(self):
        if self.buffered:
            yield self._pack_window()

    def _pack_window(self):
        import numpy as np

        from packcli.kernels import pack_lengths
        from packcli.rows import build_rows

        tokens, starts, lengths = _gather(self.chunks)
        self.chunks, self.buffered = [], 0
        placement = pack_lengths(lengths, self.opts.seq_len, algorithm=self.opts.algorithm, seed=self.opts.seed)
        row_of = placement.row
        if self.opts.shuffle:
            order = _window_rng(self.opts.seed, self.counters.windows).permutation(placement.n_rows)
            row_of = order[row_of]
        self.counters.windows += 1
        self.counters.lengths.append(lengths.astype(np.int32))
        return build_rows(tokens, None, starts, lengths, row_of, placement.offset, placement.n_rows, self.opts.seq_len, self.pad_id)


def _gather(chunks):
    """One flat token array for a window, with starts rebased into it."""
    import numpy as np

    pieces, starts, lengths, base = [], [], [], 0
    for tokens, chunk_starts, chunk_lengths in chunks:
        if not len(chunk_lengths):
            continue
        lo = int(chunk_starts.min())
        hi = int((chunk_starts + chunk_lengths).max())
        pieces.append(tokens[lo:hi])
        starts.append(chunk_starts - lo + base)
        lengths.append(chunk_lengths)
        base += hi - lo
    return np.concatenate(pieces), np.concatenate(starts), np.concatenate(lengths)


def _window_rng(seed: int, window: int):
    import numpy as np

    return np.random.default_rng([seed, window])


class ConcatPacker:
    """Joins documents into one stream and cuts it into rows of exactly seq_len."""

    def __init__(self, opts: PackOptions, pad_id: int, counters: Counters):
        import numpy as np

        self.opts, self.pad_id, self.counters = opts, pad_id, counters
        self.pending_tokens = np.zeros(0, dtype=np.int32)
        self.pending_lengths = np.zeros(0, dtype=np.int64)
        shuffle_rows = max(1, min(opts.buffer_size, CONCAT_SHUFFLE_TOKENS // opts.seq_len))
        self.shuffler = RowShuffler(shuffle_rows, opts.seed) if opts.shuffle else None

    def add(self, tokens, lengths, location):
        import numpy as np

        seq_len = self.opts.seq_len
        self.counters.overlong += int((lengths > seq_len).sum())
        self.counters.sequence_rows_unpacked += int(np.ceil(lengths / seq_len).sum())
        self.counters.lengths.append(lengths.astype(np.int32))
        tokens = np.concatenate([self.pending_tokens, tokens])
        lengths = np.concatenate([self.pending_lengths, lengths])
        full_rows = len(tokens) // seq_len
        rows, rest = self._cut(tokens, lengths, full_rows)
        self.pending_tokens = tokens[full_rows * seq_len :]
        self.pending_lengths = rest
        if rows is not None:
            yield from self._emit(rows)

    def _cut(self, tokens, lengths, n_rows):
        import numpy as np

        from packcli.rows import build_rows, cut_pieces

        seq_len = self.opts.seq_len
        starts = np.cumsum(lengths) - lengths
        piece_start, piece_len, _ = cut_pieces(starts, lengths, seq_len, aligned=True)
        emit = piece_start < n_rows * seq_len
        rows = None
        if n_rows:
            s, n = piece_start[emit], piece_len[emit]
            rows = build_rows(tokens, None, s, n, s // seq_len, s % seq_len, n_rows, seq_len, self.pad_id)
        return rows, piece_len[~emit]

    def _emit(self, rows):
        if self.shuffler is None:
            yield rows
        else:
            yield from self.shuffler.add(rows)

    def finish(self):
        self.counters.remainder_tokens = len(self.pending_tokens)
        if len(self.pending_tokens) and self.opts.remainder == "pad":
            rows, _ = self._cut(self.pending_tokens, self.pending_lengths, 1)
            yield from self._emit(rows)
        if self.shuffler is not None:
            yield from self.shuffler.finish()


class RowShuffler:
    """Permutes rows within consecutive windows of a fixed number of rows."""

    def __init__(self, window_rows: int, seed: int):
        self.window_rows, self.seed = window_rows, seed
        self.blocks, self.count, self.windows = [], 0, 0

    def add(self, rows):
        from packcli.rows import Rows

        self.blocks.append(rows)
        self.count += len(rows)
        while self.count >= self.window_rows:
            block = Rows.concat(self.blocks)
            window, rest = block.slice(0, self.window_rows), block.slice(self.window_rows, len(block))
            self.blocks, self.count = ([rest] if len(rest) else []), len(rest)
            yield self._permute(window)

    def finish(self):
        from packcli.rows import Rows

        if self.count:
            block = Rows.concat(self.blocks)
            self.blocks, self.count = [], 0
            yield self._permute(block)

    def _permute(self, rows):
        order = _window_rng(self.seed, self.windows).permutation(len(rows))
        self.windows += 1
        return rows.take(order)


def prepare_output(path: Path, overwrite: bool) -> None:
    """An empty (or new) directory we can write, or one of our own outputs to replace."""
    if path.exists() and not path.is_dir():
        raise PackcliError(f"output {path} exists and is not a directory")
    if path.is_dir():
        entries = sorted(p.name for p in path.iterdir())
        if entries and not overwrite:
            raise PackcliError(f"output directory {path} is not empty; pass --overwrite to replace it")
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


def run_pack(opts: PackOptions, progress=None) -> dict:
    """Pack the inputs into opts.output; returns the report. Raises PackcliError."""
    opts.validate()
    if opts.workers is not None:
        os.environ["RAYON_NUM_THREADS"] = str(opts.workers)
        os.environ["RAYON_RS_NUM_CPUS"] = str(opts.workers)
    started = time.perf_counter()
    timer = Timer()

    from packcli import reading, tokenizing
    from packcli.report import RowStats, no_packing_baseline
    from packcli.shards import ShardWriter

    paths = reading.expand_inputs(opts.inputs)
    tokenizer = tokenizing.load_tokenizer(opts.tokenizer)
    add_bos = tokenizing.adds_bos_by_default(tokenizer) if opts.bos is None else opts.bos
    specials = tokenizing.resolve_special_ids(
        tokenizer, eos_token=opts.eos_token, pad_id=opts.pad_id, need_eos=opts.eos, need_bos=add_bos
    )
    vocab_size = len(tokenizer)
    if specials.pad_id >= vocab_size:
        raise PackcliError(f"--pad-id {specials.pad_id} is outside the vocabulary (size {vocab_size})")
    rows_per_shard = opts.rows_per_shard or max(1, SHARD_TOKENS // opts.seq_len)
    out_dir = Path(opts.output)
    prepare_output(out_dir, opts.overwrite)

    counters = Counters()
    bad = reading.BadRecords()
    stats = RowStats(opts.seq_len)
    packer = (BinPacker if opts.mode == "bin" else ConcatPacker)(opts, specials.pad_id, counters)
    writer = ShardWriter(out_dir, opts.format, opts.seq_len, rows_per_shard, vocab_size)
    bos_id = specials.bos_id if add_bos else None
    eos_id = specials.eos_id if opts.eos else None

    def write(blocks):
        for rows in timer.timed_iter("pack", blocks):
            with timer.stage("write"):
                stats.add(rows)
                writer.add(rows)

    try:
        batches = reading.read_batches(
            paths, {opts.text_field: "text"}, batch_size=READ_BATCH, on_bad_record=opts.on_bad_record, bad=bad
        )
        for batch in timer.timed_iter("read", batches):
            with timer.stage("tokenize"):
                flat, lengths = tokenizing.encode_texts(tokenizer, batch.columns[opts.text_field])
                flat, lengths = tokenizing.add_boundary_tokens(flat, lengths, bos_id, eos_id)
            counters.sequences_in += len(lengths)
            write(packer.add(flat, lengths, batch.location))
            if progress is not None:
                progress(len(lengths), int(lengths.sum()))
        write(packer.finish())
        if counters.sequences_in == 0:
            skipped = f" ({bad.total:,} bad records skipped)" if bad.total else ""
            raise PackcliError(f"no documents to pack in the input{skipped}")
        with timer.stage("write"):
            shards = writer.close()
    except BaseException:
        writer.abort()
        raise

    report = stats.summary()
    report = _full_report(report, opts, counters, bad, timer, started, specials, add_bos)
    report["no_packing"] = no_packing_baseline(counters.sequence_rows_unpacked, report["real_tokens"], opts.seq_len)
    manifest = {
        "format_version": FORMAT_VERSION,
        "packcli_version": __version__,
        "mode": opts.mode,
        "algorithm": opts.algorithm if opts.mode == "bin" else None,
        "seq_len": opts.seq_len,
        "format": opts.format,
        "labels": "text",
        "options": _resolved_options(opts, add_bos, specials, rows_per_shard),
        "tokenizer": {
            "name_or_path": opts.tokenizer,
            "vocab_size": vocab_size,
            "eos_id": specials.eos_id,
            "bos_id": specials.bos_id,
            "pad_id": specials.pad_id,
            "fingerprint": tokenizing.fingerprint(tokenizer),
            "backend": "hf",
        },
        "columns": {
            "input_ids": "list<int32>" if opts.format == "parquet" else writer.id_dtype.name,
            "labels": "int32",
            "position_ids": "int32",
            "cu_seqlens": "int32",
            "num_segments": "int32",
        },
        "totals": {
            "rows": report["rows"],
            "sequences": report["sequences_packed"],
            "real_tokens": report["real_tokens"],
        },
        "shards": [s.to_dict() for s in shards],
    }
    write_json_atomic(out_dir / "report.json", report)
    write_json_atomic(out_dir / "manifest.json", manifest)
    return report


def _full_report(report, opts, counters, bad, timer, started, specials, add_bos) -> dict:
    import numpy as np

    from packcli.kernels import pack_lengths

    seq_len = opts.seq_len
    full = {
        "documents": {
            "read": counters.sequences_in + bad.total,
            "skipped": bad.total,
            "skipped_by_reason": dict(bad.counts),
            "skipped_examples": list(bad.examples),
        },
        "mode": opts.mode,
        "algorithm": opts.algorithm if opts.mode == "bin" else None,
        "tokenizer_backend": "hf",
        "overlong": {
            "policy": (opts.overlong or "split") if opts.mode == "bin" else "none (concat mode crosses rows)",
            "count": counters.overlong,
            "tokens_lost": counters.overlong_tokens_lost,
        },
    }
    full.update(report)
    if opts.mode == "concat":
        full["remainder"] = {"policy": opts.remainder, "tokens": counters.remainder_tokens}
    else:
        window = {"size": opts.buffer_size, "windows": counters.windows, "rows_in_one_window": report["rows"]}
        if counters.windows > 1:
            lengths = np.concatenate(counters.lengths)
            window["rows_in_one_window"] = pack_lengths(lengths, seq_len, algorithm=opts.algorithm, seed=opts.seed).n_rows
        window["extra_rows"] = report["rows"] - window["rows_in_one_window"]
        full["buffer"] = window
    total = time.perf_counter() - started
    full["timings"] = {**{k: round(v, 4) for k, v in timer.seconds.items()}, "total": round(total, 4)}
    tokenized = report["real_tokens"] + counters.overlong_tokens_lost + counters.remainder_tokens * (opts.remainder == "drop")
    full["tokens_per_second"] = tokenized / total if total > 0 else 0.0
    return full


def _resolved_options(opts: PackOptions, add_bos: bool, specials, rows_per_shard: int) -> dict:
    resolved = asdict(opts)
    resolved.update(
        bos=add_bos,
        overlong=(opts.overlong or "split") if opts.mode == "bin" else None,
        pad_id=specials.pad_id,
        rows_per_shard=rows_per_shard,
    )
    for name in ("workers", "overwrite", "output"):  # none of them changes the shards
        resolved.pop(name)
    return resolved
