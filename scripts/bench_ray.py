"""Benchmark `--engine ray` against `--engine local` on one machine: the ratio of their
tokens/s (the overhead bound of the Ray engine; target: at least 0.8x).

    python scripts/bench_ray.py --tokenizer bench-out/qwen-tokenizer          # ~8M tokens, 2 rounds
    python scripts/bench_ray.py --quick                                       # ~1M tokens, 1 round

Corpus (a temporary directory): GSM8K train documents (question + "\\n" + answer) from
../shared/data, repeated in a fixed shuffled order into `--files` JSONL files until the
corpus holds about `--tokens` whitespace words. Every configuration is its own
`python -m packcli pack` subprocess, wall time measured around it; tokens/s is the
report's real tokens over that time. Configurations run interleaved in rounds and each
keeps its best time (the machine may be shared). Every process runs with bytecode
caching on (`PYTHONDONTWRITEBYTECODE` removed), as an installed package does.

- local: `--engine local` (all cores).
- ray, running cluster: `--engine ray --ray-address ADDR`, a cluster this script starts once
  with `ray.init(num_cpus=cores)`: what a user with a cluster up sees.
- ray, own cluster: `--engine ray` starting and stopping its local cluster in the run
  (start-up counted; it dominates small corpora).

CPU seconds (the best run's, shown beside each configuration, with psutil installed) add
up the pack command and everything under it, and for the running cluster the cluster's
processes too: what the machine spent, which a shared machine does not blur as it does
wall time. The 1-minute load average before and after is printed with them.

`--plan-sequences N` also measures the driver's memory for a plan of N sequences (the
model of docs/scale-out.md): `plan_window` plus the row order the shard tasks get, traced
with tracemalloc (NumPy reports its buffers to it), in bytes per sequence.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
TARGET = 0.8  # the Ray engine's tokens/s over the local engine's, on one machine


def documents() -> list[str]:
    path = DATA / "gsm8k_train.jsonl"
    if not path.is_file():
        sys.exit(f"{path} is missing: the benchmark needs the shared GSM8K corpus")
    docs = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            record = json.loads(line)
            docs.append(record["question"] + "\n" + record["answer"])
    return docs


def build_corpus(where: Path, words: int, files: int) -> Path:
    docs = documents()
    random.Random(0).shuffle(docs)
    corpus = where / "corpus"
    corpus.mkdir()
    per_file = words // files
    index = 0
    for n in range(files):
        written = 0
        with open(corpus / f"part-{n:03d}.jsonl", "w", encoding="utf-8") as f:
            while written < per_file:
                text = docs[index % len(docs)]
                index += 1
                f.write(json.dumps({"text": text}) + "\n")
                written += len(text.split())
    return corpus


class ClusterCpu:
    """CPU seconds the processes under this one (the Ray cluster this script started, and its
    workers) use over a span, sampled: a worker that exits keeps its last sample. None
    without psutil."""

    def __init__(self) -> None:
        self.psutil: Any = None
        try:
            import psutil
        except ImportError:
            return
        self.psutil, self.stop = psutil, threading.Event()
        self.exclude: int | None = None
        self.base = self.sample()
        self.last = dict(self.base)

    def sample(self) -> dict[int, float]:
        seen: dict[int, float] = {}
        skip: set[int] = set()
        for proc in self.psutil.Process().children(recursive=True):
            try:
                if proc.pid == self.exclude or proc.ppid() in skip:
                    skip.add(proc.pid)  # the pack command: counted from its own usage
                    continue
                times = proc.cpu_times()
                seen[proc.pid] = times.user + times.system
            except self.psutil.Error:
                pass
        return seen

    def __enter__(self) -> ClusterCpu:
        if self.psutil is not None:
            self.thread = threading.Thread(target=self._run, daemon=True)
            self.thread.start()
        return self

    def _run(self) -> None:
        while not self.stop.wait(0.2):
            self.last.update(self.sample())

    def __exit__(self, *exc: object) -> None:
        if self.psutil is not None:
            self.stop.set()
            self.thread.join()
            self.last.update(self.sample())

    def seconds(self) -> float | None:
        if self.psutil is None:
            return None
        return sum(cpu - self.base.get(pid, 0.0) for pid, cpu in self.last.items())


def run(corpus: Path, out: Path, tokenizer: str, extra: list[str]) -> tuple[float, float | None, dict]:
    """Wall seconds, CPU seconds (the command's own, its children's, and this script's
    cluster's) and the report of one pack."""
    command = [sys.executable, "-m", "packcli", "pack", str(corpus), "-o", str(out), "--overwrite"]
    command += ["--tokenizer", tokenizer, "--seq-len", "2048", "--json", *extra]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with ClusterCpu() as cluster:
        start = time.perf_counter()
        child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        cluster.exclude = child.pid
        stdout, stderr = child.communicate()
        seconds = time.perf_counter() - start
    if child.returncode != 0:
        sys.exit(f"{' '.join(command)} failed:\n{stderr[-3000:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    own = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    in_cluster = cluster.seconds()
    return seconds, None if in_cluster is None else own + in_cluster, json.loads(stdout)


def plan_memory(n: int) -> None:
    import tracemalloc

    import numpy as np

    from packcli.plan.planner import plan_window
    from packcli.plan.settings import PlanSettings

    lengths = np.random.default_rng(0).integers(1, 2048, n).astype(np.int64)
    for mode in ("bin", "concat"):
        settings = PlanSettings(seq_len=2048, mode=mode, shuffle=True)
        plan_window(lengths[:1000], settings, 0, True)  # compiled before it is measured
        tracemalloc.start()
        start = time.perf_counter()
        plan = plan_window(lengths, settings, 0, True)
        order = np.argsort(plan.row, kind="stable")
        seconds = time.perf_counter() - start
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        held = sum(a.nbytes for a in (plan.piece_start, plan.piece_len, plan.source, plan.row, plan.offset, order))
        print(
            f"plan {mode}: {n:,} sequences, {len(plan.row):,} pieces: {held / n:.1f} bytes/sequence held, "
            f"{peak / n:.1f} at peak (+8 for the lengths), {seconds:.1f} s"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokenizer", default="packcli:demo")
    parser.add_argument("--tokens", type=float, default=8e6, help="about this many words in the corpus")
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="~1M words, 1 round")
    parser.add_argument("--no-own-cluster", action="store_true", help="skip the run that starts its own cluster")
    parser.add_argument("--plan-sequences", type=float, default=0, help="also measure a plan of this many sequences")
    args = parser.parse_args()
    if args.plan_sequences:
        sys.path.insert(0, str(ROOT))
        plan_memory(int(args.plan_sequences))
    if args.quick:
        args.tokens, args.rounds = 1e6, 1
    import ray

    cores = os.cpu_count() or 1
    # The cluster's workers import this tree's packcli, as the pack commands do (not an
    # installed copy that a different checkout may hold).
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    # Every process (pack commands, the cluster's workers) keeps compiled bytecode, as an
    # installed package does; otherwise each Ray worker compiles packcli from source.
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    ray.init(num_cpus=cores, include_dashboard=False, log_to_driver=False)
    address = ray.get_runtime_context().gcs_address
    configs = {
        "local": ["--engine", "local"],
        "ray, running cluster": ["--engine", "ray", "--ray-address", address],
    }
    if not args.no_own_cluster:
        configs["ray, own cluster"] = ["--engine", "ray", "--workers", str(cores)]
    best: dict[str, float] = {}
    cpu: dict[str, list[float]] = {name: [] for name in configs}
    tokens = 0
    load_before = os.getloadavg()[0]
    try:
        with tempfile.TemporaryDirectory(prefix="bench-ray-") as tmp:
            corpus = build_corpus(Path(tmp), int(args.tokens), args.files)
            for _ in range(args.rounds):
                for name, extra in configs.items():
                    seconds, cpu_seconds, report = run(corpus, Path(tmp) / "out", args.tokenizer, extra)
                    tokens = report["real_tokens"]
                    best[name] = min(best.get(name, seconds), seconds)
                    if cpu_seconds is not None:
                        cpu[name].append(cpu_seconds)
    finally:
        ray.shutdown()
    local_rate = tokens / best["local"]
    print(f"{tokens:,} tokens, {args.files} files, {cores} cores, best of {args.rounds}")
    print(f"1-minute load average: {load_before:.2f} before, {os.getloadavg()[0]:.2f} after")
    for name, seconds in best.items():
        rate = tokens / seconds
        spent = f"  {min(cpu[name]):6.1f} CPU s" if cpu[name] else ""
        print(f"  {name:<22} {seconds:8.1f} s  {rate:12,.0f} tokens/s  {rate / local_rate:5.2f}x local{spent}")
    ratio = best["local"] / best["ray, running cluster"]
    verdict = "met" if ratio >= TARGET else "not met"
    print(f"ray (running cluster) / local tokens/s: {ratio:.2f}x (target {TARGET:.2f}x: {verdict})")


if __name__ == "__main__":
    main()
