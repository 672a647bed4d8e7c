"""The driver of `--engine ray`: hands out spill parts and shards, plans in between.

The driver holds the plan and nothing that grows with the tokens. It runs the local
engine's plan step (job.PlanStep): where that plans from the length histogram
(`histogram_suffices`: bin mode of short sequences), so does the driver, from the parts' histograms added up: it holds the patterns and a count
per part and length, nothing per sequence. Otherwise it reads the parts' lengths and
holds what the local engine's plan holds (docs/scale-out.md). The tasks are in
ray_tasks.py.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from packcli.core.errors import PackcliError
from packcli.core.flow import Timer
from packcli.core.options import PackOptions
from packcli.engine import ray_tasks as tasks
from packcli.engine.ingest import UNLEARNED_EXAMPLES, IngestCounts
from packcli.engine.job import Job, Outcome, PlanStep, Progress, check_documents
from packcli.engine.pairs import spill_values
from packcli.engine.sources import SourceRead, SourcesToRead
from packcli.plan.contract import Plan
from packcli.plan.grouping import GroupTable, load_group_ids, merge_tables
from packcli.plan.planner import plan_window, uncapped_rows
from packcli.plan.settings import PlanSettings
from packcli.plan.strategy import is_custom
from packcli.read.records import BadRecords
from packcli.write.columns import ids_dtype
from packcli.write.manifest import BadRecordCounts
from packcli.write.report import RowStats
from packcli.write.shards import ShardInfo
from packcli.write.spill import HISTOGRAM_FILE, LENGTHS_FILE, Spill, spill_size

PART_BYTES = 256 << 20  # a Parquet file larger than this is read by several tasks, by row groups


@contextmanager
def ray_session(opts: PackOptions, paths: list[str]) -> Iterator[None]:
    """Connected before the driver loads its tokenizer, with the workers starting and
    loading theirs meanwhile (a worker process starts cold: Python, Ray, packcli, the
    tokenizer); a cluster this call started is stopped at the end."""
    ray, started = tasks.connect(opts.ray_address, opts.workers)
    warming: list[Any] = []
    try:
        warm = ray.remote(tasks.warm_reader).options(max_retries=0, num_cpus=1)
        warming = [warm.remote(opts) for _ in range(_workers_wanted(ray, paths))]
        yield
    finally:
        settle(ray, warming)
        if started:
            ray.shutdown()


def settle(ray: Any, warming: list[Any]) -> None:
    """Warm-ups are only a head start: a failed one (a worker that cannot import packcli,
    say) is left to the tasks to report, not printed by Ray as an unhandled error."""
    ready, _ = ray.wait(warming, num_returns=len(warming), timeout=0)
    for ref in ready:
        try:
            ray.get(ref)
        except Exception:
            pass


def _workers_wanted(ray: Any, paths: list[str]) -> int:
    """Workers the part tasks will use: the cluster's CPUs, or fewer when the input has
    fewer parts (about: a file over PART_BYTES counts as several)."""
    cpus = int(ray.cluster_resources().get("CPU", 1))
    if len(paths) >= cpus:
        return cpus
    return min(cpus, sum(1 + tasks.input_size(path) // PART_BYTES for path in paths))


def execute_ray(job: Job, paths: list[str], timer: Timer, progress: Progress | None) -> Outcome:
    ray, started = tasks.connect(job.opts.ray_address, job.opts.workers)  # connected already in a ray_session
    try:
        return _stages(ray, job, paths, timer, progress)
    finally:
        if started:
            ray.shutdown()


def _stages(ray: Any, job: Job, paths: list[str], timer: Timer, progress: Progress | None) -> Outcome:
    opts, spill_dir = job.opts, job.spill_dir
    outcome = Outcome(stats=RowStats(opts.seq_len))
    step = PlanStep(opts, outcome, timer)
    wall: dict[str, float] = {}
    begin = time.perf_counter()
    parts = tasks.split_inputs(paths, PART_BYTES)
    metas, reused = _spill_parts(ray, job, parts, progress, step.settings)
    wall["spill"] = time.perf_counter() - begin
    outcome.spill_reused = reused == len(parts)
    outcome.counts, outcome.bad = _merged_counts(metas), _merged_bad(metas)
    for meta in metas:
        for stage, seconds in meta.get("timings", {}).items():
            timer.seconds[stage] += seconds
    check_documents(outcome, paths)
    outcome.spill_bytes = sum(spill_size(tasks.part_path(spill_dir, i)) for i in range(len(parts)))
    tokens, sequences = sum(int(m["tokens"]) for m in metas), sum(int(m["sequences"]) for m in metas)
    histogram, per_part, from_histogram = None, None, False
    if step.gathers_by_bucket(tokens, sequences) and opts.group_by is None:
        per_part = _part_histograms(spill_dir, len(parts))
        histogram = per_part.sum(axis=0)
        from_histogram = step.histogram_suffices(histogram)
    sorting = _sort_parts(ray, job, metas) if from_histogram else []  # while this process plans
    warming = _warm_writers(ray, job, len(parts))
    begin = time.perf_counter()
    part_counts = None
    tags = None
    plan: Plan
    if from_histogram and histogram is not None and per_part is not None:  # the lengths stay in the parts
        plan = step.plan_histogram(histogram)
        assert plan.buckets is not None  # plan_histogram's
        part_counts = per_part[:, plan.buckets.length]  # where the shard tasks find the k-th of a length
    else:
        with timer.stage("plan"):
            lengths = np.concatenate([np.load(tasks.part_path(spill_dir, i) / LENGTHS_FILE) for i in range(len(parts))])
            groups = _merged_groups(job, outcome, metas, lengths)
        values = None
        if opts.per_segment_values:  # pairs, weights: as the local engine plans them (engine/pairs.py)
            part_dirs = [tasks.part_path(spill_dir, i) for i in range(len(parts))]
            values = spill_values(opts, part_dirs, [int(m["sequences"]) for m in metas])
            tags = values.tags(lengths)
        if values is not None and values.first is not None:
            plan = step.plan_pairs(values.first, lengths, groups)
        else:
            plan = step.plan_lengths(lengths, groups=groups)
    wall["plan"] = time.perf_counter() - begin
    begin = time.perf_counter()
    if sorting:
        tasks.resolved(ray, sorting)
        outcome.spill_bytes = sum(spill_size(tasks.part_path(spill_dir, i)) for i in range(len(parts)))
    results = _write_shards(ray, job, plan, [int(m["tokens"]) for m in metas], part_counts, tags)
    settle(ray, warming)
    tasks.maybe_fail("driver", 0)  # tests: a driver killed with every shard written, before the manifest
    wall["write"] = time.perf_counter() - begin
    timer.seconds["write"] += wall["write"]
    outcome.stats = tasks.merge_stats(opts.seq_len, results)
    outcome.shards = [ShardInfo(**r["info"]) for r in results]
    outcome.group_counts = tasks.merge_group_counts(results)
    attempts = tasks.count_attempts(spill_dir)
    ran = len(parts) - reused + len(sorting) + len(results)
    outcome.engine = {
        "name": "ray",
        "tasks": ran,
        "retries": max(0, attempts - ran),
        "parts": len(parts),
        "parts_reused": reused,
        "workers": {"kind": "ray", "count": int(ray.cluster_resources().get("CPU", 0)), "nodes": len(ray.nodes())},
        "seconds": {k: round(v, 4) for k, v in wall.items()},
    }
    return outcome


def _part_histograms(spill_dir: Path, parts: int) -> np.ndarray:
    """Each part's length histogram ([parts, longest length + 1]): added up, the whole
    input's, as the local spill has it."""
    own = [np.load(tasks.part_path(spill_dir, i) / HISTOGRAM_FILE) for i in range(parts)]
    table = np.zeros((parts, max((len(h) for h in own), default=0)), dtype=np.int64)
    for i, histogram in enumerate(own):
        table[i, : len(histogram)] = histogram
    return table


