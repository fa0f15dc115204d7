"""The py-spy collector (issue 10 item 6): where each rank's Python is while a job hangs, and the one
process that is not in the collective the others wait in named as the culprit. Real dumps:
tests/fixtures/py-spy/ (a two-rank gloo job with rank 1 held back, see its README)."""

from __future__ import annotations

import json
from pathlib import Path

from collectors.node.py_spy import COLLECTOR, parse

FIX = Path(__file__).resolve().parent / "fixtures" / "py-spy"


def test_each_process_gets_its_main_thread_stack_and_where_it_is():
    (waiting,), notes = parse((FIX / "rank0.txt").read_text())
    assert not notes
    assert waiting.kind == "py-stack" and waiting.attrs["pid"] == 782 and waiting.attrs["thread"] == "MainThread"
    assert waiting.attrs["where"] == "collective" and waiting.attrs["function"] == "all_reduce"
    assert waiting.attrs["frames"][0] == "all_reduce (torch/distributed/distributed_c10d.py:3252)"
    assert waiting.attrs["frames"][2] == "train_step (make_dump.py:26)"
    (lagging,), _ = parse((FIX / "rank1.txt").read_text())
    assert lagging.attrs["where"] == "python" and lagging.line == "load_batch (make_dump.py:20)"
    # the collector's own output: one dump after the other, as its loop prints them
    both, notes = parse((FIX / "rank0.txt").read_text() + (FIX / "rank1.txt").read_text())
    assert [f.attrs["pid"] for f in both] == [782, 783] and not notes


def test_py_spy_errors_and_an_idle_node_are_notes_not_findings():
    findings, notes = parse("Error: Failed to open process 1234 - Permission denied (os error 13)\n")
    assert not findings and notes and "Permission denied" in notes[0]
    findings, notes = parse("")
    assert not findings and notes


def test_py_spy_runs_only_when_asked_for():
    from bot.investigate import select_collectors

    assert COLLECTOR.opt_in and COLLECTOR.root
    assert "py-spy" not in [c.name for c in select_collectors()]
    assert [c.name for c in select_collectors("py-spy")] == ["py-spy"]


def test_a_hung_job_names_the_process_that_is_not_in_the_collective(engine, tmp_path):
    from bot.render import as_dict, blocks, culprit_line, markdown
    from collectors.bundle import read_bundle, write_bundle
    from test_bundle import node

    nodes = {"gpu01": node("gpu01", [("py-spy", (FIX / "rank0.txt").read_text(), 0)]),
             "gpu02": node("gpu02", [("py-spy", (FIX / "rank1.txt").read_text(), 0)])}
    path = write_bundle(tmp_path / "hang", nodes, job="9")
    with read_bundle(path) as bundle:
        diagnosis = engine.diagnose_bundle(bundle)
    for lang in ("en", "zh"):
        doc = as_dict(diagnosis, lang=lang)
        c = doc["culprit"]
        assert (c["node"], c["reason"], c["process"]["pid"]) == ("gpu02", "stuck-elsewhere", 783)
        assert c["process"]["frames"][0] == "load_batch (make_dump.py:20)" and c["process"]["waiting"] == 1
        said = culprit_line(doc, lang)
        assert "pid 783, gpu02" in said and "load_batch (make_dump.py:20)" in said
        assert said in markdown.render(doc) and said in json.dumps(blocks.render(doc).blocks, ensure_ascii=False)
    # both in the collective (or both elsewhere): nobody is singled out
    nodes["gpu02"] = node("gpu02", [("py-spy", (FIX / "rank0.txt").read_text(), 0)])
    with read_bundle(write_bundle(tmp_path / "all-waiting", nodes, job="9")) as bundle:
        assert as_dict(engine.diagnose_bundle(bundle))["culprit"] is None
