"""`--engine ray`: the local engine's stages as Ray Core tasks, with the same plan.

1. One task per input file reads, tokenizes and segments it into a spill part
   (`<spill>/part-NNNNN`, complete when its `complete.json` is written, as a local spill;
   with --group-by also the part's own group table and its segments' ids in it).
2. The driver plans with the call the local engine makes: where that is the plan from the
   histogram (bin mode of short sequences), from the parts' histograms added up, while
   one task per part copies the part into length order (`sort_part`, complete when its
   `by_length.json` is written); otherwise from the parts' lengths (and group ids,
   mapped to one table merged in input order), in input order. Same input, same plan.
3. One task per shard gathers its rows from the parts (from their sorted copies through
   the per-part counts of each length, PartedSortedCopy, or from the parts themselves,
   PartedSpill), writes the shard under a temporary name and renames it (or uploads it)
   when complete, then records it in the ledger; it returns the rows' statistics (and
   per-group counts) for the report.
4. The driver writes the report and the manifest.

Every name derives from a part or shard index, never from a task id, so a task that Ray
retries rewrites the same names with the same bytes. The spill must be on storage every
task sees (a local directory for a cluster on one machine, a shared mount otherwise).

This module holds what the driver and every task share (the connection, the attempts each
task records, the faults tests arm) and the tasks that read: step 1 and a mixture's
sources. The tasks that sort and write (steps 2 and 3) are in ray_write.py.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from packcli.core import storage
from packcli.core.errors import PackcliError, needs_extra
from packcli.core.flow import Timer
from packcli.write.spill import open_complete, remove_spill

FAULT_ENV = "PACKCLI_FAULT_DIR"  # tests: a task stage armed there exits once, mid-way
ATTEMPTS_DIR = "attempts"
MAX_RETRIES = 3
_SETUP: list[tuple[Any, Any]] = []  # per worker process: (options, setup), the tokenizer and encoder loaded once


@dataclass(frozen=True)
class Part:
    """A part of the input one task reads: a file, row groups (lo, hi) of a Parquet file, or
    (start byte, end byte, first line number) of a plain JSON Lines file."""

    path: str
    section: tuple[int, ...] | None = None
    bytes: int = 0  # about how much of the input it is, for the progress bar


def connect(address: str | None, cpus: int | None) -> tuple[Any, bool]:
    """The ray module, connected; True when this call started the cluster (and so stops it)."""
    with needs_extra("ray", "--engine ray needs Ray"):
        import ray
    if ray.is_initialized():
        return ray, False
    try:
        if address is None:
            ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False, configure_logging=False)
        else:
            ray.init(address=address, log_to_driver=False, configure_logging=False)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        where = address or "a local cluster"
        raise PackcliError(f"cannot connect to Ray at {where} ({str(exc).splitlines()[0]})") from None
    return ray, True


def resolved(ray: Any, refs: list[Any]) -> list[Any]:
    """ray.get, with a task's PackcliError raised as itself (one line, no Ray traceback)."""
    try:
        return list(ray.get(refs))
    except ray.exceptions.RayTaskError as exc:
        cause = getattr(exc, "cause", None)
        if isinstance(cause, PackcliError):
            raise PackcliError(str(cause), usage=cause.usage) from None
        raise PackcliError(f"a Ray task failed: {str(cause or exc).splitlines()[0]}") from None


# ----------------------------------------------------------------------------- faults and attempts


def record_attempt(spill_dir: str, stage: str, index: int) -> None:
    """Record an attempt of a task in the spill directory: the report counts retries as attempts - tasks."""
    attempts = Path(spill_dir) / ATTEMPTS_DIR
    attempts.mkdir(parents=True, exist_ok=True)
    (attempts / f"{stage}-{index:05d}-{os.getpid()}-{time.monotonic_ns()}").touch()


def maybe_fail(stage: str, index: int) -> None:
    """Exit the worker, once, when a test armed a fault for this stage and task index in the
    directory FAULT_ENV names: how the tests kill a task mid-run and watch Ray retry it."""
    faults = os.environ.get(FAULT_ENV)
    if not faults or not (Path(faults) / f"arm-{stage}-{index}").exists():
        return
    fired = Path(faults) / f"fired-{stage}-{index}"
    if not fired.exists():
        fired.touch()
        os._exit(1)  # a worker killed mid-task: Ray retries the task


