"""The shared runner: every benchmark is a list of cases it runs here, the same way.

A case is one command, built for a program (its `packcli`, or its interpreter running a
small entry from benchmarks/entries). The runner runs every case for every program in
rounds, the programs' order reversed from one round to the next (new, old, then old,
new), so that neither always runs first or in the same phase of a noisy machine. Each run
is a subprocess started through the launcher (launch.py), which gives its wall time, CPU
time and peak RSS; a case adds figures of its own, read from the command's JSON output
or from what the run left (`after`). Over the rounds each figure keeps its best and its
worst; the spread between them is the noise a comparison must beat.

Compared (two programs), a figure is flagged when the new program's best is worse than
the old one's worst (`worse`), or past a bound the case states. Alone (one program), a
benchmark prints its ratios: a figure over a baseline case measured in the same rounds.
Each benchmark run writes one JSON record (`record`), naming the commit measured and
the commit it was compared with.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.programs import Program

LAUNCH = Path(__file__).resolve().with_name("launch.py")
ENTRIES = Path(__file__).resolve().with_name("entries")
NOT_APPLICABLE = 3  # the exit code of an entry that finds no API to measure in its program
LOWER, HIGHER = "lower", "higher"
# The figures of every run, and which way is better.
STANDARD = {"wall_s": LOWER, "cpu_s": LOWER, "peak_rss_mb": LOWER}
UNITS = {"_s": "s", "_mb": "MB", "_ms": "ms", "_ns": "ns"}


@dataclass
class Case:
    """One command to measure, for each program.

    `command(program, scratch)` gives the argv; `scratch` is a directory of the case's own
    for that program, whose `out` entry the runner removes before every run. `figures`
    names the figures of the command's JSON output (or of `after`) to compare beside the
    standard ones, each `LOWER` or `HIGHER` (better). `before` runs untimed ahead of every
    run; `after(program, scratch, figures)` runs untimed after it and returns more figures.
    A `baseline` case measures no packcli (a copy, another library): it gives the ratios
    of a run alone and is left out of a comparison. `bounds` caps a figure's new/old ratio
    (e.g. {"peak_rss_mb": 1.1}). `warmup` runs the command once, unmeasured, before the
    rounds (Numba's compile, the start-up cache). `tree` also samples the PSS of the
    process tree (`tree_pss_mb`), for commands with worker processes. `env` is added to
    the program's environment."""

    name: str
    command: Callable[[Program, Path], list[str]]
    figures: dict[str, str] = field(default_factory=dict)
    baseline: bool = False
    before: Callable[[Program, Path], None] | None = None
    after: Callable[[Program, Path, dict[str, float]], dict[str, float]] | None = None
    bounds: dict[str, float] = field(default_factory=dict)
    warmup: bool = True
    tree: bool = False
    env: dict[str, str] = field(default_factory=dict)

    def directions(self) -> dict[str, str]:
        extra = {"tree_pss_mb": LOWER} if self.tree else {}
        return {**STANDARD, **extra, **self.figures}


@dataclass(frozen=True)
class Ratio:
    """A figure of one case over a figure of another (or the figure alone, without a
    denominator), from the bests of the same program's rounds, with an optional target
    such as (">=", 0.5)."""

    label: str
    numerator: tuple[str, str]  # (case, figure)
    denominator: tuple[str, str] | None = None
    target: tuple[str, float] | None = None


@dataclass
class Benchmark:
    """What a benchmark function returns: its cases, its ratios, lines describing its inputs."""

    name: str
    cases: list[Case]
    ratios: list[Ratio] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    repeats: int = 3


@dataclass(frozen=True)
class Summary:
    """A figure over the runs: the best, the worst, and which way is better."""

    best: float
    worst: float
    direction: str
    runs: int

    @property
    def spread(self) -> float:
        """The worst run's distance from the best, relative to the best."""
        return abs(self.worst - self.best) / abs(self.best) if self.best else 0.0


def summarize(values: Sequence[float], direction: str) -> Summary:
    """The best and worst of a figure's values, by its direction."""
    low, high = min(values), max(values)
    best, worst = (low, high) if direction == LOWER else (high, low)
    return Summary(best, worst, direction, len(values))


def worse(new: Summary, old: Summary, bound: float | None = None) -> str | None:
    """Why the new figure is worse than noise allows, or None: its best is worse than the
    old figure's worst (every new run worse than every old one), or the ratio of the bests
    is past `bound` (new/old for a figure where lower is better, old/new otherwise)."""
    lower = new.direction == LOWER
    if (new.best > old.worst) if lower else (new.best < old.worst):
        return "new best worse than old worst"
    if bound is not None and new.best and old.best:
        ratio = new.best / old.best if lower else old.best / new.best
        if ratio > bound:
            return f"past the bound {bound:g}x"
    return None


def schedule(cases: Sequence[Case], programs: Sequence[Program], repeats: int) -> Iterator[tuple[int, Case, Program]]:
    """(round, case, program) in the order they run: every case for every program in each
    round, the programs' order reversed from one round to the next."""
    for round_no in range(repeats):
        order = list(programs) if round_no % 2 == 0 else list(reversed(programs))
        for case in cases:
            for program in order:
                yield round_no, case, program


def flatten(value: Any, prefix: str = "") -> dict[str, float]:
    """The numbers of a JSON value, by dotted name (booleans as 0 or 1)."""
    if isinstance(value, bool):
        return {prefix: float(value)}
    if isinstance(value, (int, float)):
        return {prefix: float(value)}
    if isinstance(value, dict):
        found: dict[str, float] = {}
        for key, item in value.items():
            found.update(flatten(item, f"{prefix}.{key}" if prefix else str(key)))
        return found
    return {}


def parse_output(text: str) -> dict[str, Any]:
    """The JSON object a command printed: its whole output, else its last line that is one."""
    text = text.strip()
    if not text:
        return {}
    try:
        value = json.loads(text)
        return value if isinstance(value, dict) else {}
    except ValueError:
        pass
    for line in reversed(text.splitlines()):
        if line.startswith("{"):
            try:
                value = json.loads(line)
            except ValueError:
                continue
            return value if isinstance(value, dict) else {}
    return {}


class Failed(Exception):
    """A run that did not measure: `not_applicable` when the program lacks what it needs."""

    def __init__(self, reason: str, not_applicable: bool) -> None:
        super().__init__(reason)
        self.reason, self.not_applicable = reason, not_applicable


def tree_pss(root: int) -> int:
    """PSS in bytes of a process and all its descendants, from /proc: forked workers share
    their parent's pages, which an RSS sum would count once per process."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:
                    stat = f.read()
            except OSError:
                continue
            children.setdefault(int(stat[stat.rindex(b")") + 2 :].split()[1]), []).append(int(entry))
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        todo.extend(children.get(pid, ()))
        try:
            with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
                for line in f:
                    if line.startswith(b"Pss:"):
                        total += int(line.split()[1]) * 1024
                        break
        except OSError:
            pass
    return total


def measure(command: list[str], env: dict[str, str], cwd: Path, logs: Path, tree: bool = False) -> dict[str, float]:
    """Run `command` once through the launcher: its standard figures and those of its JSON
    output. Raises Failed when it exits non-zero (NOT_APPLICABLE: the entry's reason)."""
    logs.mkdir(parents=True, exist_ok=True)
    result = logs / "launch.json"
    result.unlink(missing_ok=True)
    stdout, stderr = logs / "stdout", logs / "stderr"
    with open(stdout, "wb") as out, open(stderr, "wb") as err:
        # a session of its own: stopping the harness ends the command and its workers too
        process = subprocess.Popen(
            [sys.executable, "-I", "-S", str(LAUNCH), str(result), *command],
            env=env,
            cwd=cwd,
            stdout=out,
            stderr=err,
            start_new_session=True,
        )
        peak = [0]
        done = threading.Event()

        def sample() -> None:
            while not done.wait(0.05):
                peak[0] = max(peak[0], tree_pss(process.pid))

        sampler = threading.Thread(target=sample, daemon=True)
        if tree:
            sampler.start()
        try:
            process.wait()
        except BaseException:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            raise
        finally:
            done.set()
            if tree:
                sampler.join()
    output = stdout.read_text(errors="replace")
    if not result.is_file():
        raise Failed(last_line(stderr.read_text(errors="replace")) or "the launcher failed", False)
    usage = json.loads(result.read_text())
    printed = parse_output(output)
    if usage.pop("exit") != 0:
        if "n/a" in printed:
            raise Failed(str(printed["n/a"]), True)
        raise Failed(last_line(stderr.read_text(errors="replace")) or f"exit status, output: {output[-200:]}", False)
    figures = flatten(printed)
    figures.update(usage)
    if tree:
        figures["tree_pss_mb"] = peak[0] / 2**20
    return figures


def last_line(text: str) -> str:
    """The last line of an error output that says something: a CLI's boxed message without
    its frame."""
    for line in reversed(text.splitlines()):
        said = line.strip().strip("│╭╮╰╯─ ").strip()
        if any(c.isalnum() for c in said):
            return said[:300]
    return ""


@dataclass
class Outcome:
    """A case's runs for one program, or why it has none."""

    runs: list[dict[str, float]] = field(default_factory=list)
    reason: str | None = None  # set when the case could not run for this program
    not_applicable: bool = False

    def summary(self, name: str, direction: str) -> Summary | None:
        values = [run[name] for run in self.runs if name in run]
        return summarize(values, direction) if values else None


class Runner:
    """Runs benchmarks for one program (ratios to baselines) or two (new against old)."""

    def __init__(
        self,
        programs: Sequence[Program],
        work: Path,
        records: Path,
        log: Callable[..., None] = print,
        warmup: bool = True,
    ):
        """`warmup=False` skips every case's unmeasured first run (a smoke run, whose one
        round only has to complete)."""
        self.programs = list(programs)
        self.work, self.records, self.log = work, records, log
        self.warmup = warmup

    @property
    def comparing(self) -> bool:
        return len(self.programs) > 1

    def scratch(self, case: Case, program: Program) -> Path:
        return self.work / case.name / program.label

    def run_once(self, case: Case, program: Program, round_no: int | str) -> dict[str, float]:
        scratch = self.scratch(case, program)
        scratch.mkdir(parents=True, exist_ok=True)
        remove(scratch / "out")
        if case.before is not None:
            case.before(program, scratch)
        command = case.command(program, scratch)
        env = {**program.environ(self.work / "caches" / program.label), **case.env}
        figures = measure(command, env, scratch, scratch / "logs" / str(round_no), case.tree)
        if case.after is not None:
            figures.update(case.after(program, scratch, figures))
        return figures

    def run(self, benchmark: Benchmark, repeats: int | None = None, argv: Sequence[str] = ()) -> dict[str, Any]:
        """Measure every case, print the figures (compared, or as ratios), write the record."""
        repeats = repeats or benchmark.repeats
        cases = [c for c in benchmark.cases if not (self.comparing and c.baseline)]
        outcomes = {(c.name, p.label): Outcome() for c in cases for p in self.programs}
        load = [os.getloadavg()[0]]
        self.log(f"\n## {benchmark.name}: {len(cases)} cases, {repeats} round(s)", flush=True)
        for note in benchmark.notes:
            self.log(f"   {note}")
        for case in cases:
            for program in self.programs:
                if case.warmup and self.warmup:
                    self.attempt(case, program, outcomes[(case.name, program.label)], "warmup")
        order = []
        for round_no, case, program in schedule(cases, self.programs, repeats):
            outcome = outcomes[(case.name, program.label)]
            if outcome.reason is None:
                order.append([round_no, case.name, program.label])
                self.attempt(case, program, outcome, round_no)
        load.append(os.getloadavg()[0])
        for case in cases:
            for program in self.programs:
                remove(self.scratch(case, program) / "out")
        record = self.record(benchmark, cases, outcomes, repeats, order, load, argv)
        self.print_record(record)
        self.records.mkdir(parents=True, exist_ok=True)
        stamp = record["date"].replace(":", "").replace("-", "")[:15]
        versus = f"-vs-{record['compared_with'][:10]}" if record["compared_with"] else ""
        path = self.records / f"{benchmark.name}-{stamp}-{record['commit'][:10]}{versus}.json"
        path.write_text(json.dumps(record, indent=1) + "\n")
        self.log(f"   record: {path}")
        return record

    def attempt(self, case: Case, program: Program, outcome: Outcome, round_no: int | str) -> None:
        """One run into `outcome`; a failure ends the case for that program, with its reason."""
        try:
            figures = self.run_once(case, program, round_no)
        except Failed as failure:
            outcome.reason, outcome.not_applicable = failure.reason, failure.not_applicable
            return
        if round_no != "warmup":
            outcome.runs.append(figures)

    def record(
        self,
        benchmark: Benchmark,
        cases: list[Case],
        outcomes: dict[tuple[str, str], Outcome],
        repeats: int,
        order: list[list[Any]],
        load: list[float],
        argv: Sequence[str],
    ) -> dict[str, Any]:
        """The JSON record of a benchmark run: inputs, every run's figures, the summaries,
        the ratios, the flags, and which commits were measured and compared."""
        new = self.programs[0]
        old = self.programs[1] if self.comparing else None
        record: dict[str, Any] = {
            "benchmark": benchmark.name,
            "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "commit": new.commit,
            "compared_with": old.commit if old else None,
            "baselines": "compared with the commit above" if old else "baseline cases measured in the same rounds",
            "programs": {
                p.label: {"commit": p.commit, "prefix": str(p.prefix), "extras": list(p.extras)} for p in self.programs
            },
            "machine": {
                "cores": os.cpu_count(),
                "platform": platform.platform(),
                "python": platform.python_version(),
                "load_average": load,
            },
            "command": list(argv),
            "repeats": repeats,
            "warmup": self.warmup,
            "notes": benchmark.notes,
            "order": order,
            "cases": {},
            "ratios": [],
            "flags": [],
        }
        for case in cases:
            entry: dict[str, Any] = {"directions": case.directions(), "programs": {}}
            for program in self.programs:
                outcome = outcomes[(case.name, program.label)]
                summaries = {
                    name: summary.__dict__
                    for name, direction in case.directions().items()
                    if (summary := outcome.summary(name, direction)) is not None
                }
                entry["programs"][program.label] = {
                    "runs": outcome.runs,
                    "summary": summaries,
                    "reason": outcome.reason,
                    "not_applicable": outcome.not_applicable,
                }
            record["cases"][case.name] = entry
            if old is not None:
                for name, direction in case.directions().items():
                    a = outcomes[(case.name, new.label)].summary(name, direction)
                    b = outcomes[(case.name, old.label)].summary(name, direction)
                    if a and b and (why := worse(a, b, case.bounds.get(name))):
                        record["flags"].append({"case": case.name, "figure": name, "rule": why})
        for ratio in benchmark.ratios:
            for program in self.programs:
                value = ratio_value(ratio, outcomes, program.label, {c.name: c for c in cases})
                if value is not None:
                    met = None if ratio.target is None else meets(value, ratio.target)
                    record["ratios"].append(
                        {
                            "label": ratio.label,
                            "program": program.label,
                            "value": value,
                            "target": ratio.target,
                            "met": met,
                        }
                    )
        return record

    def print_record(self, record: dict[str, Any]) -> None:
        labels = list(record["programs"])
        flagged = {(f["case"], f["figure"]): f["rule"] for f in record["flags"]}
        for name, case in record["cases"].items():
            for label in labels:
                got = case["programs"][label]
                if got["reason"] is not None and not got["runs"]:
                    which = "REF" if label != labels[0] else "this tree"
                    kind = "n/a" if got["not_applicable"] or label != labels[0] else "FAILED"
                    self.log(f"   {name}: {kind} for {which}: {got['reason']}")
            if not self.comparing:
                got = case["programs"][labels[0]]
                if got["runs"]:
                    cells = [
                        f"{figure} {show(s['best'], figure)} ({spread(s)})" for figure, s in got["summary"].items()
                    ]
                    self.log(f"   {name:<22} " + ", ".join(cells))
                continue
            new, old = (case["programs"][label] for label in labels)
            if not (new["runs"] and old["runs"]):
                continue
            for figure in case["directions"]:
                a, b = new["summary"].get(figure), old["summary"].get(figure)
                if a is None or b is None:
                    continue
                ratio = a["best"] / b["best"] if b["best"] else float("nan")
                flag = f"  WORSE: {flagged[(name, figure)]}" if (name, figure) in flagged else ""
                self.log(
                    f"   {name:<22} {figure:<18} new/old {ratio:6.3f}   new {show(a['best'], figure)} ({spread(a)})"
                    f"   old {show(b['best'], figure)} ({spread(b)}){flag}"
                )
        for ratio in record["ratios"]:
            target = ratio["target"]
            verdict = (
                "" if target is None else f"  target {target[0]} {target[1]:g}: {'met' if ratio['met'] else 'MISSED'}"
            )
            who = f" [{ratio['program']}]" if self.comparing else ""
            self.log(f"   {ratio['label']}{who}: {ratio['value']:.3f}{verdict}")


def ratio_value(
    ratio: Ratio, outcomes: dict[tuple[str, str], Outcome], label: str, cases: dict[str, Case]
) -> float | None:
    """The ratio of the two figures' bests in one program's runs, when both were measured."""
    values = []
    for case_name, figure in (ratio.numerator, ratio.denominator or ratio.numerator):
        case = cases.get(case_name)
        outcome = outcomes.get((case_name, label))
        if case is None or outcome is None:
            return None
        summary = outcome.summary(figure, case.directions().get(figure, LOWER))
        if summary is None:
            return None
        values.append(summary.best)
    if ratio.denominator is None:
        return values[0]
    return values[0] / values[1] if values[1] else None


def meets(value: float, target: tuple[str, float]) -> bool:
    op, bound = target
    return {"<=": value <= bound, ">=": value >= bound, "<": value < bound, ">": value > bound}[op]


def show(value: float, figure: str) -> str:
    unit = next((u for suffix, u in UNITS.items() if figure.endswith(suffix)), "")
    text = f"{value:,.0f}" if abs(value) >= 1e4 or (value == int(value) and abs(value) >= 1000) else f"{value:.4g}"
    return f"{text} {unit}".rstrip()


def spread(summary: dict[str, Any]) -> str:
    best, worst = summary["best"], summary["worst"]
    return f"±{abs(worst - best) / abs(best):.1%}" if best else "±0"


def remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    elif path.exists() or path.is_symlink():
        path.unlink()