def _sort_parts(ray: Any, job: Job, metas: list[dict[str, Any]]) -> list[Any]:
    """One task per part whose sorted copy is not complete (a resumed run keeps the rest)."""
    remote = ray.remote(tasks.sort_part).options(max_retries=tasks.MAX_RETRIES, num_cpus=1)
    spill_dir = job.spill_dir
    return [
        remote.remote(str(tasks.part_path(spill_dir, i)), str(spill_dir), i, job.opts.seq_len)
        for i, meta in enumerate(metas)
        if not tasks.sorted_complete(tasks.part_path(spill_dir, i), meta)
    ]


def _merged_groups(job: Job, outcome: Outcome, metas: list[dict[str, Any]], lengths: np.ndarray) -> np.ndarray | None:
    """--group-by: the parts' tables merged in input order into the one the local engine
    builds (outcome.group_table), and every segment's id in it, in input order."""
    if job.opts.group_by is None:
        return None
    outcome.group_table, remaps = merge_tables([GroupTable.from_dict(meta["groups"]) for meta in metas])
    ids = [
        remap[load_group_ids(tasks.part_path(job.spill_dir, i), int(meta["sequences"]))]
        for i, (meta, remap) in enumerate(zip(metas, remaps))
    ]
    joined = np.concatenate(ids) if ids else np.zeros(0, dtype=np.int32)
    if len(joined) != len(lengths):
        raise PackcliError(f"{job.spill_dir}: {len(joined):,} group ids for {len(lengths):,} segments")
    return joined