def remove_attempts(spill_dir: Path) -> None:
    shutil.rmtree(spill_dir / ATTEMPTS_DIR, ignore_errors=True)


def count_attempts(spill_dir: Path) -> int:
    attempts = spill_dir / ATTEMPTS_DIR
    return sum(1 for _ in attempts.iterdir()) if attempts.is_dir() else 0


# ----------------------------------------------------------------------------- the input cut into parts


def input_size(path: str) -> int:
    try:
        return storage.size(path)
    except (OSError, PackcliError):
        return 0


def split_inputs(paths: list[str], part_bytes: int) -> list[Part]:
    """Files in order; a file over `part_bytes` cut into parts of about that size: a Parquet
    file by runs of row groups, a plain JSON Lines file at line starts. Decided from the
    files alone, so a resumed run finds the same parts."""
    parts = []
    for path in paths:
        size = input_size(path)
        lowered = path.lower()
        if size > part_bytes and lowered.endswith(".parquet"):
            parts.extend(_parquet_parts(path, size, part_bytes))
        elif size > part_bytes and lowered.endswith(".jsonl"):
            parts.extend(_jsonl_parts(path, size, part_bytes))
        else:
            parts.append(Part(path, None, size))
    return parts


def _parquet_parts(path: str, size: int, part_bytes: int) -> list[Part]:
    groups = _parquet_groups(path)
    if len(groups) < 2:
        return [Part(path, None, size)]
    parts, total, lo, held = [], sum(groups), 0, 0
    for index, group_bytes in enumerate(groups):
        held += group_bytes
        if held >= part_bytes or index == len(groups) - 1:
            parts.append(Part(path, (lo, index + 1), size * held // max(1, total)))
            lo, held = index + 1, 0
    return parts


def _jsonl_parts(path: str, size: int, part_bytes: int) -> list[Part]:
    """One pass over the file: a part ends at the first line end past each multiple of
    `part_bytes`; the lines before each start are counted, so messages keep file:line."""
    bounds, want, position, line = [(0, 1)], part_bytes, 0, 1
    with storage.open_input(path) as f:
        while data := f.read(1 << 24):
            at = max(0, want - position)
            while at < len(data) and (end := data.find(b"\n", at)) >= 0:
                bounds.append((position + end + 1, line + data.count(b"\n", 0, end + 1)))
                want = position + end + 1 + part_bytes
                at = want - position
            line += data.count(b"\n")
            position += len(data)
    starts = [(at, first_line) for at, first_line in bounds if at < size]
    ends = [at for at, _ in starts[1:]] + [size]
    return [Part(path, (start, end, first), end - start) for (start, first), end in zip(starts, ends)]


def _parquet_groups(path: str) -> list[int]:
    """Uncompressed bytes of each row group; none when the file cannot be read (the task
    that reads it then fails with the reader's own message)."""
    import pyarrow.parquet as pq

    try:
        with storage.open_input(path) as f:
            meta = pq.ParquetFile(f).metadata
            return [meta.row_group(i).total_byte_size for i in range(meta.num_row_groups)]
    except Exception:
        return []


# ----------------------------------------------------------------------------- spill parts


def worker_setup(opts: Any, fingerprint: str | None) -> Any:
    """This worker's tokenizer, special ids and encoder for these options, loaded once per
    process: kept while the options and the tokenizer's fingerprint stay the same and its
    encoder is the backend asked for (None: any; the driver then chooses)."""
    from packcli.engine.ingest import use_workers
    from packcli.tokenize.setup import setup_tokens

    opts = replace(opts, workers=1)
    use_workers(1)
    key = replace(opts, inputs=[], output="", tokenizer_backend="auto", overwrite=False, resume=False, tmp_dir=None)
    if _SETUP:
        held, setup = _SETUP[0]
        same = held == key and (fingerprint is None or setup.fingerprint == fingerprint)
        if same and opts.tokenizer_backend in ("auto", setup.backend):
            return setup
    _SETUP.clear()
    setup = setup_tokens(opts)
    _SETUP.append((key, setup))
    return setup


def warm_reader(opts: Any) -> None:
    """A worker's start-up done ahead of its first part, while the driver loads its own
    tokenizer: the modules, the tokenizer and the encoder. A failure here is left to the
    part tasks, which report it with the input it concerns."""
    try:
        from packcli.engine import job  # noqa: F401  (what a part task imports)
        from packcli.tokenize.setup import choose_backend

        setup = worker_setup(opts, None)
        if setup.encoder is None:
            choose_backend(replace(opts, workers=1), setup, None, threads=1)
    except Exception:
        pass


def spill_part(
    opts: Any, part: Part, part_dir: str, spill_dir: str, index: int, run_id: str, fingerprint: str | None
) -> dict[str, Any]:
    """Read, tokenize and segment one part of the input into one spill part; its record is
    the ledger entry."""
    from packcli.engine import job
    from packcli.engine.ingest import IngestCounts, TokenStream, segments
    from packcli.plan.grouping import GroupTable, save_group_ids
    from packcli.read.records import BadRecords
    from packcli.write.columns import ids_dtype
    from packcli.write.spill import SpillWriter

    record_attempt(spill_dir, "spill", index)
    setup = worker_setup(opts, fingerprint)
    opts = replace(opts, workers=1)
    timer, bad, counts = Timer(), BadRecords(), IngestCounts()
    paths = [part.path]
    stream = TokenStream(opts, setup, paths, bad, timer, {part.path: part.section} if part.section else None)
    masked = setup.builder.labels != "text"
    writer = SpillWriter(Path(part_dir), ids_dtype(setup.vocab_size), masked, durable=True)  # nodes come and go
    table = GroupTable(opts.group_by) if opts.group_by is not None else None
    try:
        segmenter = job.make_segmenter(opts, setup, counts, table)
        for n, (tokens, lengths, learned) in enumerate(segments(stream, segmenter, paths)):
            with timer.stage("spill"):
                writer.append(tokens, lengths, learned)
            if n == 0:
                maybe_fail("spill", index)
        meta = {"run_id": run_id, "counts": counts.to_dict(), "bad": job.bad_dict(bad), "timings": timer.seconds}
        if table is not None:  # the part's own table (first appearance in the part) and its segments' ids
            save_group_ids(Path(part_dir), segmenter.group_ids.take(segmenter.group_ids.held))
            meta["groups"] = table.to_dict()
        if segmenter.values is not None:  # pairs, weights: each segment's, beside the part
            segmenter.values.save(Path(part_dir))
        with timer.stage("spill"):
            return writer.finish(meta).meta
    except BaseException:
        writer.abort()
        raise
    finally:
        stream.close()


def complete_parts(spill_dir: Path, count: int, run_id: str) -> dict[int, dict[str, Any]]:
    """The parts a resumed run can keep: complete, and made by the same run."""
    kept = {}
    for index in range(count):
        spill = open_complete(part_path(spill_dir, index), run_id)
        if spill is not None:
            kept[index] = spill.meta
            spill.close()
    return kept


def part_path(spill_dir: Path, index: int) -> Path:
    return spill_dir / f"part-{index:05d}"


def clear(spill_dir: Path) -> None:
    remove_spill(spill_dir)
    spill_dir.mkdir(parents=True, exist_ok=True)


# ----------------------------------------------------------------------------- a mixture's sources


def spill_source_part(
    opts: Any, part: Part, dirs: dict[str, str], spill_dir: str, index: int, run_id: str, fingerprint: str | None
) -> dict[str, dict[str, Any]]:
    """One part of one source of a mixture read into its side spills (engine/sources.py),
    its documents numbered from 0; the records of its sides, by side."""
    from packcli.engine.ingest import TokenStream
    from packcli.engine.sources import SourceReader, key_fields
    from packcli.plan.grouping import GroupTable
    from packcli.read.records import BadRecords

    record_attempt(spill_dir, "source", index)
    setup = worker_setup(opts, fingerprint)
    opts = replace(opts, workers=1)
    timer, bad = Timer(), BadRecords()
    sections = {part.path: part.section} if part.section else None
    stream = TokenStream(opts, setup, [part.path], bad, timer, sections, extra_fields=key_fields(opts))
    groups = GroupTable(opts.group_by) if opts.group_by is not None else None
    reader = SourceReader(opts, setup, {side: Path(d) for side, d in dirs.items()}, run_id, groups, timer, durable=True)
    spills = reader.read(stream, bad)
    maybe_fail("source", index)
    records = {}
    for side, spill in spills.items():
        records[side] = spill.meta
        spill.close()
    return records
