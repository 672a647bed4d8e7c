"""Benchmark: start-up of `packcli pack` on a five-document file, warm start-up cache.

    python scripts/bench_startup.py [--tokenizer bench-out/qwen-tokenizer] [--repeats 7]

Times, in the same run and interleaved (the machine may be shared), the best of
`--repeats` wall times of

- baseline: `python -c "import numpy, pyarrow, numba, tokenizers"`, the libraries any run
  of packcli needs at least;
- warm: `python -m packcli pack five.jsonl --tokenizer T --seq-len 512` with the start-up
  cache filled by one run before;
- cold: the same with `--no-cache`;
- before (with `--before DIR`): warm, with the packcli of another checkout (e.g. a
  `git archive` of an earlier commit), so that a change is measured under the same load,

and prints warm / baseline and cold / baseline, by wall time and by CPU time (user +
system of the child; steadier on a shared machine). Then `python -X importtime` of one
warm run, summed by top-level package, shows where the import time goes, and numba's
cache log (`NUMBA_DEBUG_CACHE`) counts the compiled kernels one warm run loads.

The children run with bytecode caching on (`PYTHONDONTWRITEBYTECODE` removed, packcli
compiled first), as an installed package runs: without it every packcli module is
compiled from source on each start, about 0.4 s on a loaded 2-core machine. They run in
the temporary directory: `python -m` puts the working directory first on sys.path, and a
packcli there would shadow PYTHONPATH's.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BASELINE = "import numpy, pyarrow, numba, tokenizers"


def five_documents(path: Path) -> Path:
    texts = [
        "The quick brown fox jumps over the lazy dog. " * 20,
        "def f(x):\n    return x * 2\n" * 30,
        "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May.",
        "日本語のテキスト、中文文本。한국어 텍스트 " * 10,
        "A short one.",
    ]
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
    return path


def timed(cmd: list[str], env: dict) -> tuple[float, float]:
    """Wall seconds and CPU seconds (user + system) of one run of cmd."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(
        cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=env["PACKCLI_CACHE_DIR"]
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def kernels_loaded(cmd: list[str], env: dict) -> list[str]:
    """The compiled kernels (cache entries) one run loads, from numba's cache log."""
    result = subprocess.run(
        cmd,
        env={**env, "NUMBA_DEBUG_CACHE": "1"},
        check=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=env["PACKCLI_CACHE_DIR"],
    )
    lines = result.stdout.decode(errors="replace").splitlines()
    return [line.rsplit("/", 1)[-1].rstrip("'") for line in lines if line.startswith("[cache] data loaded")]


def import_breakdown(cmd: list[str], env: dict, top: int) -> list[tuple[str, float]]:
    """Seconds of import per top-level package, from -X importtime (self times summed)."""
    result = subprocess.run(
        [cmd[0], "-X", "importtime", *cmd[1:]],
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        cwd=env["PACKCLI_CACHE_DIR"],
    )
    totals: dict[str, float] = defaultdict(float)
    for line in result.stderr.decode().splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        self_us, _, name = line[len("import time:") :].split("|")
        totals[name.strip().split(".")[0]] += int(self_us) / 1e6
    return sorted(totals.items(), key=lambda item: -item[1])[:top]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokenizer", default=str(ROOT / "bench-out" / "qwen-tokenizer"))
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--before", type=Path, help="another checkout whose packcli is timed warm beside this one")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        corpus = five_documents(work / "five.jsonl")
        (work / "cache").mkdir()
        env = {**os.environ, "PACKCLI_CACHE_DIR": str(work / "cache"), "PYTHONPATH": str(ROOT)}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        pack = [sys.executable, "-m", "packcli", "pack", str(corpus), "--tokenizer", args.tokenizer]
        pack += ["--seq-len", "512", "-o", str(work / "out"), "--overwrite"]
        commands = {"baseline": [sys.executable, "-c", BASELINE], "warm": pack, "cold": [*pack, "--no-cache"]}
        envs = dict.fromkeys(commands, env)
        if args.before:
            commands["before"], envs["before"] = pack, {**env, "PYTHONPATH": str(args.before.resolve())}
        for name in ("warm", "before"):
            if name in commands:
                compileall.compile_dir(envs[name]["PYTHONPATH"] + "/packcli", quiet=1)
                timed(pack, envs[name])  # fills the cache (and numba's)
        best = {name: [float("inf"), float("inf")] for name in commands}
        for _ in range(args.repeats):
            for name, cmd in commands.items():
                best[name] = [min(old, new) for old, new in zip(best[name], timed(cmd, envs[name]))]
        load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
        print(f"# {os.cpu_count()} cores, best of {args.repeats}, tokenizer {args.tokenizer}, load average {load}")
        wall, cpu = best["baseline"]
        print(f'baseline `python -c "{BASELINE}"`: {wall:.2f} s wall, {cpu:.2f} s CPU')
        labels = {"warm": "warm cache", "cold": "cold cache", "before": f"warm cache, {args.before}"}
        for name in ("warm", "cold", "before"):
            if name in best:
                w, c = best[name]
                print(
                    f"pack, {labels[name]}: {w:.2f} s wall = {w / wall:.2f}x, {c:.2f} s CPU = {c / cpu:.2f}x the baseline"
                )
        loaded = kernels_loaded(pack, env)
        print(f"compiled kernels loaded by one warm run: {len(loaded)} ({', '.join(loaded)})")
        print("import time of one warm run, by top-level package (self times summed):")
        for package, seconds in import_breakdown(pack, env, 12):
            print(f"  {package:24} {seconds:.3f} s")


if __name__ == "__main__":
    main()
