"""`packcli pack`'s entry: a plain run (engine/local.py, or the Ray engine through it) or
a mixture (engine/mixture.py: several sources, or one input with --holdout)."""

from __future__ import annotations

import time

from packcli.core.options import PackOptions
from packcli.engine.ingest import use_workers
from packcli.engine.job import Progress
from packcli.engine.local import run_pack as run_plain
from packcli.engine.mixture import run_mixture
from packcli.read.inputs import expand_inputs
from packcli.write.manifest import Report


def run_pack(opts: PackOptions, progress: Progress | None = None) -> Report:
    """Pack opts' inputs, or its mixture, into opts.output; returns the report (with
    --holdout, {"splits": {"train": ..., "validation": ...}}). Raises PackcliError."""
    if not opts.mixed:
        return run_plain(opts, progress)
    opts.validate()
    use_workers(opts.workers)
    started = time.perf_counter()
    if opts.engine != "ray":
        return run_mixture(opts, started, progress)
    from packcli.engine.ray_driver import ray_session  # the workers start while this process loads the tokenizer

    paths = [path for source in opts.sources().sources for path in expand_inputs(list(source.paths))]
    with ray_session(opts, paths):
        return run_mixture(opts, started, progress)
