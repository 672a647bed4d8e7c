"""Worker processes: order kept, errors carried back, and output independent of their number."""

from __future__ import annotations

import json
import os

import pytest
from helpers import load_rows, random_texts, real_segments, unigram_tokenizer, write_jsonl

from packcli.core.errors import PackcliError
from packcli.tokenize.workers import WorkerPool, can_fork

pytestmark = pytest.mark.skipif(not can_fork(), reason="worker processes need fork")


class FakeBatch:
    def __init__(self, n: int):
        self.n = n

    def location(self, i: int) -> str:
        return f"input.jsonl:{self.n * 10 + i + 1}"


def test_results_come_back_in_order_from_other_processes():
    pool = WorkerPool(lambda batch: (batch.n * batch.n, os.getpid()), 3)
    try:
        out = list(pool.map((FakeBatch(n) for n in range(50)), ahead=6))
    finally:
        pool.close()
    assert [batch.n for batch, _, _ in out] == list(range(50))
    assert [square for _, (square, _), _ in out] == [n * n for n in range(50)]
    assert os.getpid() not in {pid for _, (_, pid), _ in out}
    assert all(isinstance(seconds, float) and seconds >= 0 for _, _, seconds in out)  # each worker's own time


def test_an_error_in_a_worker_is_raised_here_unchanged():
    def build(batch):
        if batch.n == 7:
            raise PackcliError(f"{batch.location(2)}: bad record", usage=True)
        return batch.n

    pool = WorkerPool(build, 2)
    try:
        with pytest.raises(PackcliError, match=r"^input.jsonl:73: bad record$") as caught:
            list(pool.map((FakeBatch(n) for n in range(20)), ahead=4))
    finally:
        pool.close()
    assert caught.value.usage


def test_a_dead_worker_is_one_clear_error():
    pool = WorkerPool(lambda batch: os._exit(3) if batch.n == 2 else batch.n, 2)
    try:
        with pytest.raises(PackcliError, match="worker process died.*--workers"):
            list(pool.map((FakeBatch(n) for n in range(10)), ahead=4))
    finally:
        pool.close()


def assert_same_files(a, b, ignore: tuple[str, ...]) -> None:
    """The same files under both directories, byte for byte, except those named in ignore."""

    def files(root):
        return sorted(p.relative_to(root) for p in root.rglob("*") if p.is_file() and p.name not in ignore)

    names = files(a)
    assert names and names == files(b)
    for name in names:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


CHAT = [
    [{"role": "user", "content": "Hi? ✓"}, {"role": "assistant", "content": "Hello, <|im_end|> there."}],
    [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4"},
    ],
]