def _spill_parts(
    ray: Any, job: Job, parts: list[tasks.Part], progress: Progress | None, settings: PlanSettings
) -> tuple[list[dict[str, Any]], int]:
    """One task per part of the input; a resumed run keeps the complete parts of the same run."""
    spill_dir = job.spill_dir
    kept = tasks.complete_parts(spill_dir, len(parts), job.run_id) if job.opts.resume else {}
    if not kept:
        tasks.clear(spill_dir)
    tasks.remove_attempts(spill_dir)
    remote = ray.remote(tasks.spill_part).options(max_retries=tasks.MAX_RETRIES, num_cpus=1)
    opts = job.opts
    if opts.input_kind in ("text", "prompt") and job.setup.backend in ("hf", "tiktoken"):
        opts = replace(opts, tokenizer_backend=job.setup.backend)  # what the driver chose, as one run
    fingerprint = job.setup.fingerprint
    refs = {
        remote.remote(opts, part, str(tasks.part_path(spill_dir, i)), str(spill_dir), i, job.run_id, fingerprint): i
        for i, part in enumerate(parts)
        if i not in kept
    }
    warm_planner(settings, job.opts.group_by is not None)
    metas = dict(kept)
    pending = list(refs)
    total = sum(part.bytes for part in parts)
    done_bytes = sum(parts[i].bytes for i in kept)
    while pending:
        ready, pending = ray.wait(pending, num_returns=1)
        (meta,) = tasks.resolved(ray, ready)
        index = refs[ready[0]]
        metas[index] = meta
        done_bytes += parts[index].bytes
        if progress is not None:
            progress(int(meta["sequences"]), int(meta["tokens"]), done_bytes, total)
    return [metas[i] for i in range(len(parts))], len(kept)


def _warm_writers(ray: Any, job: Job, parts: int) -> list[Any]:
    """The idle workers load the row kernels while this process plans: every worker the part
    tasks used, as any of them may get a shard."""
    count = min(parts, int(ray.cluster_resources().get("CPU", 1)))
    warm = ray.remote(tasks.warm_writer).options(max_retries=0, num_cpus=1)
    dtype = ids_dtype(job.setup.vocab_size).name
    return [warm.remote(dtype) for _ in range(count)]


def warm_planner(settings: PlanSettings, grouped: bool) -> None:
    """The planner's kernels loaded (Numba, from its cache) while the tasks read: the plan
    runs alone between the two rounds of tasks, with every worker idle. `grouped`: with
    --group-by."""
    if is_custom(settings.algorithm):
        return  # a user's strategy is called once, on the real lengths
    lengths = np.minimum(np.arange(1, 9, dtype=np.int64), settings.seq_len)
    groups = np.zeros(len(lengths), dtype=np.int32) if grouped else None
    plan_window(lengths, settings, 0, True, groups)
    if settings.max_per_row is not None:
        uncapped_rows(lengths, settings, groups)


def _write_shards(
    ray: Any, job: Job, plan: Any, part_tokens: list[int], part_counts: np.ndarray | None, tags: Any = None
) -> list[dict[str, Any]]:
    opts = job.opts
    rows = job.rows_per_shard
    count = (plan.n_rows + rows - 1) // rows
    shard_job = tasks.ShardJob(
        part_dirs=[str(tasks.part_path(job.spill_dir, i)) for i in range(len(part_tokens))],
        part_tokens=part_tokens,
        plan=plan,
        order=plan.row_order(),
        fmt=opts.format,
        seq_len=opts.seq_len,
        rows_per_shard=rows,
        vocab_size=job.setup.vocab_size,
        pad_id=job.setup.pad_id,
        output=job.remote.url if job.remote is not None else str(job.out_dir),
        ledger=str(Path(job.spill_dir) / tasks.LEDGER_DIR),
        multiple=opts.pad_multiple,
        part_counts=part_counts,
        tags=tags,
    )
    shared = ray.put(shard_job)
    remote = ray.remote(tasks.write_shard).options(max_retries=tasks.MAX_RETRIES, num_cpus=1)
    return tasks.resolved(ray, [remote.remote(shared, i, str(job.spill_dir)) for i in range(count)])


def _merged_counts(metas: list[dict[str, Any]]) -> IngestCounts:
    total = IngestCounts()
    for meta in metas:
        for key, value in meta["counts"].items():
            if isinstance(value, list):  # examples, in input order, as many as one engine keeps
                getattr(total, key).extend(value[: max(0, UNLEARNED_EXAMPLES - len(getattr(total, key)))])
            else:
                setattr(total, key, getattr(total, key) + int(value))
    return total


