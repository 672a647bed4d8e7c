"""The benchmark runner (benchmarks/runner.py): the order runs alternate in, the best and the
spread of a figure, the rule that flags a figure, the JSON record, and the peak RSS of a
child. Tiny programs, no timing assertions. Then a few benchmarks in their quick mode, end
to end, on generated data and the bundled tokenizer (no shared corpora, no bench extra)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import random_texts, write_jsonl

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.programs import Program
from benchmarks.runner import (
    HIGHER,
    LOWER,
    Benchmark,
    Case,
    Failed,
    Ratio,
    Runner,
    measure,
    schedule,
    summarize,
    worse,
)

MB = 2**20


def program(label: str, commit: str) -> Program:
    return Program(label, Path(sys.prefix), commit)


def printing(figures: dict) -> list[str]:
    return [sys.executable, "-c", f"import json; print(json.dumps({figures!r}))"]


def prints(figures: dict):
    """A case's command that prints these figures, whatever the program."""
    return lambda p, scratch: printing(figures)


def test_rounds_alternate_the_programs_order():
    new, old = program("new", "a"), program("old", "b")
    cases = [Case("x", prints({})), Case("y", prints({}))]
    order = [(r, c.name, p.label) for r, c, p in schedule(cases, [new, old], 3)]
    assert order == [
        (0, "x", "new"), (0, "x", "old"), (0, "y", "new"), (0, "y", "old"),
        (1, "x", "old"), (1, "x", "new"), (1, "y", "old"), (1, "y", "new"),
        (2, "x", "new"), (2, "x", "old"), (2, "y", "new"), (2, "y", "old"),
    ]  # fmt: skip


def test_one_program_runs_every_case_each_round():
    cases = [Case("x", prints({}))]
    assert [r for r, _, _ in schedule(cases, [program("new", "a")], 2)] == [0, 1]


def test_best_and_worst_follow_the_direction():
    lower = summarize([3.0, 2.0, 4.0], LOWER)
    higher = summarize([3.0, 2.0, 4.0], HIGHER)
    assert (lower.best, lower.worst, lower.runs) == (2.0, 4.0, 3)
    assert (higher.best, higher.worst) == (4.0, 2.0)
    assert lower.spread == pytest.approx(1.0)
    assert higher.spread == pytest.approx(0.5)
    assert summarize([5.0], LOWER).spread == 0


def test_a_figure_is_flagged_only_past_the_old_spread():
    old = summarize([10.0, 12.0], LOWER)
    assert worse(summarize([11.0, 13.0], LOWER), old) is None  # overlaps: noise
    assert worse(summarize([12.5, 13.0], LOWER), old) == "new best worse than old worst"
    assert worse(summarize([9.0], LOWER), old) is None
    faster = summarize([100.0, 120.0], HIGHER)
    assert worse(summarize([90.0, 95.0], HIGHER), faster) == "new best worse than old worst"
    assert worse(summarize([110.0], HIGHER), faster) is None


def test_a_bound_flags_a_ratio_inside_the_spread():
    old = summarize([100.0, 130.0], LOWER)
    assert worse(summarize([115.0], LOWER), old) is None
    assert worse(summarize([115.0], LOWER), old, bound=1.1) == "past the bound 1.1x"
    assert worse(summarize([105.0], LOWER), old, bound=1.1) is None
    assert worse(summarize([80.0], HIGHER), summarize([100.0, 70.0], HIGHER), bound=1.2) == "past the bound 1.2x"


def test_peak_rss_is_the_childs_own(tmp_path):
    """A child that fills 200 MB peaks about 200 MB above one that does nothing, and neither
    carries the peak of the process that started it (this one holds 300 MB meanwhile)."""
    held = b"\x01" * (300 * MB)
    idle = measure([sys.executable, "-c", "pass"], {}, tmp_path, tmp_path / "idle")
    filled = measure([sys.executable, "-c", "b = b'\\x01' * (200 << 20)"], {}, tmp_path, tmp_path / "filled")
    assert len(held) == 300 * MB
    assert idle["peak_rss_mb"] < 100
    assert 180 <= filled["peak_rss_mb"] - idle["peak_rss_mb"] <= 230
    assert filled["cpu_s"] >= 0 and filled["wall_s"] > 0


def test_a_command_s_json_figures_are_read_by_dotted_name(tmp_path):
    figures = measure(
        printing({"rows": 7, "timings": {"write": 0.5}, "ok": True, "name": "x"}), {}, tmp_path, tmp_path / "l"
    )
    assert (figures["rows"], figures["timings.write"], figures["ok"]) == (7, 0.5, 1)
    assert "name" not in figures


def test_a_failing_command_and_an_entry_without_its_api(tmp_path):
    with pytest.raises(Failed) as failed:
        measure([sys.executable, "-c", "raise SystemExit('boom')"], {}, tmp_path, tmp_path / "a")
    assert (failed.value.reason, failed.value.not_applicable) == ("boom", False)
    boxed = (
        "import sys; sys.stderr.write('Usage: x\\n╭─ Error ─╮\\n│ No such command.  │\\n╰─────────╯\\n'); sys.exit(2)"
    )
    with pytest.raises(Failed) as failed:
        measure([sys.executable, "-c", boxed], {"PYTHONIOENCODING": "utf-8"}, tmp_path, tmp_path / "c")
    assert failed.value.reason == "No such command."
    entry = "import json, sys; print(json.dumps({'n/a': 'no plan_from_counts'})); sys.exit(3)"
    with pytest.raises(Failed) as failed:
        measure([sys.executable, "-c", entry], {}, tmp_path, tmp_path / "b")
    assert (failed.value.reason, failed.value.not_applicable) == ("no plan_from_counts", True)