def _records(kind: str, n: int) -> list[dict]:
    texts = random_texts(n, seed=3, max_words=40)
    texts = [t + (" naïve 日本 👍🏽" if i % 7 == 0 else "") for i, t in enumerate(texts)]
    if kind == "text":
        return [{"text": t} for t in texts]
    if kind == "prompt":
        return [{"q": t[: len(t) // 2], "a": t[len(t) // 2 :]} for t in texts]
    return [{"messages": CHAT[i % 2]} for i in range(n)]


@pytest.mark.parametrize(
    "kind, options",
    [
        ("text", ()),
        ("text", ("--tokenizer-backend", "hf", "--mode", "concat")),
        ("prompt", ("--prompt-field", "q", "--completion-field", "a", "--format", "npy")),
        ("chat", ("--messages-field", "messages")),
    ],
)
def test_output_is_byte_identical_for_any_number_of_workers(tmp_path, packed, kind, options):
    # several read batches (1024 records each), so each worker gets some
    path = write_jsonl(tmp_path / "in.jsonl", _records(kind, 2600 if kind != "chat" else 1300))
    common = ("--tokenizer", "packcli:demo", "--seq-len", 256, "--buffer-size", 500, *options)
    outs = {w: packed(path, *common, "--workers", w) for w in (1, 2, 3)}
    for w in (2, 3):
        assert_same_files(outs[1], outs[w], ignore=("report.json",))
    reports = {w: json.loads((outs[w] / "report.json").read_text()) for w in outs}
    assert reports[1]["workers"] == {"kind": "threads", "count": 1}
    own_threads = kind == "text" and reports[3]["tokenizer_backend"] == "hf"  # ingest.worker_processes
    assert reports[3]["workers"] == {"kind": "threads" if own_threads else "processes", "count": 3}
    assert reports[3]["timings"]["tokenize"] > 0
    assert len({r["tokenizer_backend"] for r in reports.values()}) == 1


def test_hf_backend_on_a_unigram_tokenizer_is_the_same_for_any_number_of_workers(tmp_path, packed):
    """Plain text on the HF backend runs on the tokenizer's own threads, not in processes; a
    SentencePiece-style tokenizer (which only it can take) gives the same shards for every
    --workers, and the tokenizer's own ids."""
    records = _records("text", 2600)
    tokenizer = unigram_tokenizer(tmp_path / "unigram", [r["text"] for r in records])
    path = write_jsonl(tmp_path / "in.jsonl", records)
    common = (
        "--tokenizer",
        tokenizer,
        "--seq-len",
        256,
        "--buffer-size",
        500,
        "--mode",
        "concat",
        "--no-eos",
        "--no-shuffle",
    )
    outs = {w: packed(path, *common, "--workers", w) for w in (1, 2, 3)}
    for w in (2, 3):
        assert_same_files(outs[1], outs[w], ignore=("report.json",))
    reports = {w: json.loads((outs[w] / "report.json").read_text()) for w in outs}
    assert {r["tokenizer_backend"] for r in reports.values()} == {"hf"}
    assert reports[2]["workers"] == {"kind": "threads", "count": 2}
    rows, _ = load_rows(outs[2])
    from packcli.tokenize.tokenizer import load_tokenizer

    backend = load_tokenizer(str(tokenizer)).backend_tokenizer
    want = [i for r in records for i in backend.encode(r["text"], add_special_tokens=False).ids]
    got = [t for segment in real_segments(rows) for t in segment]
    assert got == want


def test_a_bad_record_found_in_a_worker_names_its_line(tmp_path, cli):
    # a template whose render of a conversation's start is not a prefix of the whole
    # conversation: packcli cannot find the assistant turn in record 1500 (batch 2)
    template = tmp_path / "reversed.jinja"
    template.write_text(
        "{% for message in messages|reverse %}{{ message['role'] + ':\n' + message['content'] + '\n' }}{% endfor %}"
        "{% if add_generation_prompt %}{{ 'assistant:\n' }}{% endif %}"
    )
    records = [{"messages": [{"role": "assistant", "content": f"answer {i}"}]} for i in range(1499)]
    records.append({"messages": CHAT[0]})
    path = write_jsonl(tmp_path / "chat.jsonl", records)
    out = tmp_path / "out"
    result = cli(
        "pack",
        path,
        "-o",
        out,
        "--tokenizer",
        "packcli:demo",
        "--seq-len",
        128,
        "--messages-field",
        "messages",
        "--chat-template",
        template,
        "--workers",
        2,
    )
    assert result.exit_code == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and f"{path}:1500: the chat template does not render turn 1" in lines[0]
    assert not (out / "manifest.json").exists()
    assert not [p for p in out.iterdir() if p.name.startswith(".shard-")]


@pytest.mark.parametrize("options", [("--mode", "bin"), ("--mode", "concat", "--format", "npy")])
def test_tiktoken_shards_are_byte_identical_to_hf_shards(tmp_path, packed, options):
    # The fast path's promise, end to end: the same shards. Only the files
    # that name the backend differ (report, manifest, the run record for --resume).
    # Texts with added tokens, unicode and long words.
    records = _records("text", 2600)
    records += [{"text": "x" * 3000 + " <|im_end|>" + " 𝔘𝔫𝔦𝔠𝔬𝔡𝔢\u200b  \t\n\n end"}, {"text": "<|im_end|><|im_end|>"}]
    path = write_jsonl(tmp_path / "in.jsonl", records)
    common = ("--tokenizer", "packcli:demo", "--seq-len", 256, "--buffer-size", 500, *options)
    outs = {b: packed(path, *common, "--tokenizer-backend", b) for b in ("hf", "auto")}
    backends = {b: json.loads((outs[b] / "report.json").read_text())["tokenizer_backend"] for b in outs}
    assert backends == {"hf": "hf", "auto": "tiktoken"}
    assert_same_files(outs["hf"], outs["auto"], ignore=("report.json", "manifest.json", ".packcli-run.json"))


def test_an_input_of_one_batch_is_tokenized_here_without_forking(tmp_path, packed, monkeypatch):
    """Under READ_BATCH records there is one batch in all: no worker could share it, so none
    is forked, and the shards are those of more workers' runs; two batches fork."""
    from packcli.engine import ingest

    pools: list[int] = []

    class CountedPool(WorkerPool):
        def __init__(self, build, workers):
            pools.append(workers)
            super().__init__(build, workers)

    monkeypatch.setattr(ingest, "WorkerPool", CountedPool)
    path = write_jsonl(tmp_path / "in.jsonl", _records("text", ingest.READ_BATCH - 1))
    common = ("--tokenizer", "packcli:demo", "--seq-len", 256)
    one, two = packed(path, *common, "--workers", 1), packed(path, *common, "--workers", 2)
    assert_same_files(one, two, ignore=("report.json",))
    assert json.loads((two / "report.json").read_text())["workers"] == {"kind": "threads", "count": 1}
    assert pools == []
    longer = write_jsonl(tmp_path / "longer.jsonl", _records("text", ingest.READ_BATCH + 1))
    out = packed(longer, *common, "--workers", 2)
    assert pools == [2]
    assert json.loads((out / "report.json").read_text())["workers"] == {"kind": "processes", "count": 2}


def test_the_workers_are_gone_before_the_plan(tmp_path, packed, monkeypatch):
    """Their memory (the tokenizer, its caches) is not held while rows are planned and written."""
    import multiprocessing

    from packcli.engine import ingest
    from packcli.engine import job as pipeline

    alive_at_plan: list[int] = []
    real_plan = pipeline.plan_window

    def plan_window(*args, **kwargs):
        alive_at_plan.append(len(multiprocessing.active_children()))
        return real_plan(*args, **kwargs)

    monkeypatch.setattr(pipeline, "plan_window", plan_window)
    path = write_jsonl(tmp_path / "in.jsonl", _records("text", 3 * ingest.READ_BATCH))
    out = packed(path, "--tokenizer", "packcli:demo", "--seq-len", 256, "--workers", 2)
    assert json.loads((out / "report.json").read_text())["workers"] == {"kind": "processes", "count": 2}
    assert alive_at_plan == [0]