def _merged_bad(metas: list[dict[str, Any]]) -> BadRecordCounts:
    """The parts' tallies, in input order: the first examples are the local engine's first."""
    merged: BadRecordCounts = {"read": 0, "skipped": 0, "by_reason": {}, "examples": []}
    for meta in metas:
        bad = meta["bad"]
        merged["read"] += bad["read"]
        merged["skipped"] += bad["skipped"]
        for reason, n in bad["by_reason"].items():
            merged["by_reason"][reason] = merged["by_reason"].get(reason, 0) + n
        merged["examples"].extend(bad["examples"])
    merged["examples"] = merged["examples"][: BadRecords.max_examples]
    return merged


# ----------------------------------------------------------------------------- a mixture's sources


def read_sources(opts: PackOptions, request: SourcesToRead, progress: Progress | None) -> list[SourceRead]:
    """A mixture's sources read by one task per part of each, into side spills under
    `request.directory`; a resumed run keeps the complete parts. The parts' group tables
    merged in order give the ids one reader of everything gives."""
    ray, started = tasks.connect(opts.ray_address, opts.workers)
    try:
        return _read_sources(ray, opts, request, progress)
    finally:
        if started:
            ray.shutdown()


def _read_sources(ray: Any, opts: PackOptions, request: SourcesToRead, progress: Progress | None) -> list[SourceRead]:
    from packcli.engine.sources import complete_sides, side_dir

    sources, sides, directory = request.sources, request.sides, request.directory
    run_id, fingerprint = request.run_id, request.fingerprint
    directory.mkdir(parents=True, exist_ok=True)
    tasks.remove_attempts(directory)
    remote = ray.remote(tasks.spill_source_part).options(max_retries=tasks.MAX_RETRIES, num_cpus=1)
    plan: list[tuple[int, int, dict[str, Path]]] = []  # (source, part, side dirs)
    records: dict[int, dict[str, dict[str, Any]]] = {}
    refs = {}
    for i, (_, own, paths, backend) in enumerate(sources):
        if own.input_kind in ("text", "prompt") and backend in ("hf", "tiktoken"):
            own = replace(own, tokenizer_backend=backend)  # what the driver chose, as one run
        for p, part in enumerate(tasks.split_inputs(paths, PART_BYTES)):
            dirs = {side: side_dir(directory, i, side, p) for side in sides}
            index = len(plan)
            plan.append((i, p, dirs))
            found = complete_sides(dirs, run_id) if opts.resume else None
            if found is not None:
                records[index] = {side: spill.meta for side, spill in found.items()}
                for spill in found.values():
                    spill.close()
                continue
            named = {side: str(d) for side, d in dirs.items()}
            refs[remote.remote(own, part, named, str(directory), index, run_id, fingerprint)] = index
    pending = list(refs)
    while pending:
        ready, pending = ray.wait(pending, num_returns=1)
        (done,) = tasks.resolved(ray, ready)
        records[refs[ready[0]]] = done
        if progress is not None:
            meta = next(iter(done.values()))
            progress(int(meta["counts"]["sequences_in"]), int(meta["counts"]["tokens_in"]), 0, None)
    return _joined_sources(opts, sources, sides, plan, records)


def _joined_sources(
    opts: PackOptions,
    sources: list[tuple[str, PackOptions, list[str], str]],
    sides: tuple[str, ...],
    plan: list[tuple[int, int, dict[str, Path]]],
    records: dict[int, dict[str, dict[str, Any]]],
) -> list[SourceRead]:
    """Each source's parts as one SourceRead: documents numbered on from part to part,
    tallies added up, group ids mapped into one table merged in input order."""
    from packcli.engine.sources import Side, SourceRead, merged_bad, merged_counts

    remaps: list[np.ndarray | None] = [None] * len(plan)
    merged_table = None
    if opts.group_by is not None:
        merged_table, found = merge_tables(
            [GroupTable.from_dict(records[k][sides[0]]["groups"]) for k in range(len(plan))]
        )
        remaps = list(found)
    reads = []
    for i, (name, own, paths, _) in enumerate(sources):
        mine = [k for k, (source, _, _) in enumerate(plan) if source == i]
        joined = {}
        for side in sides:
            metas = [records[k][side] for k in mine]
            documents = [int(m["documents"]) for m in metas]
            bases = [0, *np.cumsum(documents)[:-1].tolist()]
            parts = [Spill.open(plan[k][2][side]) for k in mine]
            counts = merged_counts([IngestCounts(**m["counts"]) for m in metas])
            kept = sum(int(m["kept"]) for m in metas)
            joined[side] = Side(parts, bases, counts, sum(documents), kept, [remaps[k] for k in mine])
        bad = merged_bad([records[k][sides[0]]["bad"] for k in mine])
        groups = None if merged_table is None else merged_table.to_dict()
        reads.append(SourceRead(name, own.input_kind, paths, bad, joined, groups))
    return reads