def test_a_comparison_writes_one_record_naming_both_commits(tmp_path):
    new, old = program("new", "a" * 40), program("old", "b" * 40)

    def rows(p: Program, scratch: Path) -> list[str]:
        (scratch / "out").mkdir()  # removed by the runner before the next run
        return printing({"rows": 12 if p.label == "new" else 10})

    def lacking(p: Program, scratch: Path) -> list[str]:
        if p.label == "old":
            return [sys.executable, "-c", "import json, sys; print(json.dumps({'n/a': 'no such API'})); sys.exit(3)"]
        return printing({"seconds": 1.0})

    cases = [
        Case("rows", rows, {"rows": LOWER}),
        Case("lacking", lacking, {"seconds": LOWER}),
        Case("baseline", prints({"seconds": 2.0}), {"seconds": LOWER}, baseline=True),
    ]
    lines: list[str] = []
    runner = Runner(
        [new, old], tmp_path / "work", tmp_path / "records", log=lambda *a, **k: lines.append(" ".join(map(str, a)))
    )
    record = runner.run(Benchmark("demo", cases, [Ratio("rows", ("rows", "rows"))]), repeats=2, argv=["x"])
    [path] = (tmp_path / "records").iterdir()
    assert json.loads(path.read_text()) == record
    assert (record["commit"], record["compared_with"]) == ("a" * 40, "b" * 40)
    assert path.name.startswith("demo-") and path.name.endswith(f"-{'a' * 10}-vs-{'b' * 10}.json")
    assert set(record["cases"]) == {"rows", "lacking"}  # a baseline is no comparison
    assert record["order"] == [[0, "rows", "new"], [0, "rows", "old"], [0, "lacking", "new"],
                               [1, "rows", "old"], [1, "rows", "new"], [1, "lacking", "new"]]  # fmt: skip
    got = record["cases"]["rows"]["programs"]
    assert [run["rows"] for run in got["new"]["runs"]] == [12, 12]
    assert got["old"]["summary"]["rows"] == {"best": 10, "worst": 10, "direction": LOWER, "runs": 2}
    assert {"case": "rows", "figure": "rows", "rule": "new best worse than old worst"} in record["flags"]
    lacking_old = record["cases"]["lacking"]["programs"]["old"]
    assert (lacking_old["runs"], lacking_old["reason"], lacking_old["not_applicable"]) == ([], "no such API", True)
    assert "   lacking: n/a for REF: no such API" in lines
    assert any(line.startswith("   rows ") and "WORSE" in line for line in lines)
    assert [(r["program"], r["value"]) for r in record["ratios"]] == [("new", 12), ("old", 10)]
    assert not (tmp_path / "work" / "rows" / "new" / "out").exists()


def test_alone_a_benchmark_gives_its_ratios_to_baselines(tmp_path):
    cases = [
        Case("baseline", prints({"seconds": 2.0}), {"seconds": LOWER}, baseline=True),
        Case("work", prints({"seconds": 1.0}), {"seconds": LOWER}),
    ]
    ratios = [Ratio("speed over the baseline's", ("baseline", "seconds"), ("work", "seconds"), (">=", 1.5))]
    runner = Runner([program("new", "c" * 40)], tmp_path / "work", tmp_path / "records", log=lambda *a, **k: None)
    record = runner.run(Benchmark("alone", cases, ratios), repeats=1)
    assert record["compared_with"] is None
    assert record["ratios"] == [
        {"label": "speed over the baseline's", "program": "new", "value": 2.0, "target": (">=", 1.5), "met": True}
    ]
    assert record["flags"] == []


def test_a_smoke_run_skips_the_warmup(tmp_path):
    runs = tmp_path / "runs"
    case = Case("c", lambda p, s: [sys.executable, "-c", f"open({str(runs)!r}, 'a').write('x')"])
    for warmup, expected in ((True, "xx"), (False, "x")):
        runs.unlink(missing_ok=True)
        runner = Runner([program("new", "d" * 40)], tmp_path / "w", tmp_path / "r", lambda *a, **k: None, warmup)
        assert runner.run(Benchmark("smoke", [case]), repeats=1)["warmup"] is warmup
        assert runs.read_text() == expected


QUICK = ["startup", "verify", "pack-pairs"]


def test_some_benchmarks_run_in_their_quick_mode(tmp_path):
    """Three benchmarks end to end (seconds each): the CLI, entries as cases and after a run,
    outputs packed by the program, inputs built from the corpora (a generated GSM8K here).
    The others share their code paths; `make bench BENCH_FLAGS=--quick` runs them all."""
    data = tmp_path / "data"
    write_jsonl(data / "gsm8k_train.jsonl", [{"question": t, "answer": t[::-1]} for t in random_texts(300)])
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", *QUICK, "--quick", "--tokenizer", "packcli:demo"]
        + ["--data", str(data), "--out", str(tmp_path / "out")],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    records = sorted((tmp_path / "out" / "records").iterdir())
    assert sorted(json.loads(r.read_text())["benchmark"] for r in records) == sorted(QUICK)
    for path in records:
        record = json.loads(path.read_text())
        assert record["compared_with"] is None and record["commit"]
        for name, case in record["cases"].items():
            assert case["programs"]["new"]["reason"] is None, (path.name, name)
            assert len(case["programs"]["new"]["runs"]) == 1
        if record["benchmark"] == "pack-pairs":  # every pair read back from the output by an entry, and a bound
            [run] = record["cases"]["pairs-n"]["programs"]["new"]["runs"]
            assert run["pair_count"] == 500 and run["pair_tokens"] == run["real_tokens"]
            assert 1 <= run["rows"] / run["pair_lb_rows"] < 1.1
